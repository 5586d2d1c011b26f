"""`trainforge bench-infer`: latency and throughput of export artifacts, side by side.

Every artifact runs in this one process on the same inputs (random normal values of its input
shape, fixed seed), at batch 1 and at batch N, on the CPU and, when present, on CUDA, with the
same warm-up and number of timed calls. The table states speed as a ratio against the fp32
PyTorch artifact (or the first row), measured in the same run, next to the absolute numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainforge.errors import UserError
from trainforge.export.artifacts import Artifact, find_artifacts
from trainforge.export.measure import Latency, measure_latency
from trainforge.storage import storage_error

# The embedded profile of the training-pipeline guide: "Post-optimization inference: <5ms".
EDGE_TARGET_MS = 5.0


@dataclass
class BenchRow:
    artifact: str
    runtime: str
    precision: str
    device: str
    batch1: Latency
    batch_n: Latency

    def as_dict(self) -> dict[str, Any]:
        return {
            "artifact": self.artifact,
            "runtime": self.runtime,
            "precision": self.precision,
            "device": self.device,
            "batch1": self.batch1.as_dict(),
            "batch_n": self.batch_n.as_dict(),
        }


def _precision(artifact: Artifact) -> str:
    precision = str(artifact.summary.get("precision", ""))
    return "int8" if precision.startswith("int8") else "fp32"


def default_devices() -> list[str]:
    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


def bench(
    paths: list[Path],
    *,
    batch_size: int = 32,
    warmup: int = 20,
    runs: int = 200,
    threads: int | None = None,
    devices: list[str] | None = None,
) -> tuple[list[BenchRow], list[str]]:
    """Rows of measurements and notes on what was skipped (e.g. INT8 PyTorch on CUDA)."""
    if batch_size < 1 or runs < 1 or warmup < 0:
        raise UserError("--batch-size and --runs must be at least 1, --warmup 0 or more")
    devices = devices or default_devices()
    for device in devices:
        if device not in ("cpu", "cuda"):
            raise UserError(f"--device {device!r} is not cpu or cuda", "use --device cpu or cuda")
        if device == "cuda" and not torch.cuda.is_available():
            raise UserError("--device cuda but torch sees no CUDA device", "use --device cpu")
    artifacts = [a for path in paths for a in find_artifacts(path)]
    if threads:
        torch.set_num_threads(threads)
    rows, notes = [], []
    for artifact in artifacts:
        for device in devices:
            try:
                predict = artifact.predictor(device, threads)
                one = artifact.example_input(1)
                many = artifact.example_input(batch_size)
            except UserError as err:
                notes.append(f"skipped {artifact.name} on {device}: {err.message}")
                continue
            rows.append(
                BenchRow(
                    artifact=artifact.name,
                    runtime=artifact.runtime,
                    precision=_precision(artifact),
                    device=device,
                    batch1=measure_latency(predict, one, warmup=warmup, runs=runs),
                    batch_n=measure_latency(predict, many, warmup=warmup, runs=runs),
                )
            )
    if not rows:
        raise UserError(
            "nothing to benchmark: " + "; ".join(notes), "pass ONNX or PyTorch export artifacts"
        )
    return rows, notes


def _reference(rows: list[BenchRow]) -> BenchRow:
    for row in rows:
        if row.runtime == "torch" and row.device == "cpu" and row.artifact == "safetensors":
            return row
    for row in rows:
        if row.runtime == "torch" and row.device == "cpu":
            return row
    return rows[0]


def render(rows: list[BenchRow], batch_size: int) -> str:
    """A fixed-width table, one row per artifact and device, plus the edge-target verdict."""
    ref = _reference(rows)
    head = (
        f"{'artifact':<12} {'runtime':<12} {'prec':<5} {'device':<6} "
        f"{'b1 p50 ms':>9} {'b1 p99 ms':>9} {'b1 /s':>9} "
        f"{f'b{batch_size} p50 ms':>11} {f'b{batch_size} p99 ms':>11} {f'b{batch_size} /s':>10} "
        f"{'b1 speed':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        one, many = r.batch1, r.batch_n
        lines.append(
            f"{r.artifact:<12} {r.runtime:<12} {r.precision:<5} {r.device:<6} "
            f"{one.p50_ms:>9.3f} {one.p99_ms:>9.3f} {one.samples_per_s:>9,.0f} "
            f"{many.p50_ms:>11.3f} {many.p99_ms:>11.3f} {many.samples_per_s:>10,.0f} "
            f"{ref.batch1.p50_ms / one.p50_ms:>8.2f}x"
        )
    lines.append(
        f"b1 speed: batch-1 p50 of {ref.artifact} ({ref.runtime}, {ref.device}) / the row's, "
        "measured in this run"
    )
    met = [f"{r.artifact}/{r.device}" for r in rows if r.batch1.p50_ms < EDGE_TARGET_MS]
    missed = [f"{r.artifact}/{r.device}" for r in rows if r.batch1.p50_ms >= EDGE_TARGET_MS]
    verdict = (
        f"edge target (batch-1 p50 < {EDGE_TARGET_MS:g} ms): met by {', '.join(met) or 'none'}"
    )
    if missed:
        verdict += f"; missed by {', '.join(missed)}"
    lines.append(verdict)
    return "\n".join(lines)


def write_json(path: Path, rows: list[BenchRow], settings: dict[str, Any]) -> None:
    payload = {"settings": settings, "rows": [r.as_dict() for r in rows]}
    text = json.dumps(payload, indent=2) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        raise storage_error(
            "benchmark results", path, err, len(text), "the exported artifacts are intact"
        ) from None
