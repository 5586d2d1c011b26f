"""Data-parallel scaling: samples/s of one process vs two (torchrun), the same per-process
batch, measured side by side: on CPU with Gloo (always, `training.device=cpu`, one thread
each), and on CUDA with NCCL, one GPU per process, when at least two GPUs are visible.

The ratio is 2-process samples/s over 1-process samples/s (2.0 is perfect scaling). On a
2-core machine two processes share the cores with everything else that runs, so the CPU
figure says more about overhead than about a cluster; on GPUs it is the real thing. The CPU
run is pinned to the CPU: with `device: auto` on a one-GPU machine, rank 1 would ask for
cuda:1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import alternate, median, table

REPO = Path(__file__).resolve().parents[1]
SETS = [
    "model.embedding_dim=64", "model.num_layers=2", "model.num_heads=4", "model.mlp_size=128",
    "training.num_threads=1",
    "logging.progress_bar=false", "logging.tensorboard=false",
    "checkpoint.save_every_epochs=null", "checkpoint.save_best=false",
    "evaluation.eval_every_epochs=null", "hardware.telemetry=false",
]  # fmt: skip
# device -> (training.device, what the 2-process row says)
DEVICES = {"cpu": ("cpu", "torchrun, Gloo"), "cuda": ("cuda", "torchrun, NCCL, 1 GPU each")}


def _samples_per_s(work: Path, device: str, procs: int, steps: int, logging_steps: int) -> float:
    """Median samples/s over the logging windows of one run, the first (warm-up) left out."""
    name = f"{device}-p{procs}"
    sets = [*SETS, f"training.device={DEVICES[device][0]}",
            f"logging.logging_steps={logging_steps}", f"output.dir={work}",
            f"output.run_name={name}", f"training.max_steps={steps}",
            "output.overwrite=true",
            # 64 per process: the run config's effective batch is split over the processes
            f"training.per_device_train_batch_size={64 * procs}"]  # fmt: skip
    train = ["-m", "trainforge", "train", str(REPO / "config/vit_digits.yaml")]
    train += [a for s in sets for a in ("--set", s)]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc-per-node={procs}"]  # fmt: skip
    cmd = [*launcher, *train] if procs > 1 else [sys.executable, *train]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    records = [json.loads(line) for line in (work / name / "metrics.jsonl").open()]
    rates = [r["samples_per_s"] for r in records if r["split"] == "train"][1:]
    if not rates:
        raise RuntimeError(f"{steps} steps at logging_steps={logging_steps}: no window to time")
    return median(rates)


def _measure(
    work: Path, device: str, steps: int, repeats: int, logging_steps: int
) -> tuple[list[list[str]], float]:
    """Table rows for 1 and 2 processes on `device`, and the 2-process ratio."""
    runs = alternate(
        {
            procs: (lambda p=procs: _samples_per_s(work, device, p, steps, logging_steps))
            for procs in (1, 2)
        },
        repeats,
    )
    one, two = median(runs[1]), median(runs[2])
    rows = [
        [device, "1 process", f"{one:.0f}", "1.00"],
        [device, f"2 processes ({DEVICES[device][1]})", f"{two:.0f}", f"{two / one:.2f}"],
    ]
    return rows, two / one


def cuda_devices() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def run(
    steps: int = 120, repeats: int = 2, logging_steps: int = 20
) -> tuple[str, dict[str, float]]:
    work = Path(tempfile.mkdtemp(prefix="trainforge-scaling-"))
    rows, ratio = _measure(work, "cpu", steps, repeats, logging_steps)
    ratios = {"scaling_2_procs": ratio}
    gpus = cuda_devices()
    if gpus >= 2:
        cuda_rows, ratios["scaling_2_gpus"] = _measure(work, "cuda", steps, repeats, logging_steps)
        rows += cuda_rows
        note = ""
    else:
        note = f"\nCUDA: skipped ({gpus} GPU(s) visible; the GPU figure needs 2)"
    text = table(
        f"data-parallel scaling: ViT 2x64 digits, 64 per process, {steps} steps, median "
        f"window rate of {repeats} run(s) each, 1- and 2-process runs alternating",
        ["device", "processes", "samples/s", "scaling"],
        rows,
    )
    return text + note, ratios


if __name__ == "__main__":
    print(run()[0])
