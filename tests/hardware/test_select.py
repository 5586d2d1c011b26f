"""Profile choice for `profile: auto` and `training.device` resolution."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainforge.errors import UserError
from trainforge.hardware import (
    GpuInfo,
    Platform,
    Probe,
    SlurmInfo,
    detect,
    pick_profile,
    resolve_device,
)


def cuda_platform(*gpus: tuple[str, float], slurm: SlurmInfo | None = None) -> Platform:
    infos = tuple(GpuInfo(i, name, mem, (8, 0)) for i, (name, mem) in enumerate(gpus))
    env = {"SLURM_JOB_ID": slurm.job_id} if slurm else {}
    platform = detect(Probe(env=env, machine="x86_64", system="linux", cpu_count=4, gpus=infos))
    return replace(platform, slurm=slurm)


def cpu_platform(system: str = "linux", machine: str = "x86_64", mps: bool = False) -> Platform:
    probe = Probe(env={}, machine=machine, system=system, cpu_count=4, gpus=(), mps_available=mps)
    return detect(probe)


@pytest.mark.parametrize(
    ("gpus", "profile"),
    [
        ([("NVIDIA H100 80GB HBM3", 79.6)], "hpc-a100"),
        ([("NVIDIA H200", 140.0)], "hpc-a100"),
        ([("NVIDIA B200", 180.0)], "hpc-a100"),
        ([("NVIDIA A100-PCIE-40GB", 40.0)], "hpc-a100"),
        ([("NVIDIA GeForce RTX 3090", 24.0)], "workstation-24gb"),
        ([("NVIDIA RTX A6000", 48.0)], "workstation-24gb"),
        ([("NVIDIA L40S", 45.0)], "workstation-24gb"),
        ([("NVIDIA GeForce RTX 4090", 24.0)] * 2, "workstation-24gb"),
        ([("Tesla V100-SXM2-16GB", 16.0)], "workstation-24gb"),
        ([("Some Future Accelerator", 96.0)], "hpc-a100"),
    ],
)
def test_cuda_profiles(gpus: list[tuple[str, float]], profile: str) -> None:
    picked, reason = pick_profile(cuda_platform(*gpus))
    assert picked == profile
    assert gpus[0][0] in reason


def test_slurm_with_gpus_picks_hpc() -> None:
    slurm = SlurmInfo("42", 1, 1, 2, 0, "gpu", "n1")
    picked, reason = pick_profile(cuda_platform(("NVIDIA GeForce RTX 3090", 24.0), slurm=slurm))
    assert picked == "hpc-a100"
    assert "Slurm job 42" in reason


def test_slurm_without_gpus_stays_cpu() -> None:
    platform = detect(Probe(env={"SLURM_JOB_ID": "9"}, machine="x86_64", system="linux", gpus=()))
    assert platform.slurm is not None
    assert platform.slurm.job_id == "9"
    assert pick_profile(platform)[0] == "cpu"


def test_gb10_on_x86_is_not_dgx_spark() -> None:
    # The DGX Spark rule needs the aarch64 host as well as the GB10 name.
    assert cuda_platform(("NVIDIA GB10", 0.0)).kind == "cuda"


def test_mps_platform() -> None:
    platform = cpu_platform(system="darwin", machine="arm64", mps=True)
    assert (platform.kind, platform.device) == ("mps", "mps")
    profile, reason = pick_profile(platform)
    assert profile == "cpu"
    assert "MPS" in reason
    assert "platform: Apple Silicon (MPS)" in platform.describe()


def test_mps_defaults_from_system_and_machine() -> None:
    probe = Probe(env={}, machine="arm64", system="darwin", cpu_count=8, gpus=())
    assert detect(probe).kind == "mps"
    assert detect(replace(probe, machine="x86_64")).kind == "cpu"


def test_cpu_profile_reason() -> None:
    profile, reason = pick_profile(cpu_platform())
    assert profile == "cpu"
    assert "CPU" in reason


@pytest.mark.parametrize("requested", ["auto", "AUTO", " auto "])
def test_auto_resolves_to_platform_device(requested: str) -> None:
    assert resolve_device(requested, cuda_platform(("NVIDIA A100-SXM4-80GB", 80.0))) == "cuda"
    assert resolve_device(requested, cpu_platform()) == "cpu"
    assert resolve_device(requested, cpu_platform("darwin", "arm64", mps=True)) == "mps"


def test_explicit_devices_that_exist() -> None:
    assert resolve_device("cuda", cuda_platform(("NVIDIA GeForce RTX 4090", 24.0))) == "cuda"
    assert resolve_device("cpu", cuda_platform(("NVIDIA GeForce RTX 4090", 24.0))) == "cpu"
    assert resolve_device("mps", cpu_platform("darwin", "arm64", mps=True)) == "mps"


@pytest.mark.parametrize(
    ("requested", "platform"),
    [
        ("cuda", cpu_platform()),
        ("cuda", cpu_platform("darwin", "arm64", mps=True)),
        ("mps", cpu_platform()),
        ("mps", cuda_platform(("NVIDIA GeForce RTX 4090", 24.0))),
    ],
)
def test_missing_device_is_a_one_line_user_error(requested: str, platform: Platform) -> None:
    with pytest.raises(UserError) as excinfo:
        resolve_device(requested, platform)
    line = str(excinfo.value)
    assert "\n" not in line
    assert f"training.device={requested}" in line
    assert "found:" in line
    assert "set training.device=cpu or auto" in line


def test_unknown_device_is_a_user_error() -> None:
    with pytest.raises(UserError, match="'tpu' is not one of auto, cuda, mps, cpu"):
        resolve_device("tpu", cpu_platform())
