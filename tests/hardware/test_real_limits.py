"""Budgets inside real cgroup v1 limits (root, as CI runs): a 1.5 GiB memory limit as
`docker run --memory`, Slurm's `--mem` and Kubernetes set it, and a one-CPU quota."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.cgroups import cgroup_v1
from fakes.cli_args import DIGITS_TINY, REPO

pytestmark = pytest.mark.slow
GIB = 1024**3
TRAIN = [sys.executable, "-m", "trainforge", "train"]
NO_SAVES = ["--set", "checkpoint.save_steps=null", "--set", "checkpoint.save_every_epochs=null"]
QUIET = ["--set", "logging.tensorboard=false", "--set", "logging.progress_bar=false"]
VIT_25M = [
    str(REPO / "config/vit_digits.yaml"), "--profile", "cpu",
    "--set", "model.embedding_dim=512", "--set", "model.num_layers=8",
    "--set", "model.num_heads=8", "--set", "model.mlp_size=2048",
    "--set", "checkpoint.save_best=false", "--set", "evaluation.eval_every_epochs=null",
    *NO_SAVES, *QUIET,
]  # fmt: skip


def run(command: list[str], tmp_path: Path, alone: bool = False) -> subprocess.CompletedProcess:
    """`alone`: a temporary folder of its own, so no other training on this machine counts
    for the thread budget (only the cgroup's quota does)."""
    env = {**os.environ, "TMPDIR": str(tmp_path)} if alone else dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)


def test_a_memory_limit_bounds_every_budget_and_the_auto_batch_run_finishes(tmp_path):
    with cgroup_v1(memory_bytes=3 * GIB // 2) as groups:
        args = [*VIT_25M, "--set", f"output.dir={tmp_path}", "--set", "training.max_steps=1"]
        args += ["--set", "training.num_threads=1"]  # cheap beside other work on the machine
        done = run(groups.command([*TRAIN, *args, "--batch_size", "auto"]), tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert groups.oom_kills() == 0
    out = done.stdout
    assert "memory: 1.50 GiB (cgroup limit)" in out
    assert "model: vit 25," in out
    fit = [line for line in out.splitlines() if line.startswith("batch fit:")]
    assert fit and "cgroup limit" in fit[-1], out
    # Every budget printed, and the peak of the micro-batch chosen, are within the limit; a
    # larger micro-batch's predicted peak may exceed it (that is why it was not chosen).
    text = "\n".join(fit)
    budgets = [float(x) for x in re.findall(r"of (\d+\.\d+) GiB usable|budget (\d+\.\d+) GiB", text)
               for x in x if x]  # fmt: skip
    chosen = [float(x) for x in re.findall(r"peak (\d+\.\d+) GiB at", text)]
    assert budgets and max(budgets) <= 1.5 and chosen and max(chosen) <= 1.5, fit


def test_a_one_cpu_quota_gives_the_run_one_thread(tmp_path):
    with cgroup_v1(cpus=1.0) as groups:
        args = [*DIGITS_TINY, "--set", f"output.dir={tmp_path}", "--set", "training.max_steps=2"]
        done = run(groups.command([*TRAIN, *args]), tmp_path, alone=True)
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((tmp_path / "vit_digits" / "run.json").read_text())
    assert record["threads"] == 1
    assert "cpu threads: 1 (cgroup CPU quota" in done.stdout
