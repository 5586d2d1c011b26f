"""NVML telemetry with the real driver's keys, and MFU on a GPU: against the data sheet's
peak (H100/H200 and the rest of the table) and against the measured one."""

from __future__ import annotations

import pytest
import torch

from fakes.cuda_runs import train_run
from trainforge.hardware.peak_probe import measured_peak
from trainforge.hardware.peaks import peak_tflops
from trainforge.hardware.telemetry import NvmlSource

pytestmark = pytest.mark.gpu

KEYS = ("util_pct", "mem_used_mib", "mem_total_mib", "temp_c", "power_w", "sm_clock_mhz")


def test_nvml_gives_the_real_keys_with_plausible_values():
    source = NvmlSource(note=lambda line: None)
    try:
        sample = source.sample()
    finally:
        source.close()
    for key in KEYS:
        assert f"gpu0_{key}" in sample, sorted(sample)
    assert 0 <= sample["gpu0_util_pct"] <= 100
    total_mib = torch.cuda.get_device_properties(0).total_memory / 2**20
    assert sample["gpu0_mem_total_mib"] == pytest.approx(total_mib, rel=0.05)
    assert 0 < sample["gpu0_mem_used_mib"] <= sample["gpu0_mem_total_mib"]
    assert 5 < sample["gpu0_temp_c"] < 110 and 0 < sample["gpu0_power_w"] < 2000
    assert sample["gpu0_sm_clock_mhz"] > 0


def test_a_run_records_nvml_telemetry_in_its_summary(tmp_path):
    sets = {"hardware.telemetry": "true", "hardware.telemetry_interval_s": 0.2,
            "training.max_steps": 150, "logging.logging_steps": 50}  # fmt: skip
    _, facts = train_run(tmp_path, "telemetry", **sets)
    telemetry = facts["telemetry"]
    assert telemetry, facts
    assert any(key.startswith("gpu0_power_w") for key in telemetry), sorted(telemetry)
    assert any(key.startswith("gpu0_mem_used_mib") for key in telemetry), sorted(telemetry)


def test_the_measured_bf16_peak_is_near_the_data_sheet(tmp_path, monkeypatch, cuda):
    monkeypatch.setenv("TRAINFORGE_CACHE_DIR", str(tmp_path))
    found = measured_peak(cuda, "bf16", refresh=True)
    assert not found.cached and found.tflops > 1.0
    sheet = peak_tflops(torch.cuda.get_device_name(0), "bf16")
    if sheet is not None:  # a table device: cuBLAS reaches a good share of it, never more
        assert 0.3 * sheet < found.tflops < 1.05 * sheet
    assert measured_peak(cuda, "bf16").cached


def test_mfu_is_reported_against_the_data_sheet_and_the_measured_peak(tmp_path):
    sets = {"training.precision": "bf16", "training.max_steps": 120,
            "logging.logging_steps": 40, "training.per_device_train_batch_size": 256}  # fmt: skip
    _, facts = train_run(tmp_path, "mfu", **sets)
    sheet = peak_tflops(torch.cuda.get_device_name(0), "bf16")
    assert facts["peak_tflops"] == sheet
    assert facts["measured_peak_tflops"] > 0
    assert 0 < facts["mfu_measured"] <= 1
    assert 0 < facts["mfu"] <= 1
    if sheet is None:  # e.g. a GB10 or a consumer Blackwell: the measured peak only
        assert facts["mfu"] == facts["mfu_measured"]
    else:
        ratio = facts["mfu"] / facts["mfu_measured"]
        assert ratio == pytest.approx(facts["measured_peak_tflops"] / sheet, rel=1e-6)


def test_detect_peak_names_the_gpu_and_compares_with_the_data_sheet(cli, tmp_path):
    done = cli("detect", "--peak", env={"TRAINFORGE_CACHE_DIR": str(tmp_path)}, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    name = torch.cuda.get_device_name(0)
    measured = next(x for x in lines if x.startswith("peak (measured): "))
    assert "TFLOP/s" in measured and f" on {name} " in measured
    assert any(x.startswith("peak (data sheet): ") for x in lines)
