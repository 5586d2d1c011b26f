"""Choices made from a detected `Platform`.

Owns which built-in profile `profile: auto` picks (and why), and which device
`training.device` resolves to.
"""

from __future__ import annotations

from trainforge.errors import UserError
from trainforge.hardware.platform import Platform

PROFILE_NAMES = ("cpu", "jetson-orin", "workstation-24gb", "dgx-spark", "hpc-a100")
DEVICE_CHOICES = ("auto", "cuda", "mps", "cpu")

# Name fragments of data-centre GPUs (HBM, NVLink, built for clusters): hpc-a100 fits them.
_DATACENTRE_MARKERS = ("A100", "A800", "H100", "H800", "H200", "GH200", "B100", "B200", "GB200")
# Name fragments of consumer/workstation cards: workstation-24gb fits them even at 48 GiB,
# because they lack the interconnect the hpc profile's settings assume.
_WORKSTATION_MARKERS = ("GeForce", "RTX", "TITAN", "A6000", "A5000", "A4000", "L40", "L4", "A10")
# Below this much memory an unrecognised GPU is treated as workstation class.
_HPC_MIN_GIB = 40.0


def pick_profile(platform: Platform) -> tuple[str, str]:
    """The built-in profile `profile: auto` resolves to, and a one-line reason."""
    if platform.kind == "jetson" and platform.jetson is not None:
        jetson = platform.jetson
        release = f"JetPack {jetson.jetpack_version or 'unknown'} (L4T {jetson.l4t_version})"
        if jetson.is_orin:
            return "jetson-orin", f"Jetson board {jetson.model} with {release}"
        return (
            "jetson-orin",
            f"Jetson board {jetson.model} with {release} is not an Orin; "
            "jetson-orin is the nearest built-in profile",
        )
    if platform.kind == "dgx-spark":
        return "dgx-spark", (
            f"NVIDIA GB10 on {platform.arch} with {platform.memory_gib:.0f} GiB unified memory "
            "(DGX Spark)"
        )
    if platform.kind == "cuda":
        return _pick_cuda_profile(platform)
    if platform.kind == "mps":
        return (
            "cpu",
            "Apple MPS: no Apple-specific profile yet; the cpu profile's settings are safe",
        )
    return "cpu", "no CUDA GPU (NVML found none) and no Apple MPS: running on CPU"


def _pick_cuda_profile(platform: Platform) -> tuple[str, str]:
    names = sorted({gpu.name for gpu in platform.gpus})
    label = f"{len(platform.gpus)}x {', '.join(names)}"
    if any(marker in gpu.name for gpu in platform.gpus for marker in _DATACENTRE_MARKERS):
        return "hpc-a100", f"{label}: data-centre GPUs"
    slurm = platform.slurm
    if slurm is not None:
        return "hpc-a100", f"{label} inside Slurm job {slurm.job_id}: cluster GPU allocation"
    if any(marker in gpu.name for gpu in platform.gpus for marker in _WORKSTATION_MARKERS):
        return "workstation-24gb", f"{label}: consumer/workstation GPUs"
    smallest = min(gpu.memory_gib for gpu in platform.gpus)
    if smallest >= _HPC_MIN_GIB:
        return "hpc-a100", f"{label}: {smallest:.0f} GiB per GPU, data-centre class"
    return "workstation-24gb", f"{label}: under {_HPC_MIN_GIB:.0f} GiB per GPU, workstation class"


def resolve_device(requested: str, platform: Platform) -> str:
    """What `training.device` means here: "auto" -> the platform's device; checks the rest.

    Raises `UserError` when the requested device does not exist on this machine.
    """
    choice = requested.strip().lower()
    if choice not in DEVICE_CHOICES:
        raise UserError(
            f"training.device={requested!r} is not one of {', '.join(DEVICE_CHOICES)}",
            fix="set training.device to auto, cuda, mps or cpu",
        )
    if choice == "auto":
        return platform.device
    if choice not in ("cpu", platform.device):
        raise UserError(
            f"training.device={choice} but this machine has no {choice.upper()} device "
            f"(found: {_found(platform)})",
            fix="set training.device=cpu or auto",
        )
    return choice


def _found(platform: Platform) -> str:
    if platform.kind == "cpu":
        return f"CPU only, {platform.arch}, {platform.os_name}"
    if platform.kind == "mps":
        return "Apple MPS"
    return f"{platform.kind} with {len(platform.gpus)} GPU(s)"
