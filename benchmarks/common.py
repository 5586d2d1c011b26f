"""Shared helpers of the benchmarks: side-by-side timing, the machine line, the table, and the
peak memory of each case (`MemoryMeter`)."""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from typing import Any, TypeVar

from trainforge.observe.quiet import install as _quiet_console

_quiet_console()  # trainforge's narrow filters for known library noise, as the CLI installs them
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
    (or a richer result). Each round starts one candidate later than the round before, so no
    candidate always runs first or always follows the same neighbour."""
    times: dict[str, list[T]] = {name: [] for name in candidates}
    names = list(candidates)
    for round_index in range(repeats):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(candidates[name]())
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


# --- peak memory per case -----------------------------------------------------------------

MIB = 2**20
CLEAR_REFS = "/proc/{pid}/clear_refs"
STATUS = "/proc/{pid}/status"


def _vm_kib(pid: int | str, field: str) -> int | None:
    """A `Vm*` field of /proc/PID/status in KiB, or None where there is no such file."""
    try:
        with open(STATUS.format(pid=pid)) as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak_rss(pid: int | str = "self") -> bool:
    """Reset the process's peak RSS (VmHWM) to its current RSS: write "5" to clear_refs
    (Linux). False where that file is missing or not writable."""
    try:
        with open(CLEAR_REFS.format(pid=pid), "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


def peak_rss_bytes(pid: int | str = "self") -> int | None:
    """Peak RSS since the last reset (VmHWM), or None without /proc."""
    kib = _vm_kib(pid, "VmHWM")
    return None if kib is None else kib * 1024


def current_rss_bytes(pid: int | str = "self") -> int | None:
    kib = _vm_kib(pid, "VmRSS")
    return None if kib is None else kib * 1024


def _lifetime_peak_rss_bytes() -> int:
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


@dataclass
class PeakMemory:
    """Peak memory of one case.

    rss_mib: the process's peak RSS during the case (VmHWM reset at the start), or, where
      /proc/self/clear_refs is not writable, the lifetime peak (`getrusage` ru_maxrss; then
      `method` says so and the figure can belong to an earlier case).
    rss_growth_mib: that peak minus the RSS at the start of the case.
    children_mib: the sum of the live child processes' (loader workers') peak RSS during the
      case (each one's VmHWM, reset at the start); pages they share with each other or with
      the parent count once per process, so this is an upper bound. None without children.
    cuda_mib: peak CUDA memory allocated during the case (`torch.cuda.max_memory_allocated`
      after `reset_peak_memory_stats`), None off CUDA.
    """

    rss_mib: float = 0.0
    rss_growth_mib: float = 0.0
    children_mib: float | None = None
    cuda_mib: float | None = None
    method: str = "VmHWM"


class MemoryMeter:
    """Measures one case: `with MemoryMeter(device) as meter: ...`, then `meter.result`.

    `children` gives the process ids of the case's own child processes (e.g. its loader's
    workers, alive when the case starts); other processes' memory is not the case's.
    """

    def __init__(self, device: Any = None, children: Callable[[], list[int]] | None = None) -> None:
        self.device = device
        self.children = children
        self.result = PeakMemory()

    def _cuda(self) -> bool:
        return self.device is not None and getattr(self.device, "type", str(self.device)) == (
            "cuda"
        )

    def __enter__(self) -> MemoryMeter:
        import gc

        gc.collect()  # garbage of an earlier case is not this case's memory
        self._start = current_rss_bytes()
        self._reset = reset_peak_rss()
        pids = self.children() if self.children else []
        self._children = [pid for pid in pids if reset_peak_rss(pid)]
        if self._cuda():
            import torch

            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._cuda_start = torch.cuda.memory_allocated(self.device)
        return self

    def __exit__(self, *exc: object) -> None:
        result = self.result
        if self._cuda():
            import torch

            torch.cuda.synchronize(self.device)
            # the case's own: tensors alive before it (an earlier case's) are not its memory
            peak = torch.cuda.max_memory_allocated(self.device) - self._cuda_start
            result.cuda_mib = peak / MIB
        peak = peak_rss_bytes() if self._reset else None
        if peak is None:
            peak = _lifetime_peak_rss_bytes()
            result.method = "ru_maxrss (lifetime peak: /proc/self/clear_refs not writable)"
        result.rss_mib = peak / MIB
        result.rss_growth_mib = max(0.0, (peak - (self._start or peak)) / MIB)
        peaks = [peak_rss_bytes(pid) for pid in self._children]
        peaks = [p for p in peaks if p is not None]
        if peaks:
            result.children_mib = sum(peaks) / MIB


def measure_memory(
    fn: Callable[[], T], device: Any = None, children: Callable[[], list[int]] | None = None
) -> tuple[T, PeakMemory]:
    """(fn(), the case's peak memory); `children` as in `MemoryMeter`."""
    with MemoryMeter(device, children) as meter:
        value = fn()
    return value, meter.result


def memory_note(result: PeakMemory) -> str:
    """One line under a table saying how its memory columns were measured."""
    if result.method != "VmHWM":
        return f"memory: peak RSS by {result.method}"
    return (
        "memory: peak RSS = the process's VmHWM over the case (reset by writing 5 to "
        "/proc/self/clear_refs at its start); +MiB = that peak minus the RSS at the start"
    )
