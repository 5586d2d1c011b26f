"""benchmarks/inference.py in a tiny configuration: the table and the ratios it returns."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


@pytest.mark.slow  # trains the digits ViT for 4 epochs and exports every format: ~40 s
def test_inference_benchmark_times_every_artifact_side_by_side():
    import inference

    text, ratios = inference.run(epochs=4, runs=3, warmup=1)
    for artifact in ("onnx", "int8", "int8-onnx", "pruned", "safetensors"):
        assert f"\n{artifact} " in text, artifact
    assert "edge target (batch-1 p50 < 5 ms)" in text
    assert "fp32 reference" in text
    assert ratios["infer_onnx_b1_p50_ms"] > 0
    assert ratios["infer_onnx_vs_torch_b1"] > 0
