"""Helpers of the real-Slurm tests: submit `trainforge slurm ... --submit`, wait with a
deadline, and say what the job, its log and the daemons said when a wait runs out."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from trainforge.engine import checkpoint as ckpt

REPO = Path(__file__).resolve().parents[2]
TINY = [
    "model.embedding_dim=32", "model.num_layers=1", "model.num_heads=2", "model.mlp_size=32",
    "checkpoint.save_steps=500",
    "checkpoint.save_every_epochs=null", "checkpoint.save_best=false",
    "evaluation.eval_every_epochs=null", "logging.logging_steps=20",
    "logging.tensorboard=false", "logging.progress_bar=false",
]  # fmt: skip


def set_args(items: list[str]) -> list[str]:
    return [word for item in items for word in ("--set", item)]


def wait_for(what: str, ready: Callable[[], bool], timeout: float, context: Callable[[], str]):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n{context()}")


def submit(
    cli,
    cluster,
    folder: Path,
    name: str,
    max_steps: int,
    *,
    nodes: int = 1,
    procs: int = 2,
    extra: list[str] | None = None,
) -> tuple[str, Path, Path]:
    """`trainforge slurm ... --submit`; returns (job id, its log, its run folder). `extra`:
    more `--set` items, after the tiny model's."""
    items = [*TINY, *(extra or []), f"training.max_steps={max_steps}", f"output.run_name={name}"]
    sets = set_args(items)
    submitted = cli(
        "slurm", str(REPO / "config/vit_digits.yaml"), "--nodes", str(nodes),
        "--gpus-per-node", "0", "--procs-per-node", str(procs), "--time", "00:10:00",
        "--job-name", name, *sets, "--submit",
        cwd=folder, env=cluster.env,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job_id = re.search(r"Submitted batch job (\d+)", submitted.stdout).group(1)
    return job_id, folder / f"runs/slurm/slurm-{name}-{job_id}.out", folder / f"runs/{name}"


def context_for(cluster, job_id: str, log: Path) -> Callable[[], str]:
    def context() -> str:
        text = log.read_text(errors="replace") if log.exists() else "(no log yet)"
        job = cluster.run("scontrol", "show", "job", job_id, check=False)
        return f"--- job log\n{text[-6000:]}\n--- scontrol\n{job}\n{cluster.daemon_logs()}"

    return context


def train_records(run_dir: Path) -> list[dict]:
    """metrics.jsonl's train records, in the order written (a resumed segment repeats the
    steps after its checkpoint)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in records if r.get("split") == "train"]


def wait_for_training(run_dir: Path, context: Callable[[], str], after_step: int = 0) -> None:
    wait_for(
        f"training (a step after {after_step})",
        lambda: any(r["step"] > after_step for r in train_records(run_dir)),
        240,
        context,
    )


def wait_for_checkpoint(folder: Path, context: Callable[[], str]) -> dict:
    wait_for(
        f"{folder.name}",
        lambda: folder.is_dir() and ckpt.verify(folder) is None,
        120,
        context,
    )
    return ckpt.read_meta(folder)
