"""`trainforge doctor` on recorded machines (fixtures/doctor/*) and on this machine.

The recorded machines stand in for hardware we do not have here (GPU workstations, a DGX
Spark, Jetson boards): each folder holds real-format files (/proc/driver/nvidia/version,
/etc/nv_tegra_release, /proc/meminfo, kern.log, libraries) plus `probe.json` and
`doctor.json` for the facts that need a live process (the PyTorch build, free disk, /dev/shm).
The checks and the command run unchanged on them.
"""

from __future__ import annotations

import os
import platform as stdlib_platform
import subprocess
import sys
from pathlib import Path

import pytest

from trainforge.doctor import Context, diagnose, main
from trainforge.doctor.checks import arch_runs_on
from trainforge.doctor.facts import (
    find_cusparselt,
    gather_facts,
    load_doctor_fixture,
    read_driver_version,
    read_nv_queue_reports,
)
from trainforge.engine.checkpoint import checkpoints_kept, periodic_saves
from trainforge.errors import UserError

REPO = Path(__file__).resolve().parents[2]
CASES = Path(__file__).resolve().parent / "fixtures" / "doctor"
HEAVY_IMAGES = ["data.dataset=image-folder", "data.image_size=224"]

# case -> (exit code, {check: expected status}) with the config defaults. A warning is a
# finding like a problem: exit code 1; `info` and `skip` rows are not.
EXPECTED = {
    "workstation-healthy": (0, {"torch build": "ok", "GPU architecture": "ok", "disk space": "ok"}),
    "laptop-cpu-only": (0, {"torch build": "info", "GPU architecture": "skip", "disk space": "ok"}),
    "workstation-cpu-torch": (1, {"torch build": "problem", "GPU architecture": "skip"}),
    "workstation-old-driver": (1, {"NVIDIA driver": "problem", "torch build": "ok"}),
    "laptop-nv-queue": (1, {"nv_queue stalls": "warn", "persistence mode": "warn"}),
    "dgx-spark-pypi-torch": (1, {"GPU architecture": "problem", "torch build": "ok"}),
    "dgx-spark-container": (1, {"/dev/shm": "warn", "GPU architecture": "ok"}),
    "jetson-orin-nano-jp61": (1, {"disk space": "problem", "JetPack wheel": "ok"}),
    "jetson-agx-orin-jp60-cu126-wheel": (1, {"JetPack wheel": "problem", "swap": "ok"}),
    "jetson-agx-orin-jp61-no-cusparselt": (1, {"torch import": "problem", "cuSPARSELt": "warn"}),
    "jetson-agx-orin-jp512-python310": (1, {"JetPack wheel": "problem", "swap": "warn"}),
}


def doctor(capsys, case: str, *args: str) -> tuple[int, str, str]:
    """Run the real command on a recorded machine; (exit code, stdout, stderr)."""
    config = None
    if args and not args[0].startswith("--"):
        config, args = Path(args[0]), args[1:]
    overrides = [
        value for flag, value in zip(args[::2], args[1::2], strict=True) if flag == "--set"
    ]
    code = main(config, overrides=overrides, fixture=CASES / case)
    out = capsys.readouterr()
    return code, out.out, out.err


def statuses(case: str, overrides: list[str] | None = None) -> dict[str, str]:
    from trainforge.doctor import load_config

    facts = load_doctor_fixture(CASES / case)
    config, error = load_config(None, facts.platform, None, overrides or [])
    return {f.check: f.status for f in diagnose(Context(facts, config, error))}


def row(out: str, check: str) -> str:
    """The table line of one check (status, name, finding)."""
    lines = [line for line in out.splitlines() if line[9:].startswith(check + " ")]
    assert len(lines) == 1, out
    return lines[0]


def test_every_case_folder_has_expectations() -> None:
    assert {p.name for p in CASES.iterdir() if p.is_dir()} == set(EXPECTED)


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_case_exit_code_and_findings(capsys, case: str) -> None:
    code, out, err = doctor(capsys, case)
    want_code, want = EXPECTED[case]
    assert code == want_code, out + err
    found = statuses(case)
    for check, status in want.items():
        assert found[check] == status, (check, found)
    problems = [check for check, status in found.items() if status == "problem"]
    warnings = [check for check, status in found.items() if status == "warn"]
    # Exit code 1 exactly when there is a finding (a warning or a problem).
    assert (code == 1) == bool(problems or warnings), found
    # One stderr line per finding, problems first, each naming the check and the fix.
    lines = err.splitlines()
    assert [line.split(":")[1].strip() for line in lines] == problems + warnings
    kinds = ["problem: "] * len(problems) + ["warning: "] * len(warnings)
    assert all(line.startswith(kind) for line, kind in zip(lines, kinds, strict=True))
    assert all(". Fix: " in line and not line.endswith("Fix: None") for line in lines)
    assert "Traceback" not in out + err


def test_healthy_workstation_has_no_warning(capsys) -> None:
    code, out, err = doctor(capsys, "workstation-healthy")
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == "trainforge doctor: CUDA (1 GPU)"
    assert out.splitlines()[1].split() == ["status", "check", "finding"]
    assert out.rstrip().endswith("0 problems, 0 warnings")
    assert "NVIDIA GeForce RTX 4090 (8.9) supported by sm_75" in row(out, "GPU architecture")
    assert "driver 580.95.05 runs CUDA 13.0" in row(out, "NVIDIA driver")


def test_cpu_only_torch_with_a_gpu(capsys) -> None:
    code, out, err = doctor(capsys, "workstation-cpu-torch")
    assert code == 1
    line = row(out, "torch build")
    assert line.startswith("PROBLEM")
    assert (
        "torch 2.14.1+cpu is a CPU-only build, but this machine has NVIDIA GeForce RTX 4090" in line
    )
    assert "https://pytorch.org/get-started/" in err


def test_blackwell_missing_from_arch_list(capsys) -> None:
    code, out, err = doctor(capsys, "dgx-spark-pypi-torch")
    assert code == 1
    line = row(out, "GPU architecture")
    assert "NVIDIA GB10 has compute 12.1" in line
    assert "built only for sm_80 sm_90" in line
    assert "cannot find any torch accelerator" in line
    # On a DGX Spark the fix is the NGC container, not another pip wheel.
    assert err.count("scripts/run-dgx-container.sh") == 1


def test_small_dev_shm_is_a_problem_for_big_batches(capsys) -> None:
    # 128 images of 224x224x3 uint8 per batch x 4 workers x prefetch 2 = 147 MiB > 64 MiB.
    code, out, err = doctor(
        capsys, "dgx-spark-container", "--set", HEAVY_IMAGES[0], "--set", HEAVY_IMAGES[1]
    )
    assert code == 1
    line = row(out, "/dev/shm")
    assert line.startswith("PROBLEM")
    assert "64 MiB free; 4 loader workers keep about 147 MiB" in line
    assert "--ipc=host" in err


def test_small_dev_shm_is_a_warning_for_small_batches(capsys) -> None:
    # A warning alone is still a finding: exit code 1, its line and fix on stderr.
    code, out, err = doctor(capsys, "dgx-spark-container")
    assert code == 1
    assert row(out, "/dev/shm").startswith("warn")
    assert "Docker's default" in row(out, "/dev/shm")
    assert err.startswith("warning: /dev/shm: 64 MiB, Docker's default")
    assert "--ipc=host" in err and len(err.splitlines()) == 1
    assert out.rstrip().endswith("0 problems, 1 warning")


def test_cpu_only_laptop_is_healthy(capsys) -> None:
    # No GPU is a fact to report, not something to fix: info, exit code 0, nothing on stderr.
    code, out, err = doctor(capsys, "laptop-cpu-only", "config/vit_digits.yaml")
    assert (code, err) == (0, "")
    assert row(out, "torch build").startswith("info ")
    assert "no NVIDIA GPU on this machine: runs train on CPU" in row(out, "torch build")
    assert "fix:" not in out
    assert out.rstrip().endswith("0 problems, 0 warnings")


def test_low_disk_depends_on_the_configured_checkpoints(capsys) -> None:
    code, out, err = doctor(capsys, "jetson-orin-nano-jp61")
    assert code == 1
    assert "0.40 GiB free" in row(out, "disk space")
    assert "disk space" in err
    # The digits ViT writes 6 MiB checkpoints: the same disk is enough for it.
    _, out, err = doctor(capsys, "jetson-orin-nano-jp61", "config/vit_digits.yaml")
    assert row(out, "disk space").startswith("ok")
    assert "disk space" not in err


def test_disk_estimate_counts_every_kept_checkpoint() -> None:
    from trainforge.config import RunConfig

    config = RunConfig.model_validate({"checkpoint": {"save_total_limit": 3, "save_best": True}})
    assert checkpoints_kept(config.checkpoint, config.training, None) == 3 + 1 + 2
    unlimited = RunConfig.model_validate(
        {
            "checkpoint": {"save_total_limit": None, "save_every_epochs": 5},
            "training": {"num_train_epochs": 100},
        }
    )
    # 20 epoch checkpoints; the last lands on the run's last step, so no extra one
    assert checkpoints_kept(unlimited.checkpoint, unlimited.training, None) == 20 + 1 + 2


@pytest.mark.parametrize(
    ("checkpoint", "training", "steps_per_epoch", "saves"),
    [
        # The DGX plan's cadence: by step only, every one kept; the run's end is step 500's
        ({"save_steps": 100, "save_every_epochs": None}, {"max_steps": 500}, 7, 5),
        ({"save_steps": 100, "save_every_epochs": None}, {"max_steps": 550}, 7, 5 + 1),
        # by step beside epochs shorter than save_steps: the epoch ones are skipped
        ({"save_steps": 100, "save_every_epochs": 1}, {"num_train_epochs": 30}, 10, 3),
        # by step and by epoch (epochs of 200 steps): 10 + 5, the end already saved; an epoch's
        # end on a save_steps step is one folder and a link, so this bounds the disk from above
        ({"save_steps": 100, "save_every_epochs": 1}, {"num_train_epochs": 5}, 200, 15),
        # nothing periodic: the run's last step only
        ({"save_steps": None, "save_every_epochs": None}, {"max_steps": 40}, 7, 1),
    ],
)
def test_periodic_saves_count_save_steps_as_the_cadence_writes_them(
    checkpoint, training, steps_per_epoch, saves
) -> None:
    """The count a run's start line and doctor give: it counted epochs only before, so a run
    by save_steps with save_total_limit null (every checkpoint kept) was told 1 + 3."""
    from trainforge.config import RunConfig

    config = RunConfig.model_validate(
        {"checkpoint": {**checkpoint, "save_total_limit": None}, "training": training}
    )
    assert periodic_saves(config.checkpoint, config.training, steps_per_epoch) == saves
    assert checkpoints_kept(config.checkpoint, config.training, steps_per_epoch) == (
        saves + int(config.checkpoint.save_best) + 2
    )


def test_save_steps_without_steps_per_epoch_is_not_guessed() -> None:
    from trainforge.config import RunConfig

    config = RunConfig.model_validate(
        {"checkpoint": {"save_steps": 50, "save_total_limit": None}, "training": {}}
    )
    assert periodic_saves(config.checkpoint, config.training, None) is None
    assert checkpoints_kept(config.checkpoint, config.training, None) is None
    limited = RunConfig.model_validate({"checkpoint": {"save_steps": 50, "save_total_limit": 2}})
    assert checkpoints_kept(limited.checkpoint, limited.training, None) == 2 + 1 + 2


def test_memory_budget_larger_than_the_board(capsys) -> None:
    _, out, err = doctor(capsys, "jetson-orin-nano-jp61")
    line = row(out, "memory budget")
    assert (
        "profile jetson-orin plans for 12 GiB, this machine has 7.4 GiB of unified memory" in line
    )
    assert "--set hardware.memory_budget_gib=7" in err


def test_jetpack_and_wheel_mismatch(capsys) -> None:
    _, out, err = doctor(capsys, "jetson-agx-orin-jp60-cu126-wheel")
    assert "torch 2.5.0 is built for CUDA 12.6, JetPack 6.0 ships CUDA 12.2" in row(
        out, "JetPack wheel"
    )
    assert "scripts/jetson_torch_install.py" in err


def test_missing_cusparselt_points_at_the_installer(capsys) -> None:
    _, out, err = doctor(capsys, "jetson-agx-orin-jp61-no-cusparselt")
    assert "cannot load cuSPARSELt: OSError: libcusparseLt.so.0" in row(out, "torch import")
    assert "bash scripts/install_cusparselt.sh" in err
    # The Nano fixture has the library in /usr/local/cuda/lib64: found there.
    assert statuses("jetson-orin-nano-jp61")["cuSPARSELt"] == "ok"


def test_jetpack5_wheel_needs_python_3_8(capsys) -> None:
    _, out, _ = doctor(capsys, "jetson-agx-orin-jp512-python310")
    assert "built for Python 3.8, this is Python 3.10.12" in row(out, "JetPack wheel")
    assert "PyTorch is not installed" in row(out, "torch import")
    assert "no swap" in row(out, "swap")


def test_driver_too_old_for_the_torch_cuda(capsys) -> None:
    _, out, _ = doctor(capsys, "workstation-old-driver")
    assert "driver 550.54.14 is older than 580.65.06, the minimum for CUDA 13.x" in row(
        out, "NVIDIA driver"
    )


def test_nv_queue_stalls_get_the_seed_002_fixes(capsys) -> None:
    # With a budget that fits the 16 GiB laptop GPU, only the two warnings remain; they are
    # findings, so the exit code is 1 and stderr has one line for each.
    code, out, err = doctor(capsys, "laptop-nv-queue", "--set", "hardware.memory_budget_gib=14")
    assert code == 1
    assert [line.split(":")[:2] for line in err.splitlines()] == [
        ["warning", " persistence mode"],
        ["warning", " nv_queue stalls"],
    ]
    assert "2 hung-task report(s)" in row(out, "nv_queue stalls")
    assert "Mar  3 21:42:19 task nv_queue:1187 blocked for more than 245 seconds" in out
    fix = out.split(row(out, "nv_queue stalls"))[1].splitlines()[1]
    for step in ("pcie_aspm=off", "sudo update-grub", "nvidia-smi -pm 1", "nvidia-smi -lgc"):
        assert step in fix
    assert out.rstrip().endswith("0 problems, 2 warnings")


def test_bad_config_is_a_finding_not_a_traceback(capsys) -> None:
    code, out, err = doctor(capsys, "workstation-healthy", "does/not/exist.yaml")
    assert code == 1
    assert "config file does/not/exist.yaml not found" in row(out, "run config")
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("arch", "capability", "runs"),
    [
        ("sm_120", (12, 1), True),  # GB10 (DGX Spark) runs sm_120 cubins
        ("sm_90", (12, 1), False),
        ("compute_90", (12, 1), True),  # PTX is JIT-compiled for newer GPUs
        ("compute_120", (9, 0), False),
        ("sm_86", (8, 9), True),
        ("sm_89", (8, 6), False),
        ("sm_87", (8, 7), True),  # Jetson Orin
        ("sm_80", (8, 7), False),  # dGPU code does not run on the Orin iGPU
        ("sm_90a", (9, 0), True),
        ("sm_90a", (10, 0), False),
        ("sm_100", (11, 0), False),
        ("nonsense", (8, 0), False),
    ],
)
def test_arch_runs_on(arch: str, capability: tuple[int, int], runs: bool) -> None:
    assert arch_runs_on(arch, capability) is runs


def test_arch_rule_agrees_with_pytorchs_own_table() -> None:
    import torch.cuda

    # PyTorch's (code SM -> devices that run it) table for CUDA < 13.2; 101/110 were renamed.
    table = torch.cuda.DEVICE_REQUIREMENT
    devices = [50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 103, 120, 121]
    checked = 0
    for code, requirement in table.items():
        if code in (101, 110):
            continue
        for device in devices:
            ours = arch_runs_on(f"sm_{code}", (device // 10, device % 10))
            assert ours == (device in requirement), (code, device)
            checked += 1
    assert checked > 250


def test_file_facts_parse_real_formats(tmp_path: Path) -> None:
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    version = tmp_path / "proc/driver/nvidia/version"
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12\n")
    assert read_driver_version(tmp_path) == "535.183.01"
    version.write_text("garbage\n")
    assert read_driver_version(tmp_path) is None
    (tmp_path / "var/log").mkdir(parents=True)
    line = "Jan 9 01:02:03 h kernel: INFO: task nv_queue:77 blocked for more than 120 seconds.\n"
    (tmp_path / "var/log/kern.log").write_text(line + "unrelated\n")
    (tmp_path / "var/log/syslog").write_text(line)  # the same report twice counts once
    assert len(read_nv_queue_reports(tmp_path)) == 1
    lib = tmp_path / "usr/lib/aarch64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libcusparseLt.so.0").write_bytes(b"")
    assert find_cusparselt(tmp_path) == ("/usr/lib/aarch64-linux-gnu/libcusparseLt.so.0",)


def test_malformed_fixture_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "probe.json").write_text('{"machine": "x86_64"}')
    (tmp_path / "doctor.json").write_text('{"torch": {}}')  # no "python"
    with pytest.raises(UserError, match=r"doctor\.json"):
        load_doctor_fixture(tmp_path)


def test_gather_facts_on_this_machine(tmp_path: Path) -> None:
    facts = gather_facts(tmp_path / "runs")
    assert facts.python_version == stdlib_platform.python_version()
    assert facts.disk_free_bytes is not None and facts.disk_free_bytes > 0
    assert facts.disk_path == str(tmp_path)  # runs/ does not exist yet: its parent is checked
    assert facts.torch.version is not None  # the test environment has torch
    if sys.platform == "linux":
        assert facts.shm_total_bytes is not None and facts.shm_total_bytes > 0


def test_doctor_command_on_this_machine(cli) -> None:
    result = cli("doctor", "config/vit_digits.yaml", timeout=120)
    assert result.returncode in (0, 1), result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("trainforge doctor: ")
    assert lines[1].split() == ["status", "check", "finding"]
    assert "torch import" in result.stdout and "disk space" in result.stdout
    # Exit code 1 exactly when a finding (problem or warning) is reported, one stderr line each.
    findings = result.stdout.count("\nPROBLEM ") + result.stdout.count("\nwarn ")
    assert (result.returncode == 1) == (findings > 0)
    assert len(result.stderr.splitlines()) == findings
    assert "Traceback" not in result.stderr


def test_importing_doctor_does_not_import_torch(run_without_torch) -> None:
    run_without_torch(
        "import sys, trainforge.doctor, trainforge.cli; "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )


def test_broken_torch_is_reported_through_the_real_import(tmp_path: Path) -> None:
    # A torch package that fails the way NVIDIA's JetPack 6.1 wheel does without cuSPARSELt.
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch/__init__.py").write_text(
        "raise OSError('libcusparseLt.so.0: cannot open shared object file: "
        "No such file or directory')\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO / 'src'}", "COLUMNS": "200"}
    result = subprocess.run(
        [sys.executable, "-m", "trainforge", "doctor", "config/vit_digits.yaml"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "cannot load cuSPARSELt: OSError: libcusparseLt.so.0" in result.stdout
    assert "problem: torch import:" in result.stderr
    assert "bash scripts/install_cusparselt.sh" in result.stderr
    assert "Traceback" not in result.stderr
