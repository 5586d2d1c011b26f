"""The device peak table for MFU: data-centre GPUs by name, Jetson Orin modules told apart by
the device-tree model and the memory size, and no guess for a name that could be any of them."""

from __future__ import annotations

import pytest

from trainforge.hardware.peaks import peak_tflops, platform_peak_tflops


def test_data_centre_and_desktop_gpus_by_name():
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.0
    assert peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0
    assert peak_tflops("NVIDIA H100 PCIe", "fp32") == 51.0
    assert peak_tflops("NVIDIA H200", "fp16") == 989.0
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "fp32") == 19.5
    assert peak_tflops("NVIDIA GeForce RTX 4090", "bf16") == 165.2
    assert peak_tflops("NVIDIA GB10", "bf16") == 62.5
    assert peak_tflops("NVIDIA GB10", "fp32") is None
    assert peak_tflops("Tesla K80", "fp32") is None and peak_tflops(None, "bf16") is None


@pytest.mark.parametrize(
    ("model", "memory_gib", "fp16", "fp32"),
    [
        # Device-tree models as the boards report them; memory as /proc/meminfo shows it.
        ("NVIDIA Jetson AGX Orin Developer Kit", 61.3, 42.5, 5.3),  # AGX Orin 64GB
        ("NVIDIA Jetson AGX Orin Developer Kit", 29.1, 27.0, 3.33),  # AGX Orin 32GB
        ("NVIDIA Jetson Orin NX Engineering Reference Developer Kit", 15.3, 15.0, 1.88),
        ("NVIDIA Jetson Orin NX Engineering Reference Developer Kit", 7.4, 12.5, 1.57),
        ("NVIDIA Jetson Orin Nano Developer Kit", 7.4, 10.0, 1.28),  # Orin Nano 8GB
        ("NVIDIA Jetson Orin Nano Developer Kit", 3.3, 5.0, 0.64),  # Orin Nano 4GB
        ("Jetson-AGX-Orin", 61.3, 42.5, 5.3),  # hyphenated, as some carrier boards write it
    ],
)
def test_jetson_orin_modules_are_told_apart(model, memory_gib, fp16, fp32):
    assert peak_tflops(model, "fp16", memory_gib=memory_gib) == fp16
    assert peak_tflops(model, "bf16", memory_gib=memory_gib) == fp16
    assert peak_tflops(model, "fp32", memory_gib=memory_gib) == fp32


def test_the_size_in_the_name_wins_and_an_unknown_size_means_the_larger_module():
    assert peak_tflops("NVIDIA Jetson Orin Nano 4GB", "fp16", memory_gib=60.0) == 5.0
    assert peak_tflops("Jetson AGX Orin 64GB", "fp16") == 42.5
    assert peak_tflops("Jetson Orin NX 8GB", "fp16") == 12.5
    assert peak_tflops("NVIDIA Jetson Orin Nano Developer Kit", "fp16") == 10.0
    assert peak_tflops("NVIDIA Jetson AGX Orin Developer Kit", "fp16") == 42.5


def test_a_bare_orin_gpu_name_is_not_guessed():
    # torch.cuda.get_device_name() says "Orin" on every Orin module: 5 to 42.5 TFLOPS.
    for name in ("Orin", "Orin (nvgpu)"):
        assert peak_tflops(name, "fp16") is None
        assert peak_tflops(name, "fp16", memory_gib=7.4) is None


def test_the_platform_picks_the_board_model_and_memory_on_a_jetson(recorded):
    agx = recorded("jetson-orin-jp5")  # "NVIDIA Jetson AGX Orin Developer Kit", 29 GiB
    assert agx.gpus[0].name == "Orin (nvgpu)"
    assert platform_peak_tflops(agx, "Orin", "bf16") == 27.0
    nano = recorded("jetson-orin-jp6")  # "NVIDIA Jetson Orin Nano Developer Kit", 7.4 GiB
    assert platform_peak_tflops(nano, "Orin", "fp16") == 10.0
    assert platform_peak_tflops(nano, "Orin", "fp32") == 1.28
    spark = recorded("dgx-spark")
    assert platform_peak_tflops(spark, spark.gpus[0].name, "bf16") == 62.5
    workstation = recorded("cuda-workstation")
    assert platform_peak_tflops(workstation, "NVIDIA GeForce RTX 4090", "bf16") == 165.2
