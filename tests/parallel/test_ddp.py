"""Two processes on CPU with Gloo, launched by torchrun, against one process.

Run by `make test-dist` (marker `dist`): each case starts real `trainforge train` processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from safetensors.torch import load_file

from trainforge.data.sampling import EpochShuffleSampler

REPO = Path(__file__).resolve().parents[2]
TINY = [
    "model.embedding_dim=32", "model.num_layers=1", "model.num_heads=2", "model.mlp_size=32",
    "data.random_crop_padding=0", "data.horizontal_flip=false",  # no random augmentation
    "schedule.lr_scheduler_type=constant", "schedule.warmup_steps=0",
    "logging.progress_bar=false", "logging.tensorboard=false", "hardware.telemetry=false",
    "checkpoint.save_every_epochs=null", "checkpoint.save_best=false",
    "evaluation.eval_every_epochs=null", "training.num_threads=1",
]  # fmt: skip


def command(tmp_path: Path, name: str, procs: int, batch: int, steps: int, *extra: str):
    sets = [
        *TINY,
        f"output.dir={tmp_path}",
        f"output.run_name={name}",
        f"training.per_device_train_batch_size={batch}",
        f"training.max_steps={steps}",
    ]
    args = [a for s in sets for a in ("--set", s)]
    train = ["-m", "trainforge", "train", str(REPO / "config/vit_digits.yaml"), *args, *extra]
    if procs == 1:
        return [sys.executable, *train]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={procs}", *train]  # fmt: skip


def run(cmd, timeout=300):
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def final_weights(tmp_path: Path, name: str) -> dict[str, torch.Tensor]:
    return load_file(str(tmp_path / name / "model.safetensors"))


def test_shards_are_a_partition_of_the_single_process_batches():
    single = list(EpochShuffleSampler(100, 7).order(3))
    ranks = [EpochShuffleSampler(100, 7, rank=r, world_size=2).order(3) for r in (0, 1)]
    for k in range(5):  # batch k of 10 per rank == batch k of 20 in one process
        assert sorted(ranks[0][k * 10 : (k + 1) * 10] + ranks[1][k * 10 : (k + 1) * 10]) == sorted(
            single[k * 20 : (k + 1) * 20]
        )
    odd = [EpochShuffleSampler(101, 7, rank=r, world_size=2) for r in (0, 1)]
    assert len(odd[0]) == len(odd[1]) == 51  # padded by wrapping: equal steps on every rank


@pytest.mark.dist
def test_two_gloo_processes_match_one_process_with_the_same_global_batch(tmp_path):
    one = run(command(tmp_path, "one", 1, 128, 8))
    assert one.returncode == 0, one.stderr[-3000:]
    two = run(command(tmp_path, "two", 2, 64, 8))
    assert two.returncode == 0, two.stderr[-3000:]
    assert "64 x 1 accumulation x 2 processes = 128" in two.stdout
    assert two.stdout.count("run folder:") == 1  # rank 0 alone prints
    assert two.stdout.count("done: ") == 1, two.stdout
    a, b = final_weights(tmp_path, "one"), final_weights(tmp_path, "two")
    # Stated tolerance: same samples in every step, only the order of floating-point sums
    # differs (~1e-8), so every parameter agrees within 1e-4 and the median within 1e-7.
    # The attention key bias is the exception: its true gradient is zero (softmax ignores a
    # per-query constant), so what it gets is rounding noise, which AdamW turns into steps
    # of up to lr each: it is held to lr x steps = 2e-3 x 8 instead.
    diffs = []
    for key in a:
        x, y = a[key], b[key]
        if key.endswith("attn.qkv.bias"):
            dim = x.numel() // 3
            key_bias = slice(dim, 2 * dim)
            assert (x[key_bias] - y[key_bias]).abs().max() <= 2e-3 * 8, key
            x, y = torch.cat([x[:dim], x[2 * dim :]]), torch.cat([y[:dim], y[2 * dim :]])
        assert torch.allclose(x, y, rtol=0, atol=1e-4), key
        diffs.append((x - y).abs().flatten())
    assert torch.cat(diffs).median() < 1e-7


@pytest.mark.dist
def test_two_process_run_resumes_exactly(tmp_path):
    straight = run(command(tmp_path, "straight", 2, 32, 12))
    assert straight.returncode == 0, straight.stderr[-3000:]
    first = run(command(tmp_path, "cut", 2, 32, 6, "--set", "checkpoint.save_steps=6"))
    assert first.returncode == 0, first.stderr[-3000:]
    rest = run(command(tmp_path, "cut", 2, 32, 12, "--resume", "auto"))
    assert rest.returncode == 0, rest.stderr[-3000:]
    assert "step 6)" in rest.stdout
    a, b = final_weights(tmp_path, "straight"), final_weights(tmp_path, "cut")
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.dist
def test_killing_one_rank_stops_the_job_and_resume_continues(tmp_path):
    cmd = command(tmp_path, "kill", 2, 32, 100000, "--set", "checkpoint.save_steps=5")
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    root = tmp_path / "kill" / "checkpoints"
    deadline = time.monotonic() + 180
    while not (root.exists() and any(p.name.startswith("checkpoint-") for p in root.iterdir())):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    workers = [c for c in psutil.Process(proc.pid).children(recursive=True) if "trainforge" in
               " ".join(c.cmdline())]  # fmt: skip
    assert len(workers) == 2
    victim = next(w for w in workers if "LOCAL_RANK" in w.environ() and w.environ()["RANK"] == "1")
    started = time.monotonic()
    victim.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert time.monotonic() - started < 120
    # The surviving rank says what happened, once, in one line (torchrun adds its summary).
    lines = [line for line in err.splitlines() if "the distributed job failed" in line]
    assert len(lines) == 1 and "--resume auto" in lines[0], err[-3000:]
    assert "Traceback" not in out
    resumed = run(command(tmp_path, "kill", 2, 32, 12, "--resume", "auto"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout


@pytest.mark.dist
def test_fsdp2_save_and_load_on_two_ranks_round_trip_exactly(tmp_path):
    """FSDP2 on CPU with Gloo: sharded checkpoint through torch.distributed.checkpoint, then
    resume on 2 ranks ends bitwise where the uninterrupted sharded run ends."""
    fsdp = ("--set", "hardware.data_parallel=fsdp")
    straight = run(command(tmp_path, "fs", 2, 32, 8, *fsdp))
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert "FSDP2 (fully_shard)" in straight.stdout
    first = run(command(tmp_path, "fc", 2, 32, 4, *fsdp, "--set", "checkpoint.save_steps=4"))
    assert first.returncode == 0, first.stderr[-3000:]
    folder = tmp_path / "fc" / "checkpoints" / "checkpoint-4"
    assert (folder / "dcp").is_dir() and not (folder / "model.safetensors").exists()
    rest = run(command(tmp_path, "fc", 2, 32, 8, *fsdp, "--resume", "auto"))
    assert rest.returncode == 0, rest.stderr[-3000:]
    a, b = final_weights(tmp_path, "fs"), final_weights(tmp_path, "fc")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
