"""Shared fixtures for the hardware tests: recorded machines under fixtures/."""

from __future__ import annotations

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
