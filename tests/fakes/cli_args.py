"""Command-line arguments of a tiny digits run that checkpoints every 2 steps, shared by the
tests that train through the real `trainforge train`: the tiny ViT of fakes.runs as `--set`
flags. It draws no report (`logging.report`): a test that reads one adds
`--set logging.report=true`."""

from __future__ import annotations

from fakes.runs import REPO, TINY_VIT

__all__ = ["DIGITS_TINY", "REPO", "set_flags"]


def set_flags(values: dict) -> list[str]:
    """{key: value} as `--set key=value` arguments."""
    return [part for key, value in values.items() for part in ("--set", f"{key}={value}")]


DIGITS_TINY = [
    str(REPO / "config/vit_digits.yaml"), "--profile", "cpu",
    *set_flags(TINY_VIT),
    "--set", "checkpoint.save_steps=2", "--set", "checkpoint.save_every_epochs=null",
    "--set", "checkpoint.save_best=false", "--set", "evaluation.eval_every_epochs=null",
    "--set", "logging.tensorboard=false", "--set", "logging.progress_bar=false",
    "--set", "logging.report=false",  # drawn only where a test reads it
]  # fmt: skip
