"""The checkpoint-stall benchmark runs and measures what it claims (small sizes here)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import checkpoint_stall


def test_background_save_stalls_less_than_a_plain_synchronous_save():
    text, ratios = checkpoint_stall.run(width=2048, repeats=3)
    assert "plain torch.save (sync)" in text and "trainforge default (background)" in text
    assert "copy held MiB" in text
    assert 0 < ratios["checkpoint_stall_ratio"] < 1.0
    assert ratios["checkpoint_sync_ratio"] > 0
