"""Helpers of the CUDA suite (tests/gpu): real digits runs on CUDA, in process or as a
`trainforge` subprocess (through tests/gpu/worker.py where process-wide settings come first)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from trainforge.engine.callbacks import Callback

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "config" / "vit_digits.yaml"
WORKER = REPO / "tests" / "gpu" / "worker.py"
# Quiet, short digits runs: no evaluation or periodic checkpoint unless a test asks.
QUIET = {
    "logging.progress_bar": "false",
    "logging.tensorboard": "false",
    "logging.mlflow": "false",  # the GPU suite needs no tracking extra
    "logging.wandb": "false",
    "hardware.telemetry": "false",
    "checkpoint.save_every_epochs": "null",
    "checkpoint.save_best": "false",
    "evaluation.eval_every_epochs": "null",
    "training.device": "cuda",
}


def overrides(tmp_path: Path, name: str, sets: dict) -> list[str]:
    # Final models go to the test's folder, never the checkout's models/.
    where = {"output.dir": tmp_path, "output.run_name": name, "output.models_dir": tmp_path / "m"}
    merged = {**QUIET, **where, **sets}
    return [f"{k}={v}" for k, v in merged.items()]


def resolve(tmp_path: Path, name: str, config: Path = DIGITS, **sets):
    from trainforge.config import validate
    from trainforge.hardware import detect

    platform = detect()
    resolved = validate(
        config, platform=platform, profile="cpu", overrides=overrides(tmp_path, name, sets)
    )
    return resolved, platform


def train_run(tmp_path: Path, name: str, config: Path = DIGITS, **sets) -> tuple[object, dict]:
    """A real run in this process; (the RunSummary, summary.json)."""
    from trainforge.train import train

    resolved, platform = resolve(tmp_path, name, config, **sets)
    summary = train(resolved, platform)
    return summary, json.loads((tmp_path / name / "summary.json").read_text())


def make_trainer(tmp_path: Path, name: str, callbacks=(), **sets):
    """A Trainer on the digits task on CUDA, built as a run builds it, not yet fitted."""
    from trainforge.engine.state import seed_everything
    from trainforge.engine.trainer import Trainer
    from trainforge.tasks import build_task

    resolved, _ = resolve(tmp_path, name, **sets)
    config = resolved.config
    seed_everything(config.training.seed)  # as the train entry does: the same initial weights
    task = build_task(config, torch.device("cuda"))
    return Trainer(
        task, config, run_dir=tmp_path / name, device=torch.device("cuda"),
        callbacks=list(callbacks),
    )  # fmt: skip


def records(run_dir: Path, split: str = "train") -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == split]


def cli_train(tmp_path: Path, name: str, *extra: str, worker: list[str] = (), **sets):
    """`trainforge train config/vit_digits.yaml` in a subprocess, through `worker.py` when it
    needs process-wide settings first (deterministic algorithms, a memory cap, one-rank FSDP2)."""
    args = [a for s in overrides(tmp_path, name, sets) for a in ("--set", s)]
    entry = [str(WORKER), *worker, "--"] if worker else ["-m", "trainforge"]
    cmd = [sys.executable, *entry, "train", str(DIGITS), *args, *extra]
    env = dict(os.environ, PYTHONUNBUFFERED="1", CUBLAS_WORKSPACE_CONFIG=":4096:8")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=REPO)


class Losses(Callback):
    """Every optimizer step's loss as a float (a device read per step: for tests only)."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_step_end(self, trainer) -> None:
        self.losses.append(float(trainer.last_step_loss))
