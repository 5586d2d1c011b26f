"""A trial's inference latency, the `latency_ms` objective of an edge-aware sweep.

After a trial trains, `python -m trainforge.sweep.latency RUN_DIR FORMAT` exports the trial's
model with `trainforge export`'s pipeline (`onnx` by default, `int8` on request) and times the
artifact with `trainforge bench-infer`'s code (`export.bench.bench`) at batch 1, on the CPU,
with one thread: the setting of an embedded board's single inference stream. The measured
rows go to `RUN_DIR/export/latency.json` (bench-infer's `--json` layout, with the artifact's
folder in its settings), and the sweep reads the batch-1 median from there. It runs in a
child process of its own so the export's torch threads and imports stay out of the sweep.

Optuna has no export step to hang this on; the export package already owns exporting and
timing, so this module only joins the two and picks the artifact to time.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from trainforge.runfolder import RunFolder

LATENCY = "latency_ms"
LATENCY_FILE = "latency.json"
FORMATS = ("onnx", "int8")
# bench-infer's defaults are 20 + 200 calls; a trial's tiny model needs fewer to settle.
WARMUP, RUNS = 20, 100


def latency_file(run_dir: Path) -> Path:
    return RunFolder(run_dir).export_dir / LATENCY_FILE


def command(run_dir: Path, fmt: str) -> list[str]:
    return [sys.executable, "-m", "trainforge.sweep.latency", str(run_dir), fmt]


def read_latency(run_dir: Path) -> tuple[float, str]:
    """(batch-1 p50 in ms, the timed artifact's folder) from the trial's latency.json."""
    data = json.loads(latency_file(run_dir).read_text(encoding="utf-8"))
    return float(data["rows"][0]["batch1"]["p50_ms"]), str(data["settings"]["artifact_dir"])


def _pick(folders: list[Path]) -> Path:
    """The artifact an edge device runs: the ONNX one where the format writes several."""
    for folder in folders:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
        if summary.get("runtime") == "onnxruntime":
            return folder
    return folders[0]


def measure(run_dir: Path, fmt: str) -> dict[str, Any]:
    """Export the trial in `fmt`, time it at batch 1 with one thread; write latency.json."""
    import torch

    from trainforge.export.bench import bench, write_json
    from trainforge.export.options import ExportOptions
    from trainforge.export.pipeline import export

    torch.set_num_threads(1)
    results = export(run_dir, [fmt], ExportOptions())
    artifact = _pick([r.folder for r in results])
    rows, _ = bench([artifact], batch_size=1, warmup=WARMUP, runs=RUNS, threads=1,
                    devices=["cpu"])  # fmt: skip
    settings = {"batch_size": 1, "warmup": WARMUP, "runs": RUNS, "threads": 1,
                "device": "cpu", "format": fmt, "artifact_dir": str(artifact)}  # fmt: skip
    write_json(latency_file(run_dir), rows[:1], settings)
    return {"latency_ms": rows[0].batch1.p50_ms, "artifact": str(artifact)}


def main(argv: list[str]) -> int:
    from trainforge.errors import UserError

    try:
        found = measure(Path(argv[0]), argv[1])
    except UserError as err:
        print(err.line(), file=sys.stderr)
        return 2
    print(f"latency: batch-1 p50 {found['latency_ms']:.4f} ms of {found['artifact']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
