"""Data-parallel scaling: samples/s of one process vs two (torchrun, Gloo on CPU; NCCL on
CUDA when at least two GPUs are present), the same per-process batch, one thread each.

The ratio is 2-process samples/s over 1-process samples/s (2.0 is perfect scaling). On a
2-core machine two processes share the cores with everything else that runs, so the
figure says more about overhead than about a cluster; on GPUs it is the real thing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import table

REPO = Path(__file__).resolve().parents[1]
SETS = [
    "model.embedding_dim=64", "model.num_layers=2", "model.num_heads=4", "model.mlp_size=128",
    "training.per_device_train_batch_size=64", "training.num_threads=1",
    "logging.progress_bar=false", "logging.tensorboard=false", "logging.logging_steps=20",
    "checkpoint.save_every_epochs=null", "checkpoint.save_best=false",
    "evaluation.eval_every_epochs=null", "hardware.telemetry=false",
]  # fmt: skip


def _samples_per_s(work: Path, procs: int, steps: int) -> float:
    name = f"p{procs}"
    sets = [*SETS, f"output.dir={work}", f"output.run_name={name}", f"training.max_steps={steps}"]
    train = ["-m", "trainforge", "train", str(REPO / "config/vit_digits.yaml")]
    train += [a for s in sets for a in ("--set", s)] + ["--set", "output.overwrite=true"]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc-per-node={procs}"]  # fmt: skip
    cmd = [*launcher, *train] if procs > 1 else [sys.executable, *train]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    records = [json.loads(line) for line in (work / name / "metrics.jsonl").open()]
    rates = [r["samples_per_s"] for r in records if r["split"] == "train"][1:]  # skip warm-up
    return sorted(rates)[len(rates) // 2]


def run(steps: int = 120, repeats: int = 2) -> tuple[str, dict[str, float]]:
    work = Path(tempfile.mkdtemp(prefix="trainforge-scaling-"))
    one, two = [], []
    for _ in range(repeats):
        one.append(_samples_per_s(work, 1, steps))
        two.append(_samples_per_s(work, 2, steps))
    a, b = sorted(one)[len(one) // 2], sorted(two)[len(two) // 2]
    rows = [["1 process", f"{a:.0f}", "1.00"], ["2 processes (torchrun, Gloo)", f"{b:.0f}",
            f"{b / a:.2f}"]]  # fmt: skip
    text = table(
        f"data-parallel scaling on CPU: ViT 2x64 digits, 64 per process, {steps} steps, "
        f"median window rate of {repeats} runs each",
        ["processes", "samples/s", "scaling"],
        rows,
    )
    return text, {"scaling_2_procs": b / a}


if __name__ == "__main__":
    print(run()[0])
