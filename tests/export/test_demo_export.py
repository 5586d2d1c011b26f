"""The full demo model (config/vit_digits.yaml, 40 epochs) through every format and the bench.

Slow: about a minute of training on a laptop CPU. The same bars as the fast tests, on the
model `make demo` ships, plus the embedded profile's latency target for the ONNX model.
"""

from __future__ import annotations

import pytest

from trainforge.export import ExportOptions, export
from trainforge.export.bench import EDGE_TARGET_MS, bench, render


@pytest.mark.slow
def test_demo_model_exports_within_the_bars(tmp_path, digits_trainer):
    run = digits_trainer(tmp_path, epochs=40, name="demo")
    options = ExportOptions(finetune_epochs=1)
    results = {r.folder.name: r.summary for r in export(run, ["all"], options)}
    reference = results["onnx"]["reference_metrics"]["accuracy"]
    assert reference >= 0.95
    assert results["onnx"]["max_abs_diff"] <= 1e-4
    for name in ("int8", "int8-onnx"):
        assert reference - results[name]["metrics"]["accuracy"] <= 0.01 + 1e-9
    assert reference - results["pruned"]["metrics"]["accuracy"] <= 0.02 + 1e-9
    rows, _ = bench([run / "export"], batch_size=32, warmup=20, runs=200)
    print(render(rows, 32))
    onnx = next(r for r in rows if r.artifact == "onnx")
    assert onnx.batch1.p50_ms < EDGE_TARGET_MS
