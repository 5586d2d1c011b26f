"""The web queue benchmark runs (one epoch per run here) and reports both ratios."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import web_queue

pytestmark = pytest.mark.slow  # six real training processes


def test_two_runs_together_and_one_after_the_other_are_timed():
    text, ratios = web_queue.run(epochs=1, repeats=1)
    assert "one after the other" in text and "together (queue, default)" in text
    assert ratios["web_two_runs_queued_vs_sequential"] > 0
    assert ratios["web_two_runs_parallel_vs_sequential"] > 0
