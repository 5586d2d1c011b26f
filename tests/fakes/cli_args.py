"""Command-line arguments of a tiny digits run that checkpoints every 2 steps, shared by the
tests that train through the real `trainforge train`. It draws no report (`logging.report`):
a test that reads one adds `--set logging.report=true`."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DIGITS_TINY = [
    str(REPO / "config/vit_digits.yaml"), "--profile", "cpu",
    "--set", "model.embedding_dim=16", "--set", "model.num_layers=1",
    "--set", "model.num_heads=2", "--set", "model.mlp_size=16",
    "--set", "checkpoint.save_steps=2", "--set", "checkpoint.save_every_epochs=null",
    "--set", "checkpoint.save_best=false", "--set", "evaluation.eval_every_epochs=null",
    "--set", "logging.tensorboard=false", "--set", "logging.progress_bar=false",
    "--set", "logging.report=false",  # drawn only where a test reads it
]  # fmt: skip
