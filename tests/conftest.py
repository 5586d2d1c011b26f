"""Shared helpers: run the real `trainforge` command in a subprocess, and the session's one
trained digits run (tests/fakes/runs.py) that export, evaluate, report and CLI tests read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.cifar_archive import tiny_cifar  # noqa: F401  (a fixture shared by every folder)

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600, env: dict | None = None):
    """Run `python -m trainforge ARGS`; returns the CompletedProcess (text mode)."""
    full_env = dict(os.environ)
    full_env.update({"COLUMNS": "200", "PYTHONUNBUFFERED": "1"})
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "trainforge", *args],
        cwd=cwd or REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


@pytest.fixture(autouse=True, scope="session")
def _peak_cache(tmp_path_factory):
    """Measured device peaks (hardware.peak_probe) go to a cache of this session, inherited by
    every `trainforge` subprocess: the user's cache is never touched, and each session
    measures once per device, precision and thread count."""
    if not os.environ.get("TRAINFORGE_CACHE_DIR"):
        os.environ["TRAINFORGE_CACHE_DIR"] = str(tmp_path_factory.mktemp("trainforge-cache"))


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="session")
def digits_run(tmp_path_factory) -> Path:
    """One digits ViT trained per session (fakes.runs.train_digits): config.resolved.yaml,
    model.safetensors, checkpoints/best_model. Read it; a test that changes a run trains
    its own."""
    from fakes.runs import train_digits

    return train_digits(tmp_path_factory.mktemp("shared-runs"))


@pytest.fixture(scope="session")
def g2p_run(tmp_path_factory) -> Path:
    """One finished 4-step G2P run per session, trained by the DGX Spark plan's command line
    (small splits, a tiny model made on first use): the project folder, its run under
    runs/g2p_cmudict-t with checkpoint-4 and its closing val and test records. Read it; a
    test that changes a run trains its own (fakes.runs.g2p_project)."""
    from fakes.runs import g2p_plan_command, train_g2p

    return train_g2p(tmp_path_factory.mktemp("shared-g2p"), g2p_plan_command(4))
