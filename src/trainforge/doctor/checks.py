"""The checks behind `trainforge doctor`, each one `Context` -> one `Finding`.

Each check reports one row with a status. Two statuses are findings, each with a one-line fix:
`warn` (worth fixing, training still works) and `problem` (training will fail or lose work).
The others are not: `ok` (checked, fine), `info` (something to know that needs no fix, e.g.
"no NVIDIA GPU: runs train on the CPU", or a check that cannot decide on this machine) and
`skip` (does not apply here). `trainforge doctor` exits 1 when there is any finding.

The checks cover the set-up failures in the reference notes: a CPU-only or wrong-architecture
PyTorch (the "cannot find any torch accelerator" class of failure on Blackwell in the DGX
Spark setup plan), the JetPack/PyTorch wheel match and cuSPARSELt (the Jetson training
guide), disk for checkpoints, /dev/shm for loader workers (the DGX Spark plan runs containers
with --ipc=host for this), the profile's memory budget, swap on Jetson, and the driver
settings that stop `nv_queue` stalls (the training-optimisation notes).
The software, GPU and driver checks live here with the one table of every check (`CHECKS`);
the resource checks (disk, /dev/shm, memory budget, swap) in `doctor.resources`, and what a
check answers (`Finding`, `Context`) in `doctor.finding`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from trainforge.doctor.facts import Facts
from trainforge.doctor.finding import Context, Finding
from trainforge.doctor.resources import (
    check_disk,
    check_memory_budget,
    check_shm,
    check_swap,
    estimate_parameters,
)
from trainforge.hardware.jetson_wheels import wheel_row

if TYPE_CHECKING:
    pass

MIN_PYTHON = (3, 10)  # pyproject.toml: requires-python = ">=3.10"
# Minimum Linux driver per CUDA major release. Source: NVIDIA CUDA Toolkit release notes,
# table "CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version
# Compatibility" (11.x: 450.80.02, 12.x: 525.60.13) and the CUDA 13.0 GA driver (580.65.06).
MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
# Jetson integrated GPUs run only code built for exactly their capability (PyTorch's
# torch.cuda.DEVICE_REQUIREMENT table: 5.3, 6.2, 7.2 and 8.7 are iGPU-only entries).
_IGPU_CC = {53, 62, 72, 87}
JETSON_FIX = "python3 scripts/jetson_torch_install.py (or trainforge jetson-wheel)"
DGX_FIX = "train inside the NGC container: scripts/run-dgx-container.sh (docs/dgx_spark.md)"
PYTORCH_FIX = "install a CUDA build: pick one for your driver at https://pytorch.org/get-started/"


def diagnose(ctx: Context) -> list[Finding]:
    """Every check, in the order the table shows them."""
    return [check(ctx) for check in CHECKS]


def _gpu_present(facts: Facts) -> bool:
    return bool(facts.platform.gpus) or facts.driver_version is not None


def _torch_fix(facts: Facts) -> str:
    if facts.platform.kind == "jetson":
        return JETSON_FIX
    if facts.platform.kind == "dgx-spark":
        return DGX_FIX
    return PYTORCH_FIX


def check_config(ctx: Context) -> Finding:
    if ctx.config_error is not None:
        return Finding("run config", "problem", ctx.config_error, "fix the config (see above)")
    assert ctx.config is not None
    return Finding("run config", "ok", f"profile {ctx.config.profile}, output {_run_dir(ctx)}")


def check_python(ctx: Context) -> Finding:
    version = ctx.facts.python_version
    numbers = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    if numbers < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        return Finding(
            "python",
            "problem",
            f"Python {version}; trainforge needs {need} or newer",
            f"create the environment with Python {need}+ (python3 -m venv .venv)",
        )
    return Finding("python", "ok", f"Python {version}")


def check_torch_import(ctx: Context) -> Finding:
    torch = ctx.facts.torch
    if torch.version is not None:
        cuda = f"CUDA {torch.cuda}" if torch.cuda else "CPU-only build"
        return Finding("torch import", "ok", f"torch {torch.version} ({cuda})")
    error = torch.import_error or "torch is not importable"
    if "cusparselt" in error.lower():
        return Finding(
            "torch import",
            "problem",
            f"PyTorch is installed but cannot load cuSPARSELt: {error}",
            "bash scripts/install_cusparselt.sh (add --dry-run to see what it does first)",
        )
    if "No module named" in error:
        return Finding("torch import", "problem", "PyTorch is not installed", _torch_fix(ctx.facts))
    return Finding("torch import", "problem", f"import torch fails: {error}", _torch_fix(ctx.facts))


def check_torch_build(ctx: Context) -> Finding:
    facts, torch = ctx.facts, ctx.facts.torch
    if torch.version is None:
        return Finding("torch build", "skip", "PyTorch is not importable")
    if not _gpu_present(facts):
        device = facts.platform.device.upper()
        detail = f"no NVIDIA GPU on this machine: runs train on {device}"
        return Finding("torch build", "info", detail)
    gpu = facts.platform.gpus[0].name if facts.platform.gpus else "an NVIDIA GPU"
    if torch.cuda is None:
        return Finding(
            "torch build",
            "problem",
            f"torch {torch.version} is a CPU-only build, but this machine has {gpu}",
            _torch_fix(facts),
        )
    return Finding("torch build", "ok", f"torch built with CUDA {torch.cuda}")


def arch_runs_on(arch: str, capability: tuple[int, int]) -> bool:
    """Whether code compiled as `arch` (sm_90, sm_90a, compute_90) runs on a GPU.

    Rules from the CUDA C++ Programming Guide ("Binary Compatibility"): a cubin for X.Y runs
    on X.Z with Z >= Y; PTX (compute_XY) is JIT-compiled for any newer GPU; "a" cubins run
    only on their exact capability; Jetson iGPUs run only cubins built for them.
    """
    kind, _, number = arch.partition("_")
    suffix = number[-1:] if number[-1:] in ("a", "f") else ""
    if not number.removesuffix(suffix).isdigit():
        return False
    code = int(number.removesuffix(suffix))
    device = capability[0] * 10 + capability[1]
    if kind == "compute":
        return device >= code
    if kind != "sm":
        return False
    if suffix == "a" or code in _IGPU_CC or device in _IGPU_CC:
        return code == device
    return code // 10 == device // 10 and device % 10 >= code % 10


def check_gpu_arch(ctx: Context) -> Finding:
    facts, torch = ctx.facts, ctx.facts.torch
    gpus = [gpu for gpu in facts.platform.gpus if gpu.compute_capability is not None]
    if torch.version is None or torch.cuda is None or not gpus:
        return Finding("GPU architecture", "skip", "needs a CUDA build of PyTorch and a GPU")
    if not torch.arch_list:
        return Finding("GPU architecture", "skip", "PyTorch did not report its architectures")
    archs = " ".join(torch.arch_list)
    described = []
    for gpu in gpus:
        cc = gpu.compute_capability
        assert cc is not None
        described.append(f"{gpu.name} ({cc[0]}.{cc[1]})")
        if not any(arch_runs_on(arch, cc) for arch in torch.arch_list):
            return Finding(
                "GPU architecture",
                "problem",
                f"{gpu.name} has compute {cc[0]}.{cc[1]}, but torch {torch.version} is built "
                f"only for {archs}: no kernel can run on it ('cannot find any torch accelerator')",
                _torch_fix(facts)
                if facts.platform.kind != "cuda"
                else f"{PYTORCH_FIX} (a build that lists sm_{cc[0]}x)",
            )
    names = ", ".join(sorted(set(described)))
    return Finding("GPU architecture", "ok", f"{names} supported by {archs}")


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def check_driver(ctx: Context) -> Finding:
    facts, torch = ctx.facts, ctx.facts.torch
    if facts.platform.kind == "jetson":
        return Finding("NVIDIA driver", "skip", "the Jetson driver ships with JetPack (L4T)")
    if facts.driver_version is None:
        return Finding("NVIDIA driver", "skip", "no NVIDIA kernel driver loaded")
    if torch.cuda is None:
        return Finding("NVIDIA driver", "ok", f"driver {facts.driver_version}")
    major = _version_tuple(torch.cuda)[0]
    needed = MIN_DRIVER.get(major)
    if needed is not None and _version_tuple(facts.driver_version) < _version_tuple(needed):
        need = needed
        return Finding(
            "NVIDIA driver",
            "problem",
            f"driver {facts.driver_version} is older than {need}, the minimum for CUDA "
            f"{major}.x (torch {torch.version})",
            f"upgrade the driver to {need}+ or install a PyTorch build for an older CUDA",
        )
    return Finding("NVIDIA driver", "ok", f"driver {facts.driver_version} runs CUDA {torch.cuda}")


def check_jetpack(ctx: Context) -> Finding:
    facts, torch = ctx.facts, ctx.facts.torch
    jetson = facts.platform.jetson
    if jetson is None:
        return Finding("JetPack wheel", "skip", "not a Jetson")
    if jetson.jetpack_version is None:
        # Not a finding: the machine may be fine, this tool just cannot tell which wheel fits.
        return Finding(
            "JetPack wheel",
            "info",
            f"L4T {jetson.l4t_version} maps to no known JetPack release, so the wheel is not "
            "checked (python3 scripts/jetson_torch_install.py --jetpack X.Y prints one)",
        )
    row = wheel_row(jetson.jetpack_version)
    label = f"JetPack {jetson.jetpack_version}"
    if row is None:
        return Finding(
            "JetPack wheel",
            "info",
            f"{label} has no PyTorch wheel in the table, so the wheel is not checked "
            "(NVIDIA's index: https://developer.download.nvidia.com/compute/redist/jp/)",
        )
    if torch.version is None and row.python and row.python != _major_minor(facts.python_version):
        return Finding(
            "JetPack wheel",
            "problem",
            f"{label}'s PyTorch wheel is built for Python {row.python}, this is Python "
            f"{facts.python_version} (trainforge needs 3.10+)",
            "upgrade to JetPack 6 (Python 3.10), or build PyTorch from source for this Python",
        )
    if torch.version is None:
        return Finding("JetPack wheel", "skip", "PyTorch is not importable (see torch import)")
    if torch.cuda is None:
        return Finding(
            "JetPack wheel",
            "problem",
            f"torch {torch.version} is not NVIDIA's Jetson build (no CUDA)",
            JETSON_FIX,
        )
    if _major_minor(torch.cuda) != row.cuda:
        return Finding(
            "JetPack wheel",
            "problem",
            f"torch {torch.version} is built for CUDA {torch.cuda}, {label} ships CUDA {row.cuda}",
            JETSON_FIX,
        )
    return Finding("JetPack wheel", "ok", f"torch for CUDA {torch.cuda} matches {label}")


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def check_cusparselt(ctx: Context) -> Finding:
    facts, torch = ctx.facts, ctx.facts.torch
    jetson = facts.platform.kind == "jetson"
    if not _gpu_present(facts) and not jetson:
        return Finding("cuSPARSELt", "skip", "no NVIDIA GPU")
    if torch.version is not None and torch.cuda is None:
        return Finding("cuSPARSELt", "skip", "needs a CUDA build of PyTorch")
    if torch.cusparselt_version is not None:
        v = torch.cusparselt_version
        return Finding("cuSPARSELt", "ok", f"{v // 1000}.{v % 1000 // 100}.{v % 100} (PyTorch)")
    if facts.cusparselt_files:
        return Finding("cuSPARSELt", "ok", f"found {facts.cusparselt_files[0]}")
    if not jetson:
        # PyPI CUDA wheels bring their own copy; without it only 2:4 sparsity is missing.
        return Finding("cuSPARSELt", "info", "not available to PyTorch (only 2:4 sparsity uses it)")
    return Finding(
        "cuSPARSELt",
        "warn",
        "libcusparseLt.so not found: NVIDIA's PyTorch for JetPack 6.1+ links it and fails to "
        "import without it",
        "bash scripts/install_cusparselt.sh",
    )


def check_nvml(ctx: Context) -> Finding:
    facts = ctx.facts
    if facts.platform.kind == "jetson":
        return Finding("NVML", "skip", "Jetson Orin has no NVML; telemetry reads tegrastats")
    if facts.platform.gpus:
        return Finding("NVML", "ok", f"{len(facts.platform.gpus)} GPU(s) visible")
    if facts.driver_version is not None:
        return Finding(
            "NVML",
            "warn",
            f"the NVIDIA driver is loaded but NVML lists no GPU ({facts.nvml_error or 'none'}); "
            "detection and telemetry cannot see the GPU",
            "check `nvidia-smi`; inside Docker pass --gpus=all; pip install nvidia-ml-py",
        )
    return Finding("NVML", "skip", "no NVIDIA driver")


def check_persistence(ctx: Context) -> Finding:
    facts = ctx.facts
    if not _gpu_present(facts):
        return Finding("persistence mode", "skip", "no NVIDIA GPU")
    if facts.platform.kind == "jetson" or not facts.persistence_modes:
        return Finding("persistence mode", "skip", "not reported for this GPU")
    off = [i for i, mode in enumerate(facts.persistence_modes) if mode is False]
    if all(mode is None for mode in facts.persistence_modes):
        return Finding("persistence mode", "skip", "the driver does not report it for this GPU")
    if off:
        return Finding(
            "persistence mode",
            "warn",
            f"off on GPU {', '.join(map(str, off))}: the driver reinitialises between jobs",
            "sudo nvidia-smi -pm 1",
        )
    return Finding("persistence mode", "ok", "on")


def check_nv_queue(ctx: Context) -> Finding:
    facts = ctx.facts
    if not facts.nv_queue_reports:
        if facts.driver_version is None:
            return Finding("nv_queue stalls", "skip", "no NVIDIA driver")
        if not facts.kernel_log_read:
            return Finding("nv_queue stalls", "skip", "no readable /var/log/kern.log or syslog")
        return Finding("nv_queue stalls", "ok", "no nv_queue hung-task reports in the kernel log")
    aspm = "pcie_aspm=off" in (facts.kernel_cmdline or "")
    steps = ["sudo nvidia-smi -lgc <MHz> (lock GPU clocks)"]
    if not facts.persistence_modes or not all(facts.persistence_modes):
        steps.insert(0, "sudo nvidia-smi -pm 1")
    if not aspm:
        steps.insert(0, "add pcie_aspm=off to GRUB_CMDLINE_LINUX, then sudo update-grub")
    return Finding(
        "nv_queue stalls",
        "warn",
        f"{len(facts.nv_queue_reports)} hung-task report(s) in the kernel log, last: "
        f"{facts.nv_queue_reports[-1]}",
        "; ".join(steps) + "; keep a known-good driver/CUDA pair (docs/troubleshooting.md)",
    )


def _run_dir(ctx: Context) -> Path:
    """The folder `trainforge train` gives this config's run."""
    from trainforge.runfolder import for_config

    assert ctx.config is not None
    output = ctx.config.output
    return for_config(output.dir, output.run_name, ctx.config_path).path


CHECKS: Sequence[Callable[[Context], Finding]] = (
    check_config,
    check_python,
    check_torch_import,
    check_torch_build,
    check_gpu_arch,
    check_driver,
    check_jetpack,
    check_cusparselt,
    check_nvml,
    lambda ctx: check_disk(ctx, estimate_parameters),
    check_shm,
    check_memory_budget,
    check_swap,
    check_persistence,
    check_nv_queue,
)
