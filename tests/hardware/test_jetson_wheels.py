"""The Jetson PyTorch wheel helper: JetPack detection, the wheel table, and its command line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trainforge.errors import UserError
from trainforge.hardware.jetson_wheels import (
    WHEEL_TABLE,
    detect_release,
    main,
    parse_dpkg_l4t,
    recommend,
    supported_jetpacks,
    wheel_row,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "jetson_torch_install.py"
JP6_INDEX = "https://pypi.jetson-ai-lab.dev/jp6/cu122"
REDIST = "https://developer.download.nvidia.com/compute/redist/jp/"
JP5_WHEEL_DIR = REDIST + "v512/pytorch/"

DPKG_STATUS = """\
Package: nvidia-l4t-bootloader
Status: install ok installed
Version: 36.3.0-20240506102626

Package: nvidia-l4t-core
Status: install ok installed
Priority: standard
Architecture: arm64
Version: 36.3.0-20240506102626
Description: NVIDIA Core Package
 Version: 35.1.0 (a continuation line, not the package version)

Package: python3
Status: install ok installed
Version: 3.10.6-1~22.04
"""


def _package_pattern(name: str) -> re.Pattern[str]:
    # \b keeps "torch" from matching inside "torchvision" / "torchaudio".
    return re.compile(rf"\b{name}\b")


def test_detects_jetpack_5_from_release_file() -> None:
    release = detect_release(FIXTURES / "jetson-orin-jp5")
    assert release is not None
    assert (release.model, release.l4t, release.jetpack) == (
        "NVIDIA Jetson AGX Orin Developer Kit",
        "35.4.1",
        "5.1.2",
    )
    assert release.source == "/etc/nv_tegra_release"


def test_detects_jetpack_6_from_release_file() -> None:
    release = detect_release(FIXTURES / "jetson-orin-jp6")
    assert release is not None
    assert (release.l4t, release.jetpack) == ("36.3.0", "6.0")


def test_detects_jetpack_from_dpkg_status_without_release_file(tmp_path: Path) -> None:
    (tmp_path / "var/lib/dpkg").mkdir(parents=True)
    (tmp_path / "var/lib/dpkg/status").write_text(DPKG_STATUS, encoding="utf-8")
    release = detect_release(tmp_path)
    assert release is not None
    assert (release.model, release.l4t, release.jetpack) == (None, "36.3.0", "6.0")
    assert "nvidia-l4t-core" in release.source


def test_dpkg_ignores_removed_package_and_odd_versions() -> None:
    removed = "Package: nvidia-l4t-core\nStatus: deinstall ok config-files\nVersion: 35.4.1-1\n"
    assert parse_dpkg_l4t(removed) is None
    assert parse_dpkg_l4t("Package: nvidia-l4t-core\nVersion: banana\n") is None
    assert parse_dpkg_l4t("Package: nvidia-l4t-core\nVersion: 36.4-2024\n") == "36.4.0"


def test_non_jetson_root_is_not_detected() -> None:
    assert detect_release(FIXTURES / "cpu") is None


def test_main_prints_detected_jetpack_6_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([], root=FIXTURES / "jetson-orin-jp6") == 0
    out = capsys.readouterr().out
    assert "NVIDIA Jetson Orin Nano Developer Kit" in out
    assert "L4T: 36.3.0" in out
    # The Jetson guide's default: NVIDIA's redist wheel first, the Jetson AI Lab index as the
    # alternative.
    lines = out.splitlines()
    wheel = f"python3 -m pip install --no-cache-dir {REDIST}v60/pytorch/torch-2.4.0a0+"
    first = next(i for i, line in enumerate(lines) if "pip install" in line)
    assert lines[first].strip().startswith(wheel), out
    assert lines[first].strip().endswith("-cp310-cp310-linux_aarch64.whl")
    alternative = [line for line in lines if JP6_INDEX in line]
    assert len(alternative) == 1 and alternative[0].startswith("note: or, without building")
    assert f"pip install torch torchvision torchaudio --index-url {JP6_INDEX}" in alternative[0]
    assert out.rstrip().endswith(
        "rerun this after a JetPack upgrade "
        "(or see https://developer.download.nvidia.com/compute/redist/jp/)"
    )


def test_main_prints_detected_jetpack_6_1_commands(capsys: pytest.CaptureFixture[str]) -> None:
    # The Orin Nano recorded for `trainforge doctor`: nv_tegra_release says R36 REVISION 4.0.
    assert main([], root=FIXTURES / "doctor" / "jetson-orin-nano-jp61") == 0
    out = capsys.readouterr().out
    assert "L4T: 36.4.0 (from /etc/nv_tegra_release)" in out
    assert "detected JetPack: 6.1" in out
    assert f"{REDIST}v61/pytorch/torch-2.5.0a0+" in out.split("note:")[0]
    assert "note: or, without building from source, the Jetson AI Lab pip index" in out
    assert "--index-url https://pypi.jetson-ai-lab.dev/jp6/cu126" in out
    assert "note: if `import torch` fails on libcusparseLt.so" in out
    assert "bash scripts/install_cusparselt.sh" in out


def test_every_row_names_the_cuda_release_of_its_jetpack() -> None:
    # The CUDA column is what `trainforge doctor` compares torch.version.cuda against.
    assert [row.cuda for row in WHEEL_TABLE] == ["11.4", "12.2", "12.6"]
    assert wheel_row("JetPack 6.2").cuda == "12.6"
    assert wheel_row("5.1.2").python == "3.8"  # the wheel's cp38 tag
    assert wheel_row("6.1").python == wheel_row("6.0").python == "3.10"  # cp310
    assert wheel_row("4.6") is None


def test_main_prints_jetpack_5_prerequisites(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--root", str(FIXTURES / "jetson-orin-jp5")]) == 0
    out = capsys.readouterr().out
    assert "sudo apt-get install -y python3-pip libopenblas-dev" in out
    assert JP5_WHEEL_DIR in out


def test_jetpack_override_wins_over_detection(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--jetpack", "6.2"], root=FIXTURES / "jetson-orin-jp5") == 0
    out = capsys.readouterr().out
    assert "detected JetPack: 5.1.2" in out
    assert "https://pypi.jetson-ai-lab.dev/jp6/cu126" in out
    assert JP5_WHEEL_DIR not in out


def test_jetpack_override_works_off_jetson(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--jetpack", "JetPack 5.1.1"], root=FIXTURES / "cpu") == 0
    assert "libopenblas-dev" in capsys.readouterr().out


@pytest.mark.parametrize("row", WHEEL_TABLE, ids=lambda row: row.jetpacks[0])
def test_every_row_installs_all_three_packages_and_names_a_source(row) -> None:
    text = "\n".join(row.commands)
    for package in ("torch", "torchvision", "torchaudio"):
        assert _package_pattern(package).search(text), f"{row.jetpacks}: no {package}"
    assert row.source.strip()
    assert all(command.strip() for command in row.commands)


def test_table_covers_jetpack_5_1_and_6() -> None:
    assert {"5.1", "5.1.2", "6.0", "6.1", "6.2"} <= set(supported_jetpacks())
    assert len(supported_jetpacks()) == len(set(supported_jetpacks())), "duplicate JetPack"


def test_recommend_returns_commands_and_l4t() -> None:
    rec = recommend("6.1.0")
    assert (rec.jetpack, rec.l4t) == ("6.1", "36.4.0")
    assert rec.commands and rec.source


def test_unknown_jetpack_is_a_user_error_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UserError, match=r"4\.6"):
        recommend("4.6")
    assert main(["--jetpack", "9.9"], root=FIXTURES / "jetson-orin-jp6") == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert "9.9" in lines[0] and "6.2" in lines[0] and "--jetpack" in lines[0]


def test_non_jetson_without_override_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([], root=FIXTURES / "cpu") == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("this is not a Jetson (no ")
    assert "--jetpack" in lines[0]
    assert "Traceback" not in captured.err


def test_jetson_with_unmapped_l4t_asks_for_override(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/nv_tegra_release").write_text("# R99 (release), REVISION: 1.0, GCID: 1\n")
    assert main([], root=tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert "L4T 99.1.0" in err and "--jetpack" in err and len(err.splitlines()) == 1


def _run_script(*args: str, env: dict[str, str] | None = None, isolated: bool = False):
    # -S skips site-packages: proves the script needs neither the editable install nor psutil.
    flags = ["-S"] if isolated else []
    return subprocess.run(
        [sys.executable, *flags, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        cwd=REPO,
    )


def test_script_prints_jetpack_6_commands_without_trainforge_installed() -> None:
    result = _run_script("--root", str(FIXTURES / "jetson-orin-jp6"), isolated=True)
    assert result.returncode == 0, result.stderr
    assert f"--index-url {JP6_INDEX}" in result.stdout


def test_script_works_when_psutil_cannot_be_imported(tmp_path: Path) -> None:
    (tmp_path / "psutil.py").write_text("raise ImportError('psutil is broken on purpose')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = _run_script("--root", str(FIXTURES / "jetson-orin-jp6"), env=env)
    assert result.returncode == 0, result.stderr
    assert f"--index-url {JP6_INDEX}" in result.stdout


def test_importing_the_helper_pulls_in_no_third_party_module() -> None:
    code = (
        "import sys, trainforge.hardware.jetson_wheels; "
        "print(sorted({'torch', 'psutil', 'pynvml', 'numpy'} & set(sys.modules)))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_script_is_executable() -> None:
    assert SCRIPT.read_text(encoding="utf-8").startswith("#!/usr/bin/env python3\n")
    assert os.access(SCRIPT, os.X_OK)
