"""NVML: listing NVIDIA GPUs without importing torch.

`pynvml` (package nvidia-ml-py) is imported inside the query so that importing
`trainforge.hardware` stays cheap, and any NVML failure means "no NVML GPUs".
"""

from __future__ import annotations

import contextlib
from typing import Any

from trainforge.hardware.platform import GpuInfo

_GIB = 1024**3


def query_nvml_gpus() -> tuple[GpuInfo, ...]:
    """All GPUs NVML can see; () when pynvml, the driver or NVML itself is unavailable."""
    try:
        import pynvml  # lazy: keeps `import trainforge.hardware` cheap
    except ImportError:
        return ()
    # Broad on purpose: besides NVMLError, a broken driver install can surface as OSError or
    # AttributeError from ctypes, and detection must never crash on a machine's quirks.
    try:
        pynvml.nvmlInit()
    except Exception:
        return ()
    try:
        count = pynvml.nvmlDeviceGetCount()
        return tuple(_read_gpu(pynvml, index) for index in range(count))
    except Exception:
        return ()
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _read_gpu(pynvml: Any, index: int) -> GpuInfo:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    name = pynvml.nvmlDeviceGetName(handle)
    if isinstance(name, bytes):  # older nvidia-ml-py releases return bytes
        name = name.decode("utf-8", errors="replace")
    return GpuInfo(
        index=index,
        name=str(name),
        memory_gib=_memory_gib(pynvml, handle),
        compute_capability=_compute_capability(pynvml, handle),
    )


def _memory_gib(pynvml: Any, handle: Any) -> float:
    # GB10 (DGX Spark) and other unified-memory parts answer "Not Supported" here; 0.0 marks
    # the size as unknown so detection can substitute system RAM.
    try:
        return round(pynvml.nvmlDeviceGetMemoryInfo(handle).total / _GIB, 2)
    except Exception:
        return 0.0


def _compute_capability(pynvml: Any, handle: Any) -> tuple[int, int] | None:
    try:
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        return int(major), int(minor)
    except Exception:
        return None
