"""A trial's inference latency, the `latency_ms` objective of an edge-aware sweep.

After a trial trains, the sweep runs the export package's own commands on its run folder, as
a user would: `trainforge export RUN --format onnx|int8`, then `trainforge bench-infer` on the
artifact an edge device runs (the ONNX model; for `int8`, the ONNX QDQ model) at batch 1, on
the CPU, with one thread, its results written with `--json` to `RUN/export/latency.json`. The
sweep reads the batch-1 median from there. Commands rather than imports: the export package
sits above the sweep's (it reads run folders, whose training loads the sweep's pruning
callback), and a child keeps the export's torch threads out of the sweep's process.

Optuna has no export step to hang this on; the export package owns exporting and timing, so
this module only names the commands, the artifact to time and where the result is.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from trainforge.runfolder import RunFolder

LATENCY = "latency_ms"
LATENCY_FILE = "latency.json"
# The embedded profile of the training-pipeline assets README: "Post-optimization inference:
# <5ms", the same target `trainforge bench-infer` states its verdict against.
LATENCY_BUDGET_MS = 5.0
# Format -> the artifact folder timed (the ONNX one where a format writes several).
TIMED = {"onnx": "onnx", "int8": "int8-onnx"}
FORMATS = tuple(TIMED)
# bench-infer's defaults are 20 + 200 calls; a trial's small model needs fewer to settle.
WARMUP, RUNS = 20, 100


def latency_file(run_dir: Path) -> Path:
    return RunFolder(run_dir).export_dir / LATENCY_FILE


def commands(run_dir: Path, fmt: str) -> list[list[str]]:
    """Export the trial in `fmt`, then time its artifact at batch 1 with one CPU thread."""
    artifact = RunFolder(run_dir).export_dir / TIMED[fmt]
    base = [sys.executable, "-m", "trainforge"]
    return [
        [*base, "export", str(run_dir), "--format", fmt],
        [*base, "bench-infer", str(artifact), "--batch-size", "1", "--threads", "1",
         "--device", "cpu", "--warmup", str(WARMUP), "--runs", str(RUNS),
         "--json", str(latency_file(run_dir))],
    ]  # fmt: skip


def read_latency(run_dir: Path) -> tuple[float, Path]:
    """(batch-1 p50 in ms, the timed artifact's folder) from the trial's latency.json."""
    row = json.loads(latency_file(run_dir).read_text(encoding="utf-8"))["rows"][0]
    return float(row["batch1"]["p50_ms"]), RunFolder(run_dir).export_dir / row["artifact"]
