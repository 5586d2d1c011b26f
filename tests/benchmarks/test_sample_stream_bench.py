"""The sample-stream benchmark trains both sides and reports a ratio per model (few steps)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import sample_stream


def test_both_models_report_keyed_against_rng_samples_per_s():
    text, ratios = sample_stream.run(steps=3)
    assert "digits ViT" in text and "CIFAR-shaped small ViT" in text
    assert set(ratios) == {"sample_stream_digits", "sample_stream_cifar"}
    assert all(0.2 < value < 5 for value in ratios.values())
