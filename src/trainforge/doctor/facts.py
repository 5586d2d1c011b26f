"""What `trainforge doctor` looks at: the facts about a machine, gathered or replayed.

`gather_facts()` reads the real machine; `load_doctor_fixture()` replays a recorded one, so
every check is tested on machines we do not have (a DGX Spark, a Jetson, a GPU workstation).

Facts that live in files (NVIDIA driver version, swap, kernel command line, kernel log,
cuSPARSELt libraries) are read under `Probe.root` both ways. Facts that need a live process
(the importable PyTorch build, NVML settings, free disk, /dev/shm size) come from the
machine when gathering and from the fixture's `doctor.json` when replaying.

PyTorch is imported only inside `probe_torch()`, never at module import: `doctor` must be
able to say "PyTorch is missing" or "PyTorch fails to import", and stay quick otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform as _stdlib_platform
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainforge.errors import UserError
from trainforge.hardware.detect import detect, load_fixture
from trainforge.hardware.jetson import read_text
from trainforge.hardware.platform import Platform, Probe

DRIVER_VERSION_FILE = "proc/driver/nvidia/version"
KERNEL_CMDLINE = "proc/cmdline"
KERNEL_LOGS = ("var/log/kern.log", "var/log/syslog")
SHM = "dev/shm"
# Where the dynamic loader finds cuSPARSELt when it is installed from NVIDIA's archive
# (scripts/install_cusparselt.sh copies into /usr/local/cuda/lib64) or from a .deb.
CUSPARSELT_DIRS = (
    "usr/local/cuda/lib64",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/sbsa-linux-gnu",
)
_GIB = 1024**3
_MIB = 1024**2
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024"
# and, for the open kernel modules, "NVIDIA UNIX Open Kernel Module for x86_64  580.95.05 ...".
_DRIVER_RE = re.compile(r"NVRM version:.*?\s(\d+\.\d+(?:\.\d+)?)\s")
# The kernel's hung-task report for the driver's nv_queue thread (the training-optimisation
# notes, "Driver/Kernel Issues").
_NV_QUEUE_RE = re.compile(r"task nv_queue:\d+ blocked for more than \d+ seconds")
_SWAP_RE = re.compile(r"^SwapTotal:\s*(\d+)\s*kB\s*$", re.MULTILINE)


@dataclass(frozen=True)
class TorchFacts:
    """The PyTorch this interpreter imports. `version` is None when the import failed."""

    version: str | None = None
    import_error: str | None = None
    cuda: str | None = None  # torch.version.cuda; None for a CPU-only build
    arch_list: tuple[str, ...] = ()  # e.g. ("sm_80", "sm_90", "compute_90")
    cusparselt_version: int | None = None  # torch.backends.cusparselt.version(), e.g. 801


@dataclass(frozen=True)
class Facts:
    """Everything the checks need. `None` means "could not be found out"."""

    platform: Platform
    python_version: str
    torch: TorchFacts
    driver_version: str | None
    nvml_error: str | None
    persistence_modes: tuple[bool | None, ...]
    disk_path: str
    disk_free_bytes: int | None
    shm_total_bytes: int | None
    shm_free_bytes: int | None
    swap_total_bytes: int | None
    kernel_cmdline: str | None
    nv_queue_reports: tuple[str, ...]
    kernel_log_read: bool
    cusparselt_files: tuple[str, ...]


def gather_facts(
    output_dir: Path, probe: Probe | None = None, platform: Platform | None = None
) -> Facts:
    """Facts about this machine; `output_dir` is where the run folders will be written.

    `platform` saves a second detection when the caller has already run `detect(probe)`.
    """
    probe = probe or Probe()
    root = probe.root
    disk_path = _existing_ancestor(output_dir)
    shm_total, shm_free = _statvfs_bytes(root / SHM)
    modes, nvml_error = query_persistence_modes()
    return Facts(
        platform=platform or detect(probe),
        python_version=_stdlib_platform.python_version(),
        torch=probe_torch(),
        driver_version=read_driver_version(root),
        nvml_error=nvml_error,
        persistence_modes=modes,
        disk_path=str(disk_path),
        disk_free_bytes=shutil.disk_usage(disk_path).free if disk_path.exists() else None,
        shm_total_bytes=shm_total,
        shm_free_bytes=shm_free,
        **_file_facts(root),
    )


def load_doctor_fixture(path: Path) -> Facts:
    """Replay a recorded machine: `probe.json` + real-format files + `doctor.json`.

    doctor.json holds "python", "torch" (version, cuda, arch_list, cusparselt_version, or
    import_error), "nvml_error", "persistence_modes", "disk_free_gib", "shm_total_mib" and
    "shm_free_mib"; a missing key means "unknown".
    """
    path = Path(path)
    probe = load_fixture(path)
    try:
        data = json.loads((path / "doctor.json").read_text(encoding="utf-8"))
        torch_data = data.get("torch") or {}
        torch = TorchFacts(
            version=torch_data.get("version"),
            import_error=torch_data.get("import_error"),
            cuda=torch_data.get("cuda"),
            arch_list=tuple(torch_data.get("arch_list") or ()),
            cusparselt_version=torch_data.get("cusparselt_version"),
        )
        return Facts(
            platform=detect(probe),
            python_version=str(data["python"]),
            torch=torch,
            driver_version=read_driver_version(path),
            nvml_error=data.get("nvml_error"),
            persistence_modes=tuple(data.get("persistence_modes") or ()),
            disk_path=str(data.get("disk_path", "runs")),
            disk_free_bytes=_scaled(data.get("disk_free_gib"), _GIB),
            shm_total_bytes=_scaled(data.get("shm_total_mib"), _MIB),
            shm_free_bytes=_scaled(data.get("shm_free_mib", data.get("shm_total_mib")), _MIB),
            **_file_facts(path),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UserError(
            f"cannot read doctor fixture {path / 'doctor.json'}: {exc!r}",
            fix="see load_doctor_fixture for the expected keys",
        ) from exc


def _scaled(value: Any, unit: int) -> int | None:
    return None if value is None else int(float(value) * unit)


def _file_facts(root: Path) -> dict[str, Any]:
    return {
        "swap_total_bytes": read_swap_total(root),
        "kernel_cmdline": (read_text(root / KERNEL_CMDLINE) or "").strip() or None,
        "nv_queue_reports": read_nv_queue_reports(root),
        "kernel_log_read": any(read_text(root / name) is not None for name in KERNEL_LOGS),
        "cusparselt_files": find_cusparselt(root),
    }


def probe_torch() -> TorchFacts:
    """Import PyTorch and describe the build; a failed import is a fact, not a crash."""
    try:
        import torch  # lazy and deliberate: doctor must run (and say so) without torch
    except Exception as exc:  # ImportError, or OSError from a missing libcusparseLt.so
        return TorchFacts(import_error=f"{type(exc).__name__}: {exc}".splitlines()[0])
    cuda = getattr(torch.version, "cuda", None)
    arch_list: tuple[str, ...] = ()
    if cuda:
        # get_arch_list() answers [] when no device is visible; the compiled flags do not.
        flags = getattr(torch._C, "_cuda_getArchFlags", lambda: None)()
        arch_list = tuple(str(flags).split()) if flags else tuple(torch.cuda.get_arch_list())
    cusparselt = None
    with contextlib.suppress(Exception):
        if torch.backends.cusparselt.is_available():
            cusparselt = int(torch.backends.cusparselt.version())
    return TorchFacts(
        version=str(torch.__version__),
        cuda=str(cuda) if cuda else None,
        arch_list=arch_list,
        cusparselt_version=cusparselt,
    )


def query_persistence_modes() -> tuple[tuple[bool | None, ...], str | None]:
    """Persistence mode per NVML GPU, and why NVML was unusable (None when it worked)."""
    try:
        import pynvml  # lazy: nvidia-ml-py, part of trainforge's dependencies
    except ImportError as exc:
        return (), f"nvidia-ml-py is not installed ({exc})"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError, or OSError when libnvidia-ml.so is missing
        return (), f"{type(exc).__name__}: {exc}"
    try:
        modes = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            try:
                modes.append(bool(pynvml.nvmlDeviceGetPersistenceMode(handle)))
            except Exception:  # "Not Supported" on some parts
                modes.append(None)
        return tuple(modes), None
    except Exception as exc:
        return (), f"{type(exc).__name__}: {exc}"
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def read_driver_version(root: Path) -> str | None:
    """The NVIDIA kernel driver version from /proc/driver/nvidia/version, or None."""
    text = read_text(root / DRIVER_VERSION_FILE)
    match = _DRIVER_RE.search(text) if text else None
    return match.group(1) if match else None


def read_swap_total(root: Path) -> int | None:
    text = read_text(root / "proc/meminfo")
    match = _SWAP_RE.search(text) if text else None
    return int(match.group(1)) * 1024 if match else None


def read_nv_queue_reports(root: Path) -> tuple[str, ...]:
    """Kernel hung-task lines about the NVIDIA driver's nv_queue thread, oldest first."""
    lines: list[str] = []
    for name in KERNEL_LOGS:
        text = read_text(root / name)
        if text:
            for line in text.splitlines():
                match = _NV_QUEUE_RE.search(line)
                if match is not None:
                    # Keep the syslog timestamp: it tells whether the stalls are recent.
                    lines.append(
                        f"{line[:15]} {match.group(0)}" if line[:3].isalpha() else match.group(0)
                    )
    return tuple(dict.fromkeys(lines))  # kern.log and syslog repeat each other


def find_cusparselt(root: Path) -> tuple[str, ...]:
    """libcusparseLt.so* files in the loader's usual folders, as absolute machine paths."""
    found = []
    for folder in CUSPARSELT_DIRS:
        directory = root / folder
        with contextlib.suppress(OSError):
            found.extend(f"/{folder}/{p.name}" for p in sorted(directory.glob("libcusparseLt.so*")))
    return tuple(found)


def _existing_ancestor(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _statvfs_bytes(path: Path) -> tuple[int | None, int | None]:
    try:
        stat = os.statvfs(path)
    except (OSError, AttributeError):  # no /dev/shm, or not POSIX
        return None, None
    return stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize
