"""docs/configuration.md is the schema's own reference and must not go stale."""

from __future__ import annotations

from pathlib import Path

from trainforge.config.reference import render
from trainforge.config.schema import RunConfig, leaf_paths

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_reference_is_up_to_date():
    assert DOC.read_text() == render(), "run: python -m trainforge.config.reference"


def test_every_field_is_documented():
    text = render()
    for path in leaf_paths(RunConfig):
        if "." in path:
            assert f"`{path}`" in text, path
