"""The sweep tests' fixtures (helpers: fakes/sweeps.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def space_file(tmp_path: Path):
    def write(text: str, name: str = "space.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


# The real single-node Slurm of `make test-slurm`, shared with the launch tests.
from launch.conftest import slurm_cluster  # noqa: E402, F401
