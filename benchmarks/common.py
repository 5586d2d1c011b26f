"""Shared helpers of the benchmarks: side-by-side timing, the machine line, the table."""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import TypeVar

T = TypeVar("T")


def machine_line() -> str:
    import torch

    versions = []
    for name in ("torch", "torchvision", "lightning", "transformers", "accelerate"):
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    return (
        f"{platform.machine()} {os.cpu_count()} cores (load average {load}), torch threads "
        f"{torch.get_num_threads()}, {device}; python {platform.python_version()}, "
        + ", ".join(versions)
    )


def alternate(candidates: dict[str, Callable[[], T]], repeats: int) -> dict[str, list[T]]:
    """Run each candidate once per round, in turn, `repeats` rounds; each returns seconds
    (or a richer result)."""
    times: dict[str, list[T]] = {name: [] for name in candidates}
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


def bench_threads() -> int:
    """Intra-op threads for the CPU benchmarks: $TRAINFORGE_BENCH_THREADS, else 1.

    One thread by default: on a small machine shared with other work, two OpenMP threads
    spin-wait on each other and one step's time swings tenfold, which no median repairs.
    """
    return int(os.environ.get("TRAINFORGE_BENCH_THREADS", "1"))


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """Run the block with `count` torch intra-op threads, then restore the previous count."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
