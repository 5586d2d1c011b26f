"""Jetson boards: reading L4T and the board model from files, and mapping L4T to JetPack.

A Jetson is recognised by `/etc/nv_tegra_release` (written by the L4T BSP) or by a device-tree
model naming a Jetson/Orin module. Nothing here touches NVML or torch.
"""

from __future__ import annotations

import re
from pathlib import Path

from trainforge.hardware.platform import GpuInfo, JetsonInfo

TEGRA_RELEASE = "etc/nv_tegra_release"
DEVICE_TREE_MODEL = "proc/device-tree/model"
UNKNOWN_L4T = "unknown"

# L4T (Jetson Linux) release -> JetPack release. Source for every row: NVIDIA's JetPack
# archive (developer.nvidia.com/embedded/jetpack-archive) and the matching JetPack release
# notes, which state the Jetson Linux version each JetPack ships. Versions not listed map to
# None rather than a guess, since a wrong JetPack would mislead users about CUDA/TensorRT.
L4T_TO_JETPACK: dict[str, str] = {
    "32.5.0": "4.5",  # JetPack 4.5 release notes: L4T R32.5
    "32.5.1": "4.5.1",  # JetPack 4.5.1 release notes: L4T R32.5.1
    "32.6.1": "4.6",  # JetPack 4.6 release notes: L4T R32.6.1
    "32.7.1": "4.6.1",  # JetPack 4.6.1 release notes: L4T R32.7.1
    "32.7.2": "4.6.2",  # JetPack 4.6.2 release notes: L4T R32.7.2
    "32.7.3": "4.6.3",  # JetPack 4.6.3 release notes: L4T R32.7.3
    "32.7.4": "4.6.4",  # JetPack 4.6.4 release notes: L4T R32.7.4
    "32.7.5": "4.6.5",  # JetPack 4.6.5 release notes: L4T R32.7.5
    "34.1.0": "5.0",  # JetPack 5.0 (Developer Preview) release notes: L4T R34.1
    "34.1.1": "5.0.1",  # JetPack 5.0.1 (Developer Preview) release notes: L4T R34.1.1
    "35.1.0": "5.0.2",  # JetPack 5.0.2 release notes: L4T R35.1
    "35.2.1": "5.1",  # JetPack 5.1 release notes: L4T R35.2.1
    "35.3.1": "5.1.1",  # JetPack 5.1.1 release notes: L4T R35.3.1
    "35.4.1": "5.1.2",  # JetPack 5.1.2 release notes: L4T R35.4.1
    "35.5.0": "5.1.3",  # JetPack 5.1.3 release notes: L4T R35.5.0
    "35.6.0": "5.1.4",  # JetPack 5.1.4 release notes: L4T R35.6.0
    "36.2.0": "6.0 DP",  # JetPack 6.0 Developer Preview release notes: L4T R36.2
    "36.3.0": "6.0",  # JetPack 6.0 (GA) release notes: L4T R36.3
    "36.4.0": "6.1",  # JetPack 6.1 release notes: L4T R36.4
    "36.4.3": "6.2",  # JetPack 6.2 release notes: L4T R36.4.3
    "36.4.4": "6.2.1",  # JetPack 6.2.1 release notes: L4T R36.4.4
}

# e.g. "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, ..."
_RELEASE_RE = re.compile(r"#\s*R(\d+)\s*\([^)]*\)\s*,\s*REVISION:\s*(\d+)(?:\.(\d+))?")

# Compute capability of the integrated GPU per Jetson family (CUDA GPU table, nvidia.com).
_FAMILY_COMPUTE: dict[str, tuple[int, int]] = {"Orin": (8, 7), "Xavier": (7, 2)}


def read_text(path: Path) -> str | None:
    """The file's text, or None when it is missing, unreadable or not a file."""
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return None


def parse_l4t_version(text: str) -> str | None:
    """The L4T version in an nv_tegra_release line, e.g. "36.3.0"; None if not recognised."""
    match = _RELEASE_RE.search(text)
    if match is None:
        return None
    major, revision, patch = match.group(1), match.group(2), match.group(3) or "0"
    return f"{int(major)}.{int(revision)}.{int(patch)}"


def jetpack_for_l4t(l4t_version: str) -> str | None:
    """The JetPack release that ships this L4T version, or None when not in the table."""
    return L4T_TO_JETPACK.get(l4t_version)


def read_model(root: Path) -> str | None:
    """The device-tree model string with its trailing NUL byte(s) stripped, or None."""
    text = read_text(root / DEVICE_TREE_MODEL)
    if text is None:
        return None
    model = text.replace("\x00", "").strip()
    return model or None


def _looks_like_jetson(model: str | None) -> bool:
    return model is not None and ("jetson" in model.lower() or "orin" in model.lower())


def read_jetson(root: Path) -> JetsonInfo | None:
    """Jetson facts under `root`, or None when this is not a Jetson."""
    release = read_text(root / TEGRA_RELEASE)
    model = read_model(root)
    if release is None and not _looks_like_jetson(model):
        return None
    l4t = parse_l4t_version(release) if release is not None else None
    return JetsonInfo(
        model=model or "NVIDIA Jetson (unknown model)",
        l4t_version=l4t or UNKNOWN_L4T,
        jetpack_version=jetpack_for_l4t(l4t) if l4t else None,
    )


def synthesize_gpu(jetson: JetsonInfo, memory_gib: float) -> GpuInfo:
    """The integrated GPU when NVML does not see it (Jetsons before Thor have no NVML).

    Memory is unified, so the GPU can address the whole system RAM.
    """
    for family, compute in _FAMILY_COMPUTE.items():
        if family.lower() in jetson.model.lower():
            return GpuInfo(0, f"{family} (nvgpu)", memory_gib, compute)
    return GpuInfo(0, f"{jetson.model} (nvgpu)", memory_gib, None)
