"""Two processes on CPU with Gloo, launched by torchrun, against one process.

Run by `make test-dist` (marker `dist`): each case starts real `trainforge train` processes.
Every run is forced onto the CPU (`training.device=cpu`): on a machine with one GPU, rank 1
would otherwise ask for cuda:1.
"""

from __future__ import annotations

import json
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

REPO = Path(__file__).resolve().parents[2]
TINY = [
    "model.embedding_dim=32", "model.num_layers=1", "model.num_heads=2", "model.mlp_size=32",
    "data.random_crop_padding=0", "data.horizontal_flip=false",  # no random augmentation
    "schedule.lr_scheduler_type=constant", "schedule.warmup_steps=0",
    "logging.progress_bar=false", "logging.tensorboard=false", "hardware.telemetry=false",
    "checkpoint.save_every_epochs=null", "checkpoint.save_best=false",
    "evaluation.eval_every_epochs=null", "training.num_threads=1", "training.device=cpu",
]  # fmt: skip
# A torchrun worker that runs `trainforge train` and counts DDP's gradient reductions.
COUNTING_WORKER = Path(__file__).with_name("count_reductions.py")


def command(
    tmp_path: Path, name: str, procs: int, batch: int, steps: int, *extra: str, worker=None
):
    """`batch` is the run config's effective batch, whatever the number of processes."""
    sets = [
        *TINY,
        f"output.dir={tmp_path}",
        f"output.run_name={name}",
        f"training.per_device_train_batch_size={batch}",
        f"training.max_steps={steps}",
    ]
    args = [a for s in sets for a in ("--set", s)]
    entry = [str(worker)] if worker else ["-m", "trainforge"]
    train = [*entry, "train", str(REPO / "config/vit_digits.yaml"), *args, *extra]
    if procs == 1:
        return [sys.executable, *train]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={procs}", *train]  # fmt: skip


def run(cmd, timeout=300, **env_extra: str):
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **env_extra)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def final_weights(tmp_path: Path, name: str) -> dict[str, torch.Tensor]:
    return load_file(str(tmp_path / name / "model.safetensors"))


def records(tmp_path: Path, name: str, split: str) -> list[dict]:
    lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == split]


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], steps: int):
    """One process vs several with the same global batch, AdamW at lr 2e-3.

    Stated tolerance: same samples in every step, only the order of floating-point sums
    differs (~1e-8), so every parameter agrees within 1e-4 and the median within 1e-7.
    The attention key bias is the exception: its true gradient is zero (softmax ignores a
    per-query constant), so what it gets is rounding noise, which AdamW turns into steps
    of up to lr each: it is held to lr x steps instead.
    """
    assert a.keys() == b.keys()
    diffs = []
    for key in a:
        x, y = a[key], b[key]
        if key.endswith("attn.qkv.bias"):
            dim = x.numel() // 3
            key_bias = slice(dim, 2 * dim)
            assert (x[key_bias] - y[key_bias]).abs().max() <= 2e-3 * steps, key
            x, y = torch.cat([x[:dim], x[2 * dim :]]), torch.cat([y[:dim], y[2 * dim :]])
        assert torch.allclose(x, y, rtol=0, atol=1e-4), key
        diffs.append((x - y).abs().flatten())
    assert torch.cat(diffs).median() < 1e-7


@pytest.mark.dist
def test_two_gloo_processes_match_one_process_with_the_same_global_batch(tmp_path):
    one = run(command(tmp_path, "one", 1, 128, 8))
    assert one.returncode == 0, one.stderr[-3000:]
    two = run(command(tmp_path, "two", 2, 128, 8))  # the recipe's batch: 128 on any count
    assert two.returncode == 0, two.stderr[-3000:]
    assert "64 x 1 accumulation x 2 processes = 128" in two.stdout
    assert two.stdout.count("run folder:") == 1  # rank 0 alone prints
    assert two.stdout.count("done: ") == 1, two.stdout
    assert_same_weights(final_weights(tmp_path, "one"), final_weights(tmp_path, "two"), 8)


@pytest.mark.dist
def test_accumulation_reduces_gradients_once_per_optimizer_step(tmp_path):
    """2 processes x 32 x 2 accumulation vs 1 process x 128: the same weights, and DDP
    all-reduces gradients only on the micro-batch that closes each window (no_sync)."""
    steps = 6
    one = run(command(tmp_path, "one", 1, 128, steps))
    assert one.returncode == 0, one.stderr[-3000:]
    counts = tmp_path / "counts"
    counts.mkdir()
    accumulate = ("--set", "hardware.micro_batch_size=32")  # 128 = 32 x 2 x 2 processes
    cmd = command(tmp_path, "acc", 2, 128, steps, *accumulate, worker=COUNTING_WORKER)
    two = run(cmd, COUNT_DIR=str(counts))
    assert two.returncode == 0, two.stderr[-3000:]
    assert "32 x 2 accumulation x 2 processes = 128" in two.stdout
    assert_same_weights(final_weights(tmp_path, "one"), final_weights(tmp_path, "acc"), steps)
    for rank in (0, 1):
        seen = json.loads((counts / f"rank-{rank}.json").read_text())
        assert seen["optimizer_steps"] == steps, seen
        assert seen["micro_batches"] == 2 * steps, seen
        # Micro-batches are numbered from 1; windows close on 2, 4, ...: one reduction round
        # (every gradient bucket) per optimizer step, none on the first half of a window.
        rounds = sorted(set(seen["reduced_in"]))
        assert rounds == list(range(2, 2 * steps + 1, 2)), seen
        assert len(seen["reduced_in"]) % steps == 0, seen  # the same buckets every round


@pytest.mark.dist
def test_logged_metrics_are_means_over_every_sample_of_every_rank(tmp_path):
    """The train loss logged by 2 processes x 64 equals 1 process x 128 step by step, and the
    logged validation loss and accuracy equal one process evaluating the same final weights
    over the whole validation set. 539 validation images (val_fraction 0.3): the ranks hold
    270 and 269, so a mean of per-rank means, or one rank's own figure, would differ."""
    steps = 4
    sets = ["data.val_fraction=0.3", f"evaluation.eval_steps={steps}", "logging.logging_steps=1"]
    extra = [word for s in sets for word in ("--set", s)]
    one = run(command(tmp_path, "one", 1, 128, steps, *extra))
    assert one.returncode == 0, one.stderr[-3000:]
    two = run(command(tmp_path, "two", 2, 128, steps, *extra))
    assert two.returncode == 0, two.stderr[-3000:]
    train_one, train_two = records(tmp_path, "one", "train"), records(tmp_path, "two", "train")
    assert [r["step"] for r in train_two] == [r["step"] for r in train_one] == [1, 2, 3, 4]
    # Stated tolerance: step 1 sees identical weights and samples, so only summation order
    # differs (float32 sums: 1e-6 relative); later steps also carry the ~1e-7 weight
    # differences of the parameter test above, well inside 1e-4 relative. One rank's own
    # batch of 64 differs from the global mean by ~1e-2.
    assert train_two[0]["loss"] == pytest.approx(train_one[0]["loss"], rel=1e-6)
    for a, b in zip(train_one, train_two, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4)
        assert b["accuracy"] == pytest.approx(a["accuracy"], abs=1 / 128 + 1e-9)
    logged = records(tmp_path, "two", "val")[-1]
    expected = evaluate_in_one_process(final_weights(tmp_path, "two"), [*TINY, *sets])
    assert expected["count"] == 539
    # The same weights and samples: accuracy exactly (the same predictions), loss within
    # float32 summation order; a mean of the two rank means is off by ~4e-6 (both).
    assert logged["accuracy"] == pytest.approx(expected["accuracy"], abs=1e-9)
    assert logged["loss"] == pytest.approx(expected["loss"], rel=1e-6)


def evaluate_in_one_process(weights: dict[str, torch.Tensor], sets: list[str]) -> dict:
    """Validation loss and accuracy of `weights` over the whole validation set, here."""
    from trainforge.config import validate
    from trainforge.tasks import build_task

    config = validate(REPO / "config/vit_digits.yaml", overrides=sets).config
    task = build_task(config, torch.device("cpu"))
    task.model.load_state_dict(weights)
    task.model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for raw in task.val_loader:
            out = task.step(task.model, task.to_device(raw, torch.device("cpu"), False))
            loss_sum += float(out.loss) * out.weight
            correct += int(out.sums["correct"])
            count += out.weight
    return {"loss": loss_sum / count, "accuracy": correct / count, "count": count}


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
    deadline = time.monotonic() + 600
    while not (root.exists() and any(p.name.startswith("checkpoint-") for p in root.iterdir())):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    workers = [c for c in psutil.Process(proc.pid).children(recursive=True) if "trainforge" in
               " ".join(c.cmdline())]  # fmt: skip
    assert len(workers) == 2
    victim = next(w for w in workers if "LOCAL_RANK" in w.environ() and w.environ()["RANK"] == "1")
    started = time.monotonic()
    victim.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode != 0
    # Well inside the 600 s process-group timeout: the job noticed, it did not time out.
    assert time.monotonic() - started < 300
    # The surviving rank says what happened, once, in one line (torchrun adds its summary).
    lines = [line for line in err.splitlines() if "the distributed job failed" in line]
    # ... and how to continue: the run folder's own resume command.
    resume = f"`trainforge train --resume {tmp_path / 'kill'}`"
    assert len(lines) == 1 and resume in lines[0], err[-3000:]
    assert "Traceback" not in out
    # How far the surviving rank got before it noticed depends on the machine's speed: the
    # resumed run trains 4 steps past the newest checkpoint, wherever that is.
    from trainforge.engine import checkpoint as ckpt

    newest = ckpt.latest(root)
    assert newest is not None
    target = newest.global_step + 4
    resumed = run(command(tmp_path, "kill", 2, 32, target, "--resume", "auto"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout, resumed.stdout
    assert f"checkpoint-{newest.global_step} (epoch" in resumed.stdout, resumed.stdout
    summary = json.loads((tmp_path / "kill" / "summary.json").read_text())
    assert summary["global_step"] == target


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
