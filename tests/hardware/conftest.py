"""Shared fixtures for the hardware tests: recorded machines under fixtures/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainforge.hardware import Platform, detect, load_fixture

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FIXTURE_NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "probe.json").is_file())


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def recorded():
    """detect() on a recorded machine, by fixture folder name."""

    def _detect(name: str) -> Platform:
        return detect(load_fixture(FIXTURES / name))

    return _detect


@pytest.fixture
def run_without_torch():
    """Run Python `code` in a fresh interpreter; it must exit 0 (it asserts torch stayed out)."""

    def _run(code: str) -> None:
        src = Path(__file__).resolve().parents[2] / "src"
        result = subprocess.run(
            [sys.executable, "-c", code],
            check=False,
            env={**os.environ, "PYTHONPATH": str(src)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr

    return _run
