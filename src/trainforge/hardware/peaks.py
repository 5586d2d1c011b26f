"""Peak dense tensor throughput per device, for MFU (model FLOPs utilisation).

MFU = model FLOPs per second achieved / device peak. The peak depends on the precision the
matmuls run in: `low` is dense BF16/FP16 with FP32 accumulation (what autocast uses), `fp32`
is plain FP32 (TF32 off). Values in TFLOPS, from the vendors' data sheets:
- A100 SXM/PCIe: 312 BF16 dense, 19.5 FP32 (NVIDIA A100 data sheet).
- H100 SXM: 989 BF16 dense, 67 FP32; H100 PCIe: 756 and 51 (NVIDIA H100 data sheet).
- H200: 989 BF16 dense, 67 FP32 (same GH100 compute as H100 SXM; NVIDIA H200 data sheet).
- RTX 4090: 165.2 FP16/BF16 dense with FP32 accumulate, 82.6 FP32 (Ada whitepaper).
- Jetson AGX Orin 64GB: 42.5 FP16 dense (170 sparse INT8 TOPS / 2 for dense / 2 for FP16),
  5.3 FP32 (Jetson AGX Orin data sheet).
- GB10 (DGX Spark): 62.5 BF16 dense, derived from 1 PFLOP FP4 sparse / 2 (dense) / 8 (FP4 to
  BF16 with FP32 accumulate); NVIDIA publishes no BF16 figure, so override it when you
  measure one. FP32 unknown.
Override with `hardware.peak_tflops`.
"""

from __future__ import annotations

# (substring of torch.cuda.get_device_name(), low-precision peak, fp32 peak); first match wins.
PEAKS: list[tuple[str, float, float | None]] = [
    ("H100 PCIe", 756.0, 51.0),
    ("H100", 989.0, 67.0),
    ("H200", 989.0, 67.0),
    ("A100", 312.0, 19.5),
    ("RTX 4090", 165.2, 82.6),
    ("Orin", 42.5, 5.3),
    ("GB10", 62.5, None),
]


def peak_tflops(device_name: str | None, precision: str) -> float | None:
    """The table's peak for a device name and precision (fp32, bf16, fp16), or None."""
    if not device_name:
        return None
    for key, low, fp32 in PEAKS:
        if key.lower() in device_name.lower():
            return fp32 if precision == "fp32" else low
    return None
