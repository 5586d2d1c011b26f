"""Shared helpers of the benchmarks: side-by-side timing, the machine line, the table."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from importlib import metadata


def machine_line() -> str:
    import torch

    versions = []
    for name in ("torch", "torchvision", "lightning", "transformers"):
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
    return (
        f"{platform.machine()} {os.cpu_count()} cores, torch threads "
        f"{torch.get_num_threads()}, {device}; python {platform.python_version()}, "
        + ", ".join(versions)
    )


def alternate(candidates: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Run each candidate once per round, in turn, `repeats` rounds; each returns seconds."""
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, fn in candidates.items():
            times[name].append(fn())
    return times


def median(values: list[float]) -> float:
    return statistics.median(values)


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def table(title: str, header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    out = [title, "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)), line]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)
