"""The GPU benchmark: its skip line without CUDA, its FLOP and MFU arithmetic, and its
comparison run end to end on the CPU (bf16 autocast, compile off, tiny ViT), which exercises
the same code as on a GPU. The real measurement is the `gpu`-marked case (needs CUDA)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import run as bench_run
from peers.workload import Workload

import gpu


def test_without_cuda_it_says_it_was_skipped_and_make_bench_marks_it_skip(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu.run() == (gpu.SKIPPED, {})
    monkeypatch.setattr(bench_run, "BENCHMARKS", [("gpu", "gpu_mfu", 0.35, ">=")])
    monkeypatch.setattr(bench_run, "machine_line", lambda: "test machine")
    assert bench_run.main() == 0
    out = capsys.readouterr().out
    assert gpu.SKIPPED in out
    assert "SKIP  gpu_mfu (not measured here, see gpu above)" in out


def test_flops_per_step_counts_forward_and_backward_matmuls():
    def make() -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10, bias=False))

    w = Workload("linear", make, torch.randn(8, 3, 32, 32), torch.zeros(8, dtype=torch.long), 4,
                 1, 1)  # fmt: skip
    # forward x @ W.T and the weight gradient; the input needs no gradient.
    assert gpu.flops_per_step(w) == 2 * (2 * 4 * 3072 * 10)


def test_mfu_is_achieved_flops_over_the_peak(monkeypatch):
    assert gpu.mfu(1e12, steps=10, seconds=1.0, peak_tflops=100.0) == pytest.approx(0.1)
    assert gpu.mfu(1e12, steps=10, seconds=1.0, peak_tflops=None) is None
    monkeypatch.setenv("TRAINFORGE_PEAK_TFLOPS", "989")
    assert gpu.device_peak_tflops(torch.device("cpu")) == (989.0, "TRAINFORGE_PEAK_TFLOPS")
    monkeypatch.delenv("TRAINFORGE_PEAK_TFLOPS")
    assert gpu.device_peak_tflops(torch.device("cpu"))[0] is None


def test_the_comparison_runs_every_side_on_the_same_work_on_cpu_in_bf16():
    w = gpu.vit_workload(torch.device("cpu"), batch_size=8, warmup=2, timed=2, dim=16, layers=1,
                         heads=2, compile_model=False)  # fmt: skip
    text, ratios = gpu.run(repeats=1, device=torch.device("cpu"), workload=w)
    for side in gpu.sides(w):
        assert side in text
    assert "same work on every side: yes (all did 4 optimizer steps" in text
    assert set(ratios) == {"gpu_vs_lightning", "gpu_vs_hf"}  # no MFU without a known peak
    assert all(value > 0 for value in ratios.values())


@pytest.mark.slow
def test_compiled_sides_do_the_same_work_on_cpu():
    """torch.compile on every side (Lightning compiles its module, Hugging Face its wrapper)."""
    w = gpu.vit_workload(torch.device("cpu"), batch_size=8, warmup=3, timed=2, dim=16, layers=1,
                         heads=2, compile_model=True)  # fmt: skip
    text, _ = gpu.run(repeats=1, device=torch.device("cpu"), workload=w)
    assert "same work on every side: yes (all did 5 optimizer steps" in text


@pytest.mark.gpu
def test_on_cuda_every_side_does_the_same_work_and_mfu_is_measured():
    # Eager: compiling seven sides would take most of `make test-gpu`'s 10 minutes; the
    # compiled path on CUDA is tests/gpu/test_batch_fit_compile.py's and make bench-gpu's.
    w = gpu.vit_workload(torch.device("cuda"), batch_size=64, warmup=5, timed=5,
                         compile_model=False)  # fmt: skip
    text, ratios = gpu.run(repeats=1, device=torch.device("cuda"), workload=w)
    assert "same work on every side: yes" in text
    assert 0 < ratios["gpu_mfu"] < 1
