"""Every recorded machine under fixtures/ detects as the right kind, device and profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainforge.hardware import detect, load_fixture, pick_profile
from trainforge.registry import PROFILES

FIXTURES = Path(__file__).resolve().parent / "fixtures"

# fixture name -> (kind, device, profile)
EXPECTED = {
    "jetson-orin-jp5": ("jetson", "cuda", "jetson-orin"),
    "jetson-orin-jp6": ("jetson", "cuda", "jetson-orin"),
    "dgx-spark": ("dgx-spark", "cuda", "dgx-spark"),
    "cuda-workstation": ("cuda", "cuda", "workstation-24gb"),
    "slurm-a100": ("cuda", "cuda", "hpc-a100"),
    "cpu": ("cpu", "cpu", "cpu"),
}


def test_every_fixture_folder_has_expectations() -> None:
    folders = {p.name for p in FIXTURES.iterdir() if (p / "probe.json").is_file()}
    assert folders == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_kind_device_and_profile(name: str) -> None:
    platform = detect(load_fixture(FIXTURES / name))
    kind, device, profile = EXPECTED[name]
    assert (platform.kind, platform.device) == (kind, device)
    picked, reason = pick_profile(platform)
    assert picked == profile
    assert picked in PROFILES
    assert reason
    assert "\n" not in reason


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_describe_mentions_cpu_and_platform(name: str) -> None:
    lines = detect(load_fixture(FIXTURES / name)).describe()
    assert lines[0].startswith("platform: ")
    assert lines[-1].startswith("CPU: ")
    assert "GiB" in lines[-1]
    assert all("\n" not in line for line in lines)


def test_jetson_orin_jp5(recorded) -> None:
    platform = recorded("jetson-orin-jp5")
    assert platform.jetson is not None
    assert platform.jetson.model == "NVIDIA Jetson AGX Orin Developer Kit"
    assert platform.jetson.l4t_version == "35.4.1"
    assert platform.jetson.jetpack_version == "5.1.2"
    assert platform.arch == "aarch64"
    assert platform.cpu_count == 12
    assert platform.memory_gib == pytest.approx(29.12, abs=0.01)
    # No NVML on JetPack 5: the integrated GPU is synthesized, sized as the unified RAM.
    (gpu,) = platform.gpus
    assert gpu.name == "Orin (nvgpu)"
    assert gpu.compute_capability == (8, 7)
    assert gpu.memory_gib == platform.memory_gib
    assert platform.slurm is None
    _, reason = pick_profile(platform)
    assert "AGX Orin" in reason
    assert "5.1.2" in reason
    assert "L4T 35.4.1, JetPack 5.1.2" in platform.describe()
    assert "platform: Jetson (NVIDIA Jetson AGX Orin Developer Kit)" in platform.describe()


def test_jetson_orin_jp6(recorded) -> None:
    platform = recorded("jetson-orin-jp6")
    assert platform.jetson is not None
    assert platform.jetson.model == "NVIDIA Jetson Orin Nano Developer Kit"
    assert (platform.jetson.l4t_version, platform.jetson.jetpack_version) == ("36.3.0", "6.0")
    assert platform.memory_gib == pytest.approx(7.44, abs=0.01)
    assert platform.gpus[0].compute_capability == (8, 7)
    _, reason = pick_profile(platform)
    assert "Orin Nano" in reason
    assert "JetPack 6.0" in reason
    assert "nearest" not in reason


def test_dgx_spark_uses_unified_memory_for_gpu(recorded) -> None:
    platform = recorded("dgx-spark")
    assert platform.jetson is None
    assert platform.cpu_count == 20
    assert platform.memory_gib == pytest.approx(119.29, abs=0.01)
    (gpu,) = platform.gpus
    assert gpu.name == "NVIDIA GB10"
    assert gpu.compute_capability == (12, 1)
    # NVML says "Not Supported" for GB10 memory; detection substitutes system RAM.
    assert gpu.memory_gib == platform.memory_gib
    assert "GPU 0: NVIDIA GB10, 119.3 GiB, compute 12.1" in platform.describe()


def test_cuda_workstation(recorded) -> None:
    platform = recorded("cuda-workstation")
    (gpu,) = platform.gpus
    assert gpu.name == "NVIDIA GeForce RTX 4090"
    assert gpu.memory_gib == pytest.approx(23.99)
    assert gpu.compute_capability == (8, 9)
    assert platform.memory_gib == pytest.approx(62.8, abs=0.01)
    assert platform.slurm is None
    assert "RTX 4090" in pick_profile(platform)[1]


def test_slurm_a100(recorded) -> None:
    platform = recorded("slurm-a100")
    assert len(platform.gpus) == 4
    assert {gpu.name for gpu in platform.gpus} == {"NVIDIA A100-SXM4-80GB"}
    assert [gpu.index for gpu in platform.gpus] == [0, 1, 2, 3]
    assert all(gpu.memory_gib == 80.0 and gpu.compute_capability == (8, 0) for gpu in platform.gpus)
    slurm = platform.slurm
    assert slurm is not None
    assert slurm.job_id == "1234"
    assert (slurm.num_nodes, slurm.num_tasks, slurm.gpus_per_node) == (2, 8, 4)
    assert (slurm.node_rank, slurm.partition, slurm.nodelist) == (1, "gpu", "gpu-node[01-02]")
    lines = platform.describe()
    assert "GPU 0: NVIDIA A100-SXM4-80GB, 80.0 GiB, compute 8.0" in lines
    assert any(
        line.startswith("Slurm job 1234: 2 nodes, 8 tasks, 4 GPUs per node, partition gpu")
        for line in lines
    )


def test_cpu_laptop(recorded) -> None:
    platform = recorded("cpu")
    assert platform.gpus == ()
    assert platform.jetson is None
    assert platform.slurm is None
    assert platform.cpu_count == 8
    assert platform.memory_gib == pytest.approx(15.5, abs=0.01)
    assert platform.describe()[-1] == "CPU: 8 cores, RAM 15.5 GiB"


def test_fixture_does_not_read_real_environment(monkeypatch, recorded) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "999")
    assert recorded("cpu").slurm is None
