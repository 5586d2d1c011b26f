"""For the sweep tests: the digits config, tiny trials, the command to run a sweep, and the
study as a plain Optuna client reads it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "config" / "vit_digits.yaml"
# Tiny trials: 20 steps, a validation every 5, one CPU thread, no TensorBoard.
TINY = [
    "--max_steps", "20",
    "--set", "evaluation.eval_steps=5",
    "--set", "evaluation.eval_every_epochs=null",
    "--set", "training.num_threads=1",
    "--set", "logging.tensorboard=false",
]  # fmt: skip


def sweep_args(space: Path, trials: int, name: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "trainforge", "sweep", str(DIGITS), "--space", str(space),
        "--trials", str(trials), "--name", name, *TINY, *extra,
    ]  # fmt: skip


def run_sweep(cwd: Path, args: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def refuse_sweep(cwd: Path, args: list[str]):
    """The `sweep_args` command through `cli.main()` in this process (`run_main`): a sweep
    refused before its first trial costs no interpreter start-up. Trials still run as the
    sweep's own child processes."""
    from fakes.in_process import run_main

    assert args[:3] == [sys.executable, "-m", "trainforge"], args
    return run_main(*args[3:], cwd=cwd)


def load_study(folder: Path):
    """The study as a plain Optuna client reads it from the journal."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    path = str(folder / "study.journal")
    storage = optuna.storages.JournalStorage(
        JournalFileBackend(path, lock_obj=JournalFileOpenLock(path))
    )
    return optuna.load_study(study_name=folder.name, storage=storage)
