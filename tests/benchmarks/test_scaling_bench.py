"""The scaling benchmark in a tiny configuration: it launches real torchrun processes on
the CPU (marker `dist`), prints its table and returns a positive 2-process ratio."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import scaling


@pytest.mark.dist
def test_scaling_benchmark_measures_one_and_two_cpu_processes():
    text, ratios = scaling.run(steps=6, repeats=1, logging_steps=2)
    ratio = ratios["scaling_2_procs"]
    assert isinstance(ratio, float) and math.isfinite(ratio) and ratio > 0
    one = re.search(r"cpu\s+1 process\s+(\d+)\s+1\.00", text)
    two = re.search(r"cpu\s+2 processes \(torchrun, Gloo\)\s+(\d+)\s+(\d+\.\d\d)", text)
    assert one and two, text
    assert int(one.group(1)) > 0 and int(two.group(1)) > 0
    # The printed ratio is the returned one.
    assert float(two.group(2)) == pytest.approx(ratio, abs=0.005)
    if scaling.cuda_devices() >= 2:
        assert ratios["scaling_2_gpus"] > 0 and "NCCL" in text
    else:
        assert "scaling_2_gpus" not in ratios and "CUDA: skipped" in text


def test_the_cpu_measurement_is_pinned_to_the_cpu(monkeypatch, tmp_path):
    """With `device: auto` on a one-GPU machine rank 1 would take cuda:1."""
    commands = []

    def failed_run(cmd, **kwargs):
        commands.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "stopped here")

    monkeypatch.setattr(scaling.subprocess, "run", failed_run)
    with pytest.raises(RuntimeError, match="stopped here"):
        scaling._samples_per_s(tmp_path, "cpu", 2, 6, 2)
    cmd = commands[0]
    assert "--nproc-per-node=2" in cmd
    sets = [cmd[i + 1] for i, word in enumerate(cmd) if word == "--set"]
    assert "training.device=cpu" in sets
