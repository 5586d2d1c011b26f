"""The device's dense matmul peak, measured: a short probe and its cache per machine and runtime.

MFU needs a peak. The data sheet table (`hardware.peaks`) knows data-centre GPUs and Jetson
modules; a CPU, a GB10 whose BF16 figure is derived, a consumer Blackwell card or a GPU at a
lowered clock has none there or one the machine never reaches. So a run also measures what the
device does on large square matmuls in the run's precision (fp32 with the process's TF32
setting, or bf16/fp16 operands as autocast gives them) and reports MFU against that as well.

The probe times `torch.mm` in synchronised blocks, keeps the fastest, and caches the result
in a JSON file keyed by host, device, precision, thread count and the torch/CUDA versions, so
a machine pays for it once. Written by hand: no library measures a dense peak and caches it.
`torch.utils.benchmark.Timer` was considered for the timing; importing it loads
`torch.utils.cpp_extension`, which prints a warning on every machine without a CUDA toolkit,
and a run prints only its own lines.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CACHE_ENV = "TRAINFORGE_CACHE_DIR"
CACHE_FILE = "measured_peaks.json"
# Square matmul sizes: large enough to reach the plateau, small enough to take well under a
# second (8192^3 x 2 = 1.1 TFLOP: ~1.5 ms on an H100 in bf16). On a CPU with few threads a
# 512 matmul (0.27 GFLOP, a few ms) reaches the plateau and fits in one scheduler time slice,
# so on a shared machine some blocks run undisturbed; more threads need 1024 to keep busy.
SIZE_CUDA = 8192
SIZE_CPU_FEW_THREADS = 512
SIZE_CPU = 1024
MIN_RUN_TIME_S = 0.5


@dataclass(frozen=True)
class MeasuredPeak:
    """A measured dense matmul rate: TFLOP/s, what was measured and whether it came cached."""

    tflops: float
    precision: str
    device_name: str
    size: int
    cached: bool


def cache_dir() -> Path:
    """`TRAINFORGE_CACHE_DIR`, else `$XDG_CACHE_HOME/trainforge`, else ~/.cache/trainforge."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trainforge"


def device_label(device: Any) -> str:
    """The device's name as the cache and the output show it (the GPU's name, or the CPU's)."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform

    return f"CPU {platform.processor() or platform.machine()}"


def cache_key(device: Any, precision: str) -> str:
    """Host, device, precision, threads and runtime versions: what the peak depends on."""
    import torch

    matmul = torch.get_float32_matmul_precision() if precision == "fp32" else "-"
    return " | ".join(
        [
            socket.gethostname(),
            device_label(device),
            precision,
            f"fp32 matmul {matmul}",
            f"threads {torch.get_num_threads()}",
            f"torch {torch.__version__}",
            f"cuda {torch.version.cuda}",
        ]
    )


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # missing or damaged: measure again and rewrite it
    return data if isinstance(data, dict) else {}


def _write_cache(path: Path, key: str, entry: dict[str, Any]) -> None:
    """Add one entry atomically; a cache that cannot be written only costs a later probe."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _read_cache(path)
        data[key] = entry
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".peaks-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        return


def probe_tflops(device: Any, precision: str, size: int, min_run_time_s: float) -> float:
    """The fastest rate of `size`^3 matmuls on `device` in `precision`, in TFLOP/s.

    Timed in blocks (one matmul on a CPU, ten on a GPU, synchronised at the end of each)
    for at least `min_run_time_s` and at least three blocks; the fastest block counts, as
    other processes on a shared machine only ever slow a block down."""
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    out = torch.empty(size, size, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    per_block = 10 if device.type == "cuda" else 1
    torch.mm(a, b, out=out)  # warm-up: library handles, kernel choice
    sync()
    fastest_s, blocks, deadline = float("inf"), 0, time.perf_counter() + min_run_time_s
    while blocks < 3 or time.perf_counter() < deadline:
        start = time.perf_counter()
        for _ in range(per_block):
            torch.mm(a, b, out=out)
        sync()
        fastest_s = min(fastest_s, (time.perf_counter() - start) / per_block)
        blocks += 1
    return 2.0 * size**3 / max(fastest_s, 1e-12) / 1e12


def default_size(device: Any) -> int:
    """The probe's matmul size on `device` (see SIZE_CUDA and SIZE_CPU)."""
    import torch

    if device.type == "cuda":
        return SIZE_CUDA
    return SIZE_CPU_FEW_THREADS if torch.get_num_threads() <= 8 else SIZE_CPU


def measured_peak(
    device: Any,
    precision: str,
    *,
    size: int | None = None,
    min_run_time_s: float = MIN_RUN_TIME_S,
    refresh: bool = False,
) -> MeasuredPeak:
    """The device's measured dense peak for `precision`, from the cache or a probe."""
    size = size or default_size(device)
    path = cache_dir() / CACHE_FILE
    key = cache_key(device, precision)
    entry = None if refresh else _read_cache(path).get(key)
    cached = entry.get("tflops") if isinstance(entry, dict) else None
    if isinstance(cached, int | float) and cached > 0:
        size = int(entry.get("size", size))
        return MeasuredPeak(float(cached), precision, device_label(device), size, True)
    tflops = probe_tflops(device, precision, size, min_run_time_s)
    _write_cache(path, key, {"tflops": tflops, "size": size})
    return MeasuredPeak(tflops, precision, device_label(device), size, False)


def peak_lines(platform: Any, precision: str, *, refresh: bool = False) -> list[str]:
    """What `trainforge detect --peak` prints: the measured peak, the data sheet's where the
    table has one, and the cache file."""
    import torch

    from trainforge.hardware.peaks import platform_peak_tflops
    from trainforge.hardware.select import resolve_device

    device = torch.device(resolve_device("auto", platform))
    if device.type not in ("cuda", "cpu"):
        device = torch.device("cpu")  # no probe for MPS: its peak is the CPU's question too
    if precision == "auto":  # as a run resolves it (engine.precision), without importing it
        bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        precision = "fp32" if device.type == "cpu" else ("bf16" if bf16 else "fp16")
    found = measured_peak(device, precision, refresh=refresh)
    source = "cached" if found.cached else f"measured now, {found.size}^3 matmuls"
    lines = [
        f"peak (measured): {_rate(found.tflops)} {precision} on {found.device_name} ({source})"
    ]
    sheet = (
        platform_peak_tflops(platform, found.device_name, precision)
        if device.type == "cuda"
        else None
    )
    if sheet:
        lines.append(
            f"peak (data sheet): {_rate(sheet)} {precision}; measured = {found.tflops / sheet:.0%}"
        )
    else:
        lines.append("peak (data sheet): none for this device; MFU uses the measured peak")
    lines.append(f"peak cache: {cache_dir() / CACHE_FILE}")
    return lines


def _rate(tflops: float) -> str:
    return f"{tflops:,.1f} TFLOP/s" if tflops >= 1 else f"{tflops * 1000:,.1f} GFLOP/s"
