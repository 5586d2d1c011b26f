"""Platform detection: what machine trainforge runs on, and which built-in profile fits it.

`detect()` returns a `Platform` (kind, device, CPU/RAM, GPUs, Jetson and Slurm facts);
`pick_profile()` maps it to a registered profile (the first matching rule in the profiles'
`detect:` blocks) with a one-line reason, which is what `profile: auto` uses;
`resolve_device()` checks `training.device`.

Where the facts come from:
- GPUs: NVML via `pynvml` (nvidia-ml-py), imported lazily; any NVML failure means no GPUs.
- Jetson: `/etc/nv_tegra_release` (L4T, mapped to JetPack) and `/proc/device-tree/model`.
- DGX Spark: an aarch64 machine whose NVML GPU is an NVIDIA GB10 (unified memory).
- RAM: `/proc/meminfo` (MemTotal), psutil as fallback. Slurm: the `SLURM_*` variables.

Importing this package and calling `detect()` must never import torch: the CLI's `validate`
and `detect` commands have to stay fast. Everything read goes through a `Probe`, so tests
replay recorded machines (`load_fixture`) instead of needing the hardware.

Modules: `platform` (dataclasses), `detect` (detection, fixtures), `jetson` (L4T/JetPack),
`slurm` (SLURM_* parsing), `nvml` (GPU query), `select` (profile and device choice),
`jetson_wheels` (PyTorch wheels per JetPack), `threads` (a training's CPU thread budget).
`trainforge doctor` lives in `trainforge.doctor`, above `config`: it checks a run config
against the machine, so it imports both.
"""

from trainforge.hardware.detect import detect, load_fixture
from trainforge.hardware.jetson import jetpack_for_l4t, parse_l4t_version
from trainforge.hardware.nvml import query_nvml_gpus
from trainforge.hardware.platform import GpuInfo, JetsonInfo, Platform, Probe, SlurmInfo
from trainforge.hardware.select import pick_profile, resolve_device
from trainforge.hardware.slurm import parse_gpu_count, read_slurm

__all__ = [
    "GpuInfo",
    "JetsonInfo",
    "Platform",
    "Probe",
    "SlurmInfo",
    "detect",
    "jetpack_for_l4t",
    "load_fixture",
    "parse_gpu_count",
    "parse_l4t_version",
    "pick_profile",
    "query_nvml_gpus",
    "read_slurm",
    "resolve_device",
]
