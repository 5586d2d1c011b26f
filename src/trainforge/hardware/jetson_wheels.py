"""Jetson PyTorch wheels: which JetPack this board runs, and how to install torch for it.

JetPack ships CUDA builds of PyTorch that PyPI does not serve, so a plain `pip install torch`
on a Jetson gets a CPU-only (or no) wheel. This module owns:
- reading the JetPack release from the files a Jetson has: `/etc/nv_tegra_release` first, then
  the `nvidia-l4t-core` package version in `/var/lib/dpkg/status`, plus the device-tree model
  (parsing and the L4T -> JetPack table are reused from `jetson.py`);
- `WHEEL_TABLE`, the single place that maps JetPack releases to pip commands for torch,
  torchvision and torchaudio;
- `recommend()` and the `main()` command behind `scripts/jetson_torch_install.py` (and
  `trainforge jetson-wheel`); `wheel_row()` for `trainforge doctor`'s JetPack/PyTorch check.

It runs on a fresh Jetson before any virtual environment exists, so it imports only the
standard library and `trainforge.hardware` (which itself imports no third-party package at
import time), never torch.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from trainforge.errors import UserError
from trainforge.hardware.jetson import (
    DEVICE_TREE_MODEL,
    L4T_TO_JETPACK,
    TEGRA_RELEASE,
    jetpack_for_l4t,
    parse_l4t_version,
    read_jetson,
    read_model,
    read_text,
)

DPKG_STATUS = "var/lib/dpkg/status"
L4T_CORE_PACKAGE = "nvidia-l4t-core"
REDIST_INDEX = "https://developer.download.nvidia.com/compute/redist/jp/"
RERUN_HINT = f"rerun this after a JetPack upgrade (or see {REDIST_INDEX})"

_JP5_PREREQUISITES = "sudo apt-get install -y python3-pip libopenblas-dev"
_JP5_TORCH = "torch-2.1.0a0+41361538.nv23.06-cp38-cp38-linux_aarch64.whl"
_JETSON_AI_LAB = "https://pypi.jetson-ai-lab.dev/jp6"
# "36.3.0-20240506102626" -> "36.3.0"; some releases omit the patch ("36.3-...").
_DPKG_VERSION_RE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:[-+~].*)?$")


@dataclass(frozen=True)
class WheelRow:
    """One JetPack family and the commands that install its PyTorch build, in order."""

    jetpacks: tuple[str, ...]
    commands: tuple[str, ...]
    notes: tuple[str, ...]
    source: str
    # The CUDA release the JetPack ships (what `torch.version.cuda` must say), and the
    # Python the wheel is built for where the command pins one (None: the index serves it).
    cuda: str
    python: str | None = None


_JP60_TORCH = "torch-2.4.0a0+07cecf4168.nv24.05.14710581-cp310-cp310-linux_aarch64.whl"
_JP61_TORCH = "torch-2.5.0a0+872d972e41.nv24.08.17622132-cp310-cp310-linux_aarch64.whl"
_BUILT_FROM_SOURCE = (
    "torchvision and torchaudio build from source (tens of minutes on an Orin); "
    "torchvision needs `sudo apt-get install -y libjpeg-dev zlib1g-dev`, "
    "torchaudio needs cmake and ninja",
)
_CUSPARSELT = (
    "if `import torch` fails on libcusparseLt.so, install cuSPARSELt: "
    "bash scripts/install_cusparselt.sh"
)


def _redist(folder: str, wheel: str, vision: str, audio: str) -> tuple[str, ...]:
    """NVIDIA's own torch wheel from the redist index, then torchvision and torchaudio from
    the source tags that match it (NVIDIA publishes no wheels of those for Jetson)."""
    return (
        _JP5_PREREQUISITES,
        f"python3 -m pip install --no-cache-dir {REDIST_INDEX}{folder}/pytorch/{wheel}",
        "python3 -m pip install --no-build-isolation"
        f" 'torchvision @ git+https://github.com/pytorch/vision.git@{vision}'",
        "python3 -m pip install --no-build-isolation"
        f" 'torchaudio @ git+https://github.com/pytorch/audio.git@{audio}'",
    )


def _alternative(cuda: str) -> str:
    index = f"{_JETSON_AI_LAB}/{cuda}"
    return (
        "or, without building from source, the Jetson AI Lab pip index (community builds of "
        f"all three): python3 -m pip install torch torchvision torchaudio --index-url {index}"
    )


# JetPack -> install commands. Keep this the single place to update when NVIDIA publishes new
# builds. Written offline on 2025-06 from what was known then: check each URL on a board (or
# in a browser) before relying on it, and update the row's date when you do.
WHEEL_TABLE: tuple[WheelRow, ...] = (
    # JetPack 5.1.x (L4T R35, Python 3.8, CUDA 11.4). Source: NVIDIA "Installing PyTorch for
    # Jetson Platform" (docs.nvidia.com/deeplearning/frameworks/install-pytorch-jetson-platform)
    # for the apt prerequisites and the TORCH_INSTALL wheel pattern, and the redist index
    # .../redist/jp/v512/pytorch/ (v51/ and v511/ hold older 5.1 builds); NVIDIA's "PyTorch
    # for Jetson" forum post lists torch 2.1.0 for JetPack 5.1-5.1.2. 5.1.3/5.1.4 keep R35 and
    # CUDA 11.4 but have no listing of their own: assumed to take the same wheel. NVIDIA ships
    # no torchvision/torchaudio wheels for JetPack 5, so they are built from the source tags
    # that match torch 2.1 (vision v0.16.1, audio v2.1.0). As of 2025-06, unverified offline.
    WheelRow(
        jetpacks=("5.1", "5.1.1", "5.1.2", "5.1.3", "5.1.4"),
        commands=_redist("v512", _JP5_TORCH, vision="v0.16.1", audio="v2.1.0"),
        notes=(
            *_BUILT_FROM_SOURCE,
            "older 5.1 builds: " + REDIST_INDEX + "v51/pytorch/ and v511/pytorch/",
        ),
        source=f"NVIDIA 'Installing PyTorch for Jetson Platform'; {REDIST_INDEX}v512/pytorch/",
        cuda="11.4",
        python="3.8",  # the wheel's cp38 tag
    ),
    # JetPack 6.0 (L4T R36.3; the 6.0 DP, R36.2, has the same CUDA 12.2, Python 3.10). Source:
    # NVIDIA "Installing PyTorch for Jetson Platform" and the redist index .../jp/v60/pytorch/
    # (torch 2.4.0a0 nv24.05, cp310), as the Jetson guide points at NVIDIA's redist index for
    # JetPack 5.1+. NVIDIA ships no torchvision/torchaudio there: built from the source tags
    # that match torch 2.4 (vision v0.19.0, audio v2.4.0). The Jetson AI Lab index (jp6/cu122)
    # serves all three built together: printed as the alternative. As of 2025-06, unverified
    # offline.
    WheelRow(
        jetpacks=("6.0", "6.0 DP"),
        commands=_redist("v60", _JP60_TORCH, vision="v0.19.0", audio="v2.4.0"),
        notes=(*_BUILT_FROM_SOURCE, _alternative("cu122"), _CUSPARSELT),
        source=f"NVIDIA 'Installing PyTorch for Jetson Platform'; {REDIST_INDEX}v60/pytorch/",
        cuda="12.2",
        python="3.10",  # the wheel's cp310 tag
    ),
    # JetPack 6.1 and 6.2 (L4T R36.4.x, CUDA 12.6, Python 3.10). Source: the redist index
    # .../jp/v61/pytorch/ (torch 2.5.0a0 nv24.08, cp310; JetPack 6.2 keeps R36.4 and CUDA 12.6
    # and takes the same wheel), torchvision v0.20.0 / torchaudio v2.5.0 from source; this
    # torch needs libcusparseLt (NVIDIA docs). The Jetson AI Lab index jp6/cu126 is the
    # alternative (NVIDIA forums, 2025-01: "We provide 2.4.0, 2.5.0, and 2.6.0rc1 for the
    # JetPack 6.1 environment"). As of 2025-06, unverified offline.
    WheelRow(
        jetpacks=("6.1", "6.2", "6.2.1"),
        commands=_redist("v61", _JP61_TORCH, vision="v0.20.0", audio="v2.5.0"),
        notes=(*_BUILT_FROM_SOURCE, _alternative("cu126"), _CUSPARSELT),
        source=f"NVIDIA 'Installing PyTorch for Jetson Platform'; {REDIST_INDEX}v61/pytorch/",
        cuda="12.6",
        python="3.10",  # the wheel's cp310 tag
    ),
)


@dataclass(frozen=True)
class Recommendation:
    """What to run for one JetPack release; `l4t` is the L4T version(s) that ship it."""

    jetpack: str
    l4t: str
    commands: list[str]
    notes: list[str]
    source: str


@dataclass(frozen=True)
class JetsonRelease:
    """What the board says about itself; `l4t`/`jetpack` are None when unreadable/unmapped."""

    model: str | None
    l4t: str | None
    jetpack: str | None
    source: str


def wheel_row(jetpack: str) -> WheelRow | None:
    """The table row for a JetPack release ("6.1.0" and "JetPack 6.1" work), or None."""
    wanted = normalize_jetpack(jetpack)
    return next((row for row in WHEEL_TABLE if wanted in row.jetpacks), None)


def supported_jetpacks() -> list[str]:
    """Every JetPack release the table has commands for, in table order."""
    return [jetpack for row in WHEEL_TABLE for jetpack in row.jetpacks]


def normalize_jetpack(text: str) -> str:
    """ "JetPack 6.1", "v6.1" and "6.1.0" all mean "6.1"; "6.0" stays "6.0"."""
    value = text.strip()
    value = re.sub(r"^(jetpack|jp)\s*", "", value, flags=re.IGNORECASE).lstrip("vV").strip()
    parts = value.split(".")
    if len(parts) == 3 and parts[2] == "0":
        value = ".".join(parts[:2])
    return value


def recommend(jetpack: str) -> Recommendation:
    """The install commands for a JetPack release; UserError when the table lacks it."""
    wanted = normalize_jetpack(jetpack)
    row = wheel_row(wanted)
    if row is not None:
        return Recommendation(
            jetpack=wanted,
            l4t=_l4t_for_jetpack(wanted),
            commands=list(row.commands),
            notes=list(row.notes),
            source=row.source,
        )
    raise UserError(
        f"no PyTorch install commands for JetPack {jetpack!r} "
        f"(supported: {', '.join(supported_jetpacks())})",
        fix="pass --jetpack X.Y with one of the supported versions",
    )


def _l4t_for_jetpack(jetpack: str) -> str:
    versions = [l4t for l4t, jp in L4T_TO_JETPACK.items() if jp == jetpack]
    return ", ".join(versions) if versions else "unknown"


def parse_dpkg_l4t(status_text: str) -> str | None:
    """The L4T version of the installed `nvidia-l4t-core` in a dpkg status file, or None.

    Only an installed package counts: a removed one leaves a "deinstall ... config-files"
    stanza behind whose version no longer describes the board.
    """
    for stanza in re.split(r"\n\s*\n", status_text):
        fields = _stanza_fields(stanza)
        if fields.get("package") != L4T_CORE_PACKAGE:
            continue
        if "status" in fields and not fields["status"].endswith(" installed"):
            continue
        match = _DPKG_VERSION_RE.match(fields.get("version", ""))
        if match is not None:
            major, minor, patch = match.group(1), match.group(2), match.group(3) or "0"
            return f"{int(major)}.{int(minor)}.{int(patch)}"
    return None


def _stanza_fields(stanza: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in stanza.splitlines():
        # Continuation lines (descriptions, conffiles) start with a space: not fields.
        if not line or line[0].isspace() or ":" not in line:
            continue
        key, _, value = line.partition(":")
        fields[key.strip().lower()] = value.strip()
    return fields


def detect_release(root: Path = Path("/")) -> JetsonRelease | None:
    """The JetPack facts under `root`, or None when nothing there says "Jetson".

    The release file wins; the dpkg status covers images where it is missing or unparseable
    (containers, some minimal rootfs builds).
    """
    model = read_model(root)
    release_text = read_text(root / TEGRA_RELEASE)
    l4t = parse_l4t_version(release_text) if release_text is not None else None
    if l4t is not None:
        return JetsonRelease(model, l4t, jetpack_for_l4t(l4t), f"/{TEGRA_RELEASE}")
    dpkg_text = read_text(root / DPKG_STATUS)
    l4t = parse_dpkg_l4t(dpkg_text) if dpkg_text is not None else None
    if l4t is not None:
        source = f"{L4T_CORE_PACKAGE} in /{DPKG_STATUS}"
        return JetsonRelease(model, l4t, jetpack_for_l4t(l4t), source)
    if read_jetson(root) is not None:  # a Jetson model string, but no readable version
        return JetsonRelease(model, None, None, f"/{DEVICE_TREE_MODEL}")
    return None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jetson_torch_install.py",
        description="Print the pip commands that install PyTorch (torch, torchvision, "
        "torchaudio) for this Jetson's JetPack release. Installs nothing itself.",
    )
    parser.add_argument(
        "--jetpack",
        metavar="X.Y",
        help=f"JetPack release to print commands for, instead of the detected one "
        f"({', '.join(supported_jetpacks())})",
    )
    # Hidden: tests point this at recorded board files.
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None, *, root: Path = Path("/")) -> int:
    """Print the detected board and the install commands; 0 on success, 2 on user errors."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse already printed usage and the error (or --help)
        return exc.code if isinstance(exc.code, int) else 2
    root = args.root if args.root is not None else root
    try:
        release = detect_release(root)
        jetpack = args.jetpack or _detected_jetpack(release, root)
        recommendation = recommend(jetpack)
    except UserError as err:
        print(err.line(), file=sys.stderr)
        return 2
    for line in _report(release, recommendation, overridden=args.jetpack is not None):
        print(line)
    return 0


def _detected_jetpack(release: JetsonRelease | None, root: Path) -> str:
    if release is None:
        raise _NotAJetson(root)
    if release.l4t is None:
        raise UserError(
            f"found a Jetson ({release.model}) but no L4T version in {root / TEGRA_RELEASE} "
            f"or {root / DPKG_STATUS}",
            fix="pass --jetpack X.Y (see `cat /etc/nv_tegra_release` or `apt show nvidia-jetpack`)",
        )
    if release.jetpack is None:
        raise UserError(
            f"L4T {release.l4t} is not in trainforge's L4T -> JetPack table",
            fix="pass --jetpack X.Y (see `apt show nvidia-jetpack`)",
        )
    return release.jetpack


class _NotAJetson(UserError):
    """No release file, no nvidia-l4t-core package and no Jetson model under `root`."""

    def __init__(self, root: Path) -> None:
        super().__init__(
            f"this is not a Jetson (no {root / TEGRA_RELEASE}, no {L4T_CORE_PACKAGE} in "
            f"{root / DPKG_STATUS})"
        )

    def line(self) -> str:
        return f"{self.message}: pass --jetpack X.Y to print the commands for a given JetPack"


def _report(release: JetsonRelease | None, rec: Recommendation, *, overridden: bool) -> list[str]:
    lines = []
    if release is None:
        lines.append("model: not a Jetson (commands for --jetpack only)")
    else:
        lines.append(f"model: {release.model or 'unknown'}")
        lines.append(f"L4T: {release.l4t or 'unknown'} (from {release.source})")
        lines.append(f"detected JetPack: {release.jetpack or 'unknown'}")
    if overridden:
        lines.append(f"JetPack: {rec.jetpack} (from --jetpack; ships L4T {rec.l4t})")
    lines.append(f"PyTorch for JetPack {rec.jetpack} ({rec.source}):")
    lines.extend(f"  {command}" for command in rec.commands)
    lines.extend(f"note: {note}" for note in rec.notes)
    lines.append(RERUN_HINT)
    return lines
