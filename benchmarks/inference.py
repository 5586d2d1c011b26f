"""Inference latency of the export artifacts, side by side in one run (`trainforge bench-infer`).

The demo's digits ViT (config/vit_digits.yaml) is trained by the real engine for a short
budget, exported to every format by the real pipeline (ONNX, dynamic INT8 for PyTorch, static
INT8 ONNX, 50 % pruned with one fine-tune epoch, fp32 safetensors), and every artifact is
timed by `trainforge.export.bench` in this one process on the same inputs: batch 1 and
batch 32, warm-up outside the timed calls, the p50 and p99 of a fixed number of calls.

Ratios are against the fp32 PyTorch model measured in the same run; the training-pipeline
assets README's embedded profile asks for post-optimisation inference under 5 ms, checked on
the ONNX model's batch-1 p50. Accuracy next to the fp32 model's comes from each artifact's
export summary.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import table, torch_threads

from trainforge.export import ExportOptions, export
from trainforge.export.bench import EDGE_TARGET_MS, bench, render

BATCH = 32


def _export_tests_helpers():
    """tests/export/conftest.py (the export tests' digits run: the same model and settings),
    under its own module name: `make bench` has another `conftest` imported already."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "tests" / "export" / "conftest.py"
    spec = importlib.util.spec_from_file_location("trainforge_export_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(epochs: int = 15, runs: int = 200, warmup: int = 20) -> tuple[str, dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix="trainforge-bench-") as work, torch_threads(1):
        run_dir = _export_tests_helpers().train_digits(Path(work), epochs, name="bench-digits")
        results = export(run_dir, ["all"], ExportOptions(finetune_epochs=1, latency_runs=20))
        accuracy = {r.folder.name: r.summary.get("metrics", {}).get("accuracy") for r in results}
        reference = next(iter(results)).summary.get("reference_metrics", {}).get("accuracy")
        rows, notes = bench([run_dir / "export"], batch_size=BATCH, warmup=warmup, runs=runs)
    acc_rows = [
        [name, f"{100 * acc:.2f} %" if acc is not None else "-"] for name, acc in accuracy.items()
    ]
    acc_rows.insert(0, ["fp32 reference", f"{100 * reference:.2f} %" if reference else "-"])
    text = "\n".join(
        [
            f"Inference (trainforge bench-infer): digits ViT trained {epochs} epochs, "
            f"1 torch thread, {runs} timed calls after {warmup} warm-up, batch 1 and {BATCH}",
            render(rows, BATCH),
            *notes,
            table("validation accuracy per artifact", ["artifact", "accuracy"], acc_rows),
        ]
    )
    by_name = {(r.artifact, r.device): r for r in rows}
    ratios: dict[str, float] = {}
    onnx = by_name.get(("onnx", "cpu"))
    torch_fp32 = by_name.get(("safetensors", "cpu"))
    if onnx is not None:
        ratios["infer_onnx_b1_p50_ms"] = onnx.batch1.p50_ms
    if onnx is not None and torch_fp32 is not None:
        ratios["infer_onnx_vs_torch_b1"] = torch_fp32.batch1.p50_ms / onnx.batch1.p50_ms
    text += f"\nedge target: ONNX batch-1 p50 < {EDGE_TARGET_MS:g} ms"
    return text, ratios


if __name__ == "__main__":
    print(run()[0])
