"""detect() on this machine, memory reading, fixture loading, and the no-torch rule."""

from __future__ import annotations

import json
import os
import platform as stdlib_platform
import shutil
import sys
from pathlib import Path

import pytest

from trainforge.errors import UserError
from trainforge.hardware import Platform, Probe, detect, load_fixture, pick_profile
from trainforge.hardware.detect import read_memory_gib
from trainforge.registry import PROFILES

SRC = Path(__file__).resolve().parents[2] / "src"


def test_import_and_detect_do_not_import_torch(run_without_torch) -> None:
    code = (
        "import sys, trainforge.hardware as h; p = h.detect(); h.pick_profile(p); p.describe(); "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    run_without_torch(code)


def test_detect_on_this_machine() -> None:
    platform = detect()
    assert isinstance(platform, Platform)
    assert platform.kind in ("jetson", "dgx-spark", "cuda", "mps", "cpu")
    assert platform.device in ("cuda", "mps", "cpu")
    assert platform.cpu_count >= 1
    assert platform.memory_gib > 0
    assert platform.arch == stdlib_platform.machine()
    assert pick_profile(platform)[0] in PROFILES
    no_accelerator = (
        shutil.which("nvidia-smi") is None
        and not Path("/etc/nv_tegra_release").exists()
        and sys.platform == "linux"
    )
    if no_accelerator:
        assert (platform.kind, pick_profile(platform)[0]) == ("cpu", "cpu")


def write_meminfo(root: Path, text: str) -> Path:
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc/meminfo").write_text(text)
    return root


def test_meminfo_memtotal(tmp_path: Path) -> None:
    root = write_meminfo(tmp_path, "MemTotal:       16252928 kB\nMemFree:  1 kB\n")
    assert read_memory_gib(root) == 15.5


def psutil_gib() -> float:
    import psutil

    return round(psutil.virtual_memory().total / 1024**3, 2)


@pytest.mark.parametrize(
    "text", ["", "MemFree: 12 kB\n", "MemTotal: lots kB\n", "MemTotal: 0 kB\n", "\x00\xff"]
)
def test_garbled_meminfo_falls_back_to_psutil(tmp_path: Path, text: str) -> None:
    assert read_memory_gib(write_meminfo(tmp_path, text)) == psutil_gib()


def test_missing_meminfo_falls_back_to_psutil(tmp_path: Path) -> None:
    assert read_memory_gib(tmp_path) == psutil_gib()


def test_probe_defaults_read_this_machine() -> None:
    probe = Probe(gpus=())
    assert probe.env is os.environ
    platform = detect(probe)
    assert platform.cpu_count == (os.cpu_count() or 1)
    assert platform.os_name == stdlib_platform.system().lower()


def test_slurm_attached_to_any_kind(tmp_path: Path) -> None:
    probe = Probe(
        root=tmp_path,
        env={"SLURM_JOB_ID": "31", "SLURM_NNODES": "1"},
        machine="arm64",
        system="darwin",
        gpus=(),
    )
    platform = detect(probe)
    assert platform.kind == "mps"
    assert platform.slurm is not None
    assert platform.slurm.job_id == "31"


def test_load_fixture_accepts_string_compute_capability(tmp_path: Path) -> None:
    data = {
        "machine": "x86_64",
        "system": "linux",
        "cpu_count": 2,
        "gpus": [{"name": "NVIDIA L4", "memory_gib": 22.5, "compute_capability": "8.9"}],
    }
    (tmp_path / "probe.json").write_text(json.dumps(data))
    probe = load_fixture(tmp_path)
    assert probe.root == tmp_path
    assert probe.env == {}
    assert probe.gpus is not None
    assert probe.gpus[0].compute_capability == (8, 9)
    assert probe.gpus[0].index == 0


@pytest.mark.parametrize(
    "content", [None, "{not json", "[1, 2]", '{"gpus": [{"memory_gib": 1}]}', '{"env": 5}']
)
def test_load_fixture_errors_are_user_errors(tmp_path: Path, content: str | None) -> None:
    if content is not None:
        (tmp_path / "probe.json").write_text(content)
    with pytest.raises(UserError) as excinfo:
        load_fixture(tmp_path)
    assert "\n" not in str(excinfo.value)
    assert "probe.json" in str(excinfo.value)
