"""Peak dense tensor throughput per device, for MFU (model FLOPs utilisation).

MFU = model FLOPs per second achieved / device peak. The peak depends on the precision the
matmuls run in: `low` is dense BF16/FP16 with FP32 accumulation (what autocast uses), `fp32`
is plain FP32 (TF32 off). Values in TFLOPS, from the vendors' data sheets:
- A100 SXM/PCIe: 312 BF16 dense, 19.5 FP32 (NVIDIA A100 data sheet).
- H100 SXM: 989 BF16 dense, 67 FP32; H100 PCIe: 756 and 51 (NVIDIA H100 data sheet).
- H200: 989 BF16 dense, 67 FP32 (same GH100 compute as H100 SXM; NVIDIA H200 data sheet).
- RTX 4090: 165.2 FP16/BF16 dense with FP32 accumulate, 82.6 FP32 (Ada whitepaper).
- Jetson Orin modules: see `JETSON_ORIN` below; every number there is derived, not quoted.
- GB10 (DGX Spark): 62.5 BF16 dense, derived from 1 PFLOP FP4 sparse / 2 (dense) / 8 (FP4 to
  BF16 with FP32 accumulate); NVIDIA publishes no BF16 figure, so override it when you
  measure one. FP32 unknown.
Override with `hardware.peak_tflops`.
"""

from __future__ import annotations

import re
from typing import Any

# (substring of the device name, low-precision peak, fp32 peak); first match wins.
PEAKS: list[tuple[str, float, float | None]] = [
    ("H100 PCIe", 756.0, 51.0),
    ("H100", 989.0, 67.0),
    ("H200", 989.0, 67.0),
    ("A100", 312.0, 19.5),
    ("RTX 4090", 165.2, 82.6),
    ("GB10", 62.5, None),
]

# Jetson Orin modules: (family in the device-tree model, largest module memory in GiB that
# the row covers or None for any, low-precision peak, fp32 peak); first match wins.
#
# Every Orin GPU calls itself just "Orin" (torch.cuda.get_device_name, deviceQuery), while
# the module family is in the device-tree model (/proc/device-tree/model, e.g. "NVIDIA
# Jetson AGX Orin Developer Kit", "NVIDIA Jetson Orin NX Engineering Reference Developer
# Kit", "NVIDIA Jetson Orin Nano Developer Kit") and the memory size tells the two modules
# of a family apart. A bare "Orin" matches no row: its peak ranges from 5 to 42.5 TFLOPS,
# and a guessed one would make MFU wrong by up to 8x.
#
# What the numbers are: NVIDIA's Jetson AGX Orin Series, Orin NX Series and Orin Nano
# Series data sheets give the GPU's AI performance as *sparse INT8* TOPS and its CUDA cores
# and maximum GPU clock; they publish no dense FP16 tensor figure. So the low-precision peak
# here is derived: sparse INT8 TOPS / 2 (2:4 sparsity doubles the rate) / 2 (Ampere tensor
# cores run FP16 with FP32 accumulate at half their INT8 rate). FP32 is CUDA cores x 2 FLOPs
# (FMA) x maximum GPU clock. Both are at the data sheets' default (non-Super) maximum
# clocks; JetPack 6.2's "Super" power modes raise the GPU clock (Orin Nano 8GB: 67 sparse
# TOPS, about 16.7 dense FP16 TFLOPS), so set `hardware.peak_tflops` when you run one.
JETSON_ORIN: list[tuple[str, float | None, float, float]] = [
    # AGX Orin 32GB: GPU 108 sparse INT8 TOPS; 1792 cores at 930 MHz (AGX Orin data sheet).
    ("AGX Orin", 40.0, 27.0, 3.33),
    # AGX Orin 64GB: GPU 170 sparse INT8 TOPS; 2048 cores at 1.3 GHz (AGX Orin data sheet).
    ("AGX Orin", None, 42.5, 5.3),
    # Orin NX 8GB: GPU 50 sparse INT8 TOPS; 1024 cores at 765 MHz (Orin NX data sheet).
    ("Orin NX", 10.0, 12.5, 1.57),
    # Orin NX 16GB: GPU 60 sparse INT8 TOPS; 1024 cores at 918 MHz (Orin NX data sheet).
    ("Orin NX", None, 15.0, 1.88),
    # Orin Nano 4GB: 20 sparse INT8 TOPS; 512 cores at 625 MHz (Orin Nano data sheet).
    ("Orin Nano", 5.0, 5.0, 0.64),
    # Orin Nano 8GB: 40 sparse INT8 TOPS; 1024 cores at 625 MHz (Orin Nano data sheet).
    ("Orin Nano", None, 10.0, 1.28),
]

_SIZE_IN_NAME = re.compile(r"(\d+)\s*GB\b", re.IGNORECASE)


def _normalise(name: str) -> str:
    # Board names come as "Jetson-AGX-Orin" or "jetson_orin_nano" as well as with spaces.
    return re.sub(r"[-_\s]+", " ", name).lower()


def _jetson_peak(name: str, memory_gib: float | None) -> tuple[float, float] | None:
    size = _SIZE_IN_NAME.search(name)
    memory = float(size.group(1)) if size else memory_gib
    for family, max_gib, low, fp32 in JETSON_ORIN:
        if family.lower() not in _normalise(name):
            continue
        # The system sees a little less than the module's size (carve-outs), never more.
        if max_gib is None or (memory is not None and memory <= max_gib):
            return low, fp32
    return None


def peak_tflops(
    device_name: str | None, precision: str, *, memory_gib: float | None = None
) -> float | None:
    """The table's peak for a device name and precision (fp32, bf16, fp16), or None.

    `memory_gib` (the machine's memory) picks the module within a Jetson Orin family; without
    it, or without a size in the name, the family's larger module is assumed.
    """
    if not device_name:
        return None
    found = _jetson_peak(device_name, memory_gib)
    if found is None:
        lowered = _normalise(device_name)
        for key, low, fp32 in PEAKS:
            if _normalise(key) in lowered:
                found = (low, fp32)
                break
    if found is None:
        return None
    low, fp32 = found
    return fp32 if precision == "fp32" else low


def platform_peak_tflops(platform: Any, device_name: str | None, precision: str) -> float | None:
    """The peak for the GPU `device_name` on `platform` (a `hardware.Platform`).

    On a Jetson the board model names the module (the GPU name is only "Orin") and the
    machine's memory picks its size; elsewhere the GPU name is what the table knows.
    """
    jetson = getattr(platform, "jetson", None)
    if jetson is not None:
        return peak_tflops(jetson.model, precision, memory_gib=platform.memory_gib)
    return peak_tflops(device_name, precision)
