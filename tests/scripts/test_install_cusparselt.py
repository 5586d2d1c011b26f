"""scripts/install_cusparselt.sh: archive choice per CUDA/arch, detection, and a real install.

We have no Jetson, DGX Spark or CUDA toolkit to install into, so the tests pass the CUDA
version and architecture by flag or environment (as PyTorch's CI passes CUDA_VERSION and
TARGETARCH), read recorded /etc and /usr/local/cuda files through CUSPARSELT_ROOT, and run the
real install path on an archive in NVIDIA's layout that the test writes.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from trainforge.hardware.jetson import L4T_TO_JETPACK
from trainforge.hardware.jetson_wheels import wheel_row

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "install_cusparselt.sh"
FIXTURES = REPO / "tests" / "hardware" / "fixtures"
REDIST = "https://developer.download.nvidia.com/compute/cusparselt/redist/libcusparse_lt"


def run(*args: str, env: dict[str, str] | None = None, path: str | None = None):
    """Run the script with a clean CUDA environment (no CUDA_VERSION/TARGETARCH leaking in)."""
    base = {k: v for k, v in os.environ.items() if k not in ("CUDA_VERSION", "TARGETARCH")}
    if path is not None:
        base["PATH"] = path
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **(env or {})},
    )


def archive_line(stdout: str) -> str:
    (line,) = [line for line in stdout.splitlines() if line.startswith("archive: ")]
    return line.removeprefix("archive: ")


@pytest.mark.parametrize(
    ("cuda", "arch", "archive"),
    [
        ("12.8", "x86_64", "libcusparse_lt-linux-x86_64-0.7.1.0-archive.tar.xz"),
        ("12.4", "x86_64", "libcusparse_lt-linux-x86_64-0.6.2.3-archive.tar.xz"),
        ("11.8", "x86_64", "libcusparse_lt-linux-x86_64-0.4.0.7-archive.tar.xz"),
        ("13.0", "sbsa", "libcusparse_lt-linux-sbsa-0.8.0.4_cuda13-archive.tar.xz"),  # DGX Spark
        ("12.1", "sbsa", "libcusparse_lt-linux-sbsa-0.5.2.1-archive.tar.xz"),
        ("12.6", "jetson", "libcusparse_lt-linux-aarch64-0.6.3.2-archive.tar.xz"),  # JP 6.1
        ("12.2", "jetson", "libcusparse_lt-linux-aarch64-0.6.3.2-archive.tar.xz"),  # JP 6.0
    ],
)
def test_dry_run_prints_the_archive_for_each_architecture(cuda, arch, archive) -> None:
    result = run("--dry-run", "--cuda", cuda, "--arch", arch)
    assert result.returncode == 0, result.stderr
    assert archive_line(result.stdout) == archive
    folder = "aarch64" if arch == "jetson" else arch
    assert f"url: {REDIST}/linux-{folder}/{archive}" in result.stdout
    assert f"cp -a /tmp/cusparselt.XXXXXX/{archive.removesuffix('.tar.xz')}/lib/. " in result.stdout
    assert "/usr/local/cuda/lib64/" in result.stdout


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    prefix = tmp_path / "cuda"
    result = run("--dry-run", "--cuda", "12.6", "--arch", "x86_64", "--prefix", str(prefix))
    assert result.returncode == 0, result.stderr
    assert not prefix.exists()
    assert "dry run: would run" in result.stdout


def test_environment_like_pytorchs_ci_script() -> None:
    # CUDA_VERSION and TARGETARCH are the variables PyTorch's install_cusparselt.sh reads.
    result = run("--dry-run", env={"CUDA_VERSION": "12.9", "TARGETARCH": "amd64"})
    assert result.returncode == 0, result.stderr
    assert archive_line(result.stdout) == "libcusparse_lt-linux-x86_64-0.7.1.0-archive.tar.xz"
    assert "(from $CUDA_VERSION) on x86_64" in result.stdout


def test_jetson_detected_from_recorded_root() -> None:
    # The recorded Orin Nano on JetPack 6.1 (L4T R36.4): aarch64 + nv_tegra_release -> jetson.
    root = FIXTURES / "doctor" / "jetson-orin-nano-jp61"
    result = run("--dry-run", env={"CUSPARSELT_ROOT": str(root), "TARGETARCH": "aarch64"})
    assert result.returncode == 0, result.stderr
    assert "CUDA 12.6 (from /etc/nv_tegra_release (JetPack's CUDA)) on jetson" in result.stdout
    assert archive_line(result.stdout) == "libcusparse_lt-linux-aarch64-0.6.3.2-archive.tar.xz"


def test_sbsa_detected_from_cuda_version_json(tmp_path: Path) -> None:
    (tmp_path / "usr/local/cuda").mkdir(parents=True)
    (tmp_path / "usr/local/cuda/version.json").write_text(
        '{\n   "cuda" : {\n      "name" : "CUDA SDK",\n      "version" : "13.0.1"\n   },\n'
        '   "cuda_cudart" : {\n      "version" : "13.0.96"\n   }\n}\n'
    )
    result = run("--dry-run", env={"CUSPARSELT_ROOT": str(tmp_path), "TARGETARCH": "aarch64"})
    assert result.returncode == 0, result.stderr
    assert "CUDA 13.0 (from /usr/local/cuda/version.json) on sbsa" in result.stdout
    assert archive_line(result.stdout).startswith("libcusparse_lt-linux-sbsa-0.8.0.4_cuda13")


def test_cuda_detected_from_version_txt(tmp_path: Path) -> None:
    (tmp_path / "usr/local/cuda").mkdir(parents=True)
    (tmp_path / "usr/local/cuda/version.txt").write_text("CUDA Version 11.8.89\n")
    result = run("--dry-run", env={"CUSPARSELT_ROOT": str(tmp_path), "TARGETARCH": "x86_64"})
    assert result.returncode == 0, result.stderr
    assert archive_line(result.stdout) == "libcusparse_lt-linux-x86_64-0.4.0.7-archive.tar.xz"


def test_cuda_detected_from_nvcc(tmp_path: Path) -> None:
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(
        "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
        "echo 'Cuda compilation tools, release 12.6, V12.6.68'\n"
    )
    nvcc.chmod(0o755)
    result = run(
        "--dry-run", env={"TARGETARCH": "x86_64"}, path=f"{tmp_path}{os.pathsep}/usr/bin:/bin"
    )
    assert result.returncode == 0, result.stderr
    assert "CUDA 12.6 (from nvcc --version) on x86_64" in result.stdout


def tegra_release(root: Path, l4t: str) -> None:
    """Write /etc/nv_tegra_release of L4T release `l4t` (e.g. 36.4.0) under `root`."""
    major, revision, patch = l4t.split(".")
    (root / "etc").mkdir()
    (root / "etc/nv_tegra_release").write_text(
        f"# R{major} (release), REVISION: {revision}.{patch}, GCID: 1, BOARD: generic, "
        "EABI: aarch64, DATE: Mon May  6 17:34:21 UTC 2024\n"
    )


WITH_WHEEL = sorted(l4t for l4t, jp in L4T_TO_JETPACK.items() if wheel_row(jp) is not None)
# JetPack 4.x (L4T R32) and 5.0/5.0.1 (R34): CUDA 10.2 and a developer-preview 11.4, no
# PyTorch wheel row and no cuSPARSELt archive; JetPack 5.0.2 (R35.1) ships R35's CUDA 11.4.
WITHOUT_WHEEL = sorted(set(L4T_TO_JETPACK) - set(WITH_WHEEL))


def test_every_l4t_release_is_checked_by_one_of_the_two_tests() -> None:
    assert WITH_WHEEL and WITHOUT_WHEEL
    assert {l4t.split(".")[0] for l4t in WITHOUT_WHEEL} <= {"32", "34", "35"}


@pytest.mark.parametrize("l4t", WITH_WHEEL)
def test_jetpack_cuda_agrees_with_the_wheel_table(tmp_path: Path, l4t: str) -> None:
    row = wheel_row(L4T_TO_JETPACK[l4t])
    tegra_release(tmp_path, l4t)
    result = run("--dry-run", env={"CUSPARSELT_ROOT": str(tmp_path), "TARGETARCH": "aarch64"})
    # JetPack 5.1's CUDA 11.4 has no Jetson archive: the refusal line names it all the same
    assert f"CUDA {row.cuda} (from /etc/nv_tegra_release" in result.stdout + result.stderr


@pytest.mark.parametrize("l4t", WITHOUT_WHEEL)
def test_a_jetpack_without_a_wheel_row_is_refused_or_gets_r35s_cuda(
    tmp_path: Path, l4t: str
) -> None:
    tegra_release(tmp_path, l4t)
    result = run("--dry-run", env={"CUSPARSELT_ROOT": str(tmp_path), "TARGETARCH": "aarch64"})
    if l4t.startswith("35."):
        assert "CUDA 11.4 (from /etc/nv_tegra_release" in result.stdout + result.stderr
    else:
        assert result.returncode == 2, result.stdout
        (line,) = result.stderr.splitlines()
        assert "cannot find the CUDA version" in line and "pass --cuda X.Y" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cuda", "11.8", "--arch", "sbsa"], "CUDA 11.8 (from --cuda) on sbsa"),
        (["--cuda", "11.4", "--arch", "jetson"], "no cuSPARSELt archive known for CUDA 11.4"),
        (["--cuda", "13.0", "--arch", "jetson"], "pass --arch sbsa"),
        (["--cuda", "twelve", "--arch", "x86_64"], "CUDA version 'twelve' is not X.Y"),
        (["--cuda", "12.6", "--arch", "ppc64le"], "unknown --arch 'ppc64le'"),
        (["--frobnicate"], "unknown argument '--frobnicate'"),
        (["--cuda"], "--cuda needs a value"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message) -> None:
    result = run("--dry-run", *args)
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert message in line and ". Fix: " in line


def test_no_cuda_anywhere_asks_for_the_flag(tmp_path: Path) -> None:
    result = run("--dry-run", env={"CUSPARSELT_ROOT": str(tmp_path), "TARGETARCH": "x86_64"})
    assert result.returncode == 2
    assert "cannot find the CUDA version" in result.stderr
    assert "pass --cuda X.Y" in result.stderr


def test_version_override_picks_the_per_cuda_archive() -> None:
    result = run("--dry-run", "--cuda", "12.6", "--arch", "jetson", "--version", "0.8.1.1")
    assert (
        archive_line(result.stdout) == "libcusparse_lt-linux-aarch64-0.8.1.1_cuda12-archive.tar.xz"
    )


def write_nvidia_archive(folder: Path, name: str) -> Path:
    """An archive in NVIDIA's redist layout: <name>/include/*.h and <name>/lib/*.so*."""
    tree = folder / name
    (tree / "include").mkdir(parents=True)
    (tree / "lib").mkdir()
    (tree / "include/cusparseLt.h").write_text("/* cuSPARSELt header */\n")
    (tree / "lib/libcusparseLt.so.0.6.3.2").write_bytes(b"\x7fELF fake")
    os.symlink("libcusparseLt.so.0.6.3.2", tree / "lib/libcusparseLt.so.0")
    archive = folder / f"{name}.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(tree, arcname=name)
    return archive


def test_real_install_from_a_local_archive(tmp_path: Path) -> None:
    name = "libcusparse_lt-linux-aarch64-0.6.3.2-archive"
    archive = write_nvidia_archive(tmp_path / "download", name)
    prefix = tmp_path / "cuda"
    result = run(
        "--cuda",
        "12.6",
        "--arch",
        "jetson",
        "--archive",
        str(archive),
        "--prefix",
        str(prefix),
        "--no-ldconfig",
    )
    assert result.returncode == 0, result.stderr
    assert (prefix / "include/cusparseLt.h").read_text() == "/* cuSPARSELt header */\n"
    assert (prefix / "lib64/libcusparseLt.so.0").is_symlink()  # cp -a keeps the links
    assert (prefix / "lib64/libcusparseLt.so.0").read_bytes() == b"\x7fELF fake"
    assert f"installed: {prefix}/lib64/libcusparseLt.so" in result.stdout


def test_install_rejects_an_archive_for_another_release(tmp_path: Path) -> None:
    archive = write_nvidia_archive(tmp_path, "libcusparse_lt-linux-x86_64-0.7.1.0-archive")
    result = run(
        "--cuda",
        "12.6",
        "--arch",
        "jetson",
        "--archive",
        str(archive),
        "--prefix",
        str(tmp_path / "cuda"),
        "--no-ldconfig",
    )
    assert result.returncode == 2
    assert "has no libcusparse_lt-linux-aarch64-0.6.3.2-archive/lib folder" in result.stderr
    assert not (tmp_path / "cuda/lib64/libcusparseLt.so.0").exists()


def test_help_lists_every_option() -> None:
    result = run("--help")
    assert result.returncode == 0
    for option in ("--dry-run", "--cuda", "--arch", "--version", "--archive", "--prefix"):
        assert option in result.stdout
    assert os.access(SCRIPT, os.X_OK)


def test_an_unreachable_server_ends_on_one_line(tmp_path: Path) -> None:
    """Offline, the script ends on one line naming the server it cannot reach and the fix,
    not on curl's retry notices. A closed local port stands in for the network: curl fails
    to connect the way it does without one (nothing listens on port 1)."""
    prefix = tmp_path / "cuda"
    result = run(
        "--cuda", "12.6", "--arch", "x86_64", "--prefix", str(prefix), "--no-ldconfig",
        env={"CUSPARSELT_REDIST": "http://127.0.0.1:1/redist"},
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("install_cusparselt.sh: cannot reach 127.0.0.1:1 to download ")
    assert "pass --archive FILE" in line and "Will retry" not in result.stderr
    assert not (prefix / "lib64").exists()


def test_the_jetson_guides_command_runs_from_the_project_root() -> None:
    """`bash install_cusparselt.sh`, as the Jetson guide writes it, from the project root."""
    base = {k: v for k, v in os.environ.items() if k not in ("CUDA_VERSION", "TARGETARCH")}
    result = subprocess.run(
        ["bash", "install_cusparselt.sh", "--dry-run", "--cuda", "12.6", "--arch", "jetson"],
        cwd=REPO, capture_output=True, text=True, timeout=60, env=base,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert archive_line(result.stdout) == "libcusparse_lt-linux-aarch64-0.6.3.2-archive.tar.xz"
    help_text = subprocess.run(
        ["bash", "install_cusparselt.sh", "--help"], cwd=REPO, capture_output=True, text=True
    )
    assert "--archive F" in help_text.stdout
