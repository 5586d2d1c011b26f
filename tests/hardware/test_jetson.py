"""L4T/JetPack parsing and Jetson detection from (possibly broken) files."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainforge.hardware import Probe, detect, jetpack_for_l4t, parse_l4t_version, pick_profile
from trainforge.hardware.jetson import L4T_TO_JETPACK, read_jetson

JP5_LINE = (
    "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, "
    "DATE: Tue Aug  1 19:57:35 UTC 2023"
)


def make_root(
    tmp_path: Path, release: str | bytes | None = None, model: bytes | None = None
) -> Path:
    if release is not None:
        (tmp_path / "etc").mkdir()
        data = release.encode() if isinstance(release, str) else release
        (tmp_path / "etc/nv_tegra_release").write_bytes(data)
    if model is not None:
        (tmp_path / "proc/device-tree").mkdir(parents=True)
        (tmp_path / "proc/device-tree/model").write_bytes(model)
    return tmp_path


def jetson_probe(root: Path) -> Probe:
    return Probe(root=root, env={}, machine="aarch64", system="linux", cpu_count=8, gpus=())


@pytest.mark.parametrize(
    ("line", "version"),
    [
        (JP5_LINE, "35.4.1"),
        ("# R36 (release), REVISION: 3.0, GCID: 36191598, BOARD: generic, EABI: aarch64", "36.3.0"),
        ("# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic", "36.4.3"),
        ("# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t186ref", "32.7.1"),
        ("# R35 (release), REVISION: 5, GCID: 1", "35.5.0"),
    ],
)
def test_parse_l4t_version(line: str, version: str) -> None:
    assert parse_l4t_version(line) == version


@pytest.mark.parametrize("text", ["", "garbage", "# R (release), REVISION: x.y", "R35 REVISION"])
def test_parse_l4t_version_garbled(text: str) -> None:
    assert parse_l4t_version(text) is None


@pytest.mark.parametrize(
    ("l4t", "jetpack"),
    [
        ("35.4.1", "5.1.2"),
        ("36.3.0", "6.0"),
        ("36.4.0", "6.1"),
        ("36.4.3", "6.2"),
        ("99.0.0", None),
    ],
)
def test_jetpack_mapping(l4t: str, jetpack: str | None) -> None:
    assert jetpack_for_l4t(l4t) == jetpack


def test_jetpack_table_is_well_formed() -> None:
    for l4t, jetpack in L4T_TO_JETPACK.items():
        assert len(l4t.split(".")) == 3
        assert all(part.isdigit() for part in l4t.split("."))
        assert jetpack[0] in "456"


def test_not_a_jetson(tmp_path: Path) -> None:
    assert read_jetson(make_root(tmp_path, model=b"Raspberry Pi 4 Model B Rev 1.4\x00")) is None
    assert read_jetson(tmp_path / "missing") is None


def test_model_alone_identifies_jetson(tmp_path: Path) -> None:
    info = read_jetson(make_root(tmp_path, model=b"NVIDIA Jetson AGX Orin Developer Kit\x00"))
    assert info is not None
    assert info.model == "NVIDIA Jetson AGX Orin Developer Kit"
    assert (info.l4t_version, info.jetpack_version) == ("unknown", None)


def test_garbled_release_and_model_do_not_crash(tmp_path: Path) -> None:
    root = make_root(tmp_path, release=b"\xff\xfe\x00garbage", model=b"\xff\xfeJetson\x00\x00")
    platform = detect(jetson_probe(root))
    assert platform.kind == "jetson"
    assert platform.jetson is not None
    assert platform.jetson.l4t_version == "unknown"
    assert platform.jetson.jetpack_version is None
    assert "\x00" not in platform.jetson.model
    assert "L4T unknown, JetPack unknown" in platform.describe()


def test_release_without_model(tmp_path: Path) -> None:
    platform = detect(jetson_probe(make_root(tmp_path, release=JP5_LINE)))
    assert platform.kind == "jetson"
    assert platform.jetson is not None
    assert platform.jetson.model == "NVIDIA Jetson (unknown model)"
    assert platform.jetson.jetpack_version == "5.1.2"


def test_unreadable_files_are_absent(tmp_path: Path) -> None:
    # Directories where files are expected make every read fail with an OSError.
    (tmp_path / "etc/nv_tegra_release").mkdir(parents=True)
    (tmp_path / "proc/device-tree/model").mkdir(parents=True)
    (tmp_path / "proc/meminfo").mkdir(parents=True)
    platform = detect(Probe(root=tmp_path, env={}, machine="x86_64", system="linux", gpus=()))
    assert platform.kind == "cpu"
    assert platform.jetson is None
    assert platform.memory_gib > 0  # fell back to psutil


def test_xavier_picks_nearest_profile(tmp_path: Path) -> None:
    root = make_root(tmp_path, release=JP5_LINE, model=b"NVIDIA Jetson Xavier NX Developer Kit\x00")
    platform = detect(jetson_probe(root))
    assert platform.gpus[0].name == "Xavier (nvgpu)"
    assert platform.gpus[0].compute_capability == (7, 2)
    profile, reason = pick_profile(platform)
    assert profile == "jetson-orin"
    assert "not an Orin" in reason
    assert "nearest" in reason
    assert "Xavier NX" in reason
