"""Acceptance on a real Slurm (Debian's slurm-wlm, started by tests/launch/conftest.py).

`trainforge slurm ... --submit` renders and submits the job: 2 CPU training processes under
torchrun under srun. `scancel --signal=USR1 JOB` (no --batch: the signal goes to the
training step, as `--signal=USR1@120` does before the time limit) makes the run save
`checkpoint_interrupted` and requeue the job; the requeued job resumes from that checkpoint
by itself and finishes. A plain `scancel JOB` (SIGTERM to every process of the step) makes
the run save `checkpoint_interrupted` and stop without a requeue. Run with `make test-slurm`
(root; installs the packages).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from trainforge.engine import checkpoint as ckpt

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
PROCS_PER_NODE = 2
MAX_STEPS = 1000
TINY = [
    "model.embedding_dim=32", "model.num_layers=1", "model.num_heads=2", "model.mlp_size=32",
    "checkpoint.save_steps=500",
    "checkpoint.save_every_epochs=null", "checkpoint.save_best=false",
    "evaluation.eval_every_epochs=null", "logging.logging_steps=20",
    "logging.tensorboard=false", "logging.progress_bar=false",
]  # fmt: skip


def wait_for(what: str, ready: Callable[[], bool], timeout: float, context: Callable[[], str]):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n{context()}")


def submit(cli, cluster, folder: Path, name: str, max_steps: int) -> tuple[str, Path, Path]:
    """`trainforge slurm ... --submit`; returns (job id, its log, its run folder)."""
    sets = [word for item in [*TINY, f"training.max_steps={max_steps}", f"output.run_name={name}"]
            for word in ("--set", item)]  # fmt: skip
    submitted = cli(
        "slurm", str(REPO / "config/vit_digits.yaml"), "--nodes", "1", "--gpus-per-node", "0",
        "--procs-per-node", str(PROCS_PER_NODE), "--time", "00:10:00", "--job-name", name,
        *sets, "--submit",
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


def wait_for_training(run_dir: Path, context: Callable[[], str]) -> None:
    metrics = run_dir / "metrics.jsonl"
    wait_for(
        "training to start",
        lambda: metrics.exists() and metrics.read_text().count("\n") >= 1,
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


def test_sigusr1_checkpoints_requeues_and_the_requeued_job_resumes(slurm_cluster, cli, tmp_path):
    job_id, log, run_dir = submit(cli, slurm_cluster, tmp_path, "requeue", MAX_STEPS)
    context = context_for(slurm_cluster, job_id, log)
    wait_for_training(run_dir, context)
    slurm_cluster.run("scancel", "--signal=USR1", job_id)
    interrupted = run_dir / "checkpoints/checkpoint_interrupted"
    meta = wait_for_checkpoint(interrupted, context)
    stopped_at = meta["global_step"]
    assert 0 < stopped_at < MAX_STEPS, context()
    wait_for("the requeue", lambda: slurm_cluster.job(job_id)["Restarts"] == "1", 120, context)
    wait_for(
        "the requeued job to finish",
        lambda: slurm_cluster.job(job_id)["JobState"] in ("COMPLETED", "FAILED", "TIMEOUT"),
        300,
        context,
    )
    job = slurm_cluster.job(job_id)
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", context()

    text = log.read_text()
    assert f"SIGUSR1: checkpoint saved to {interrupted.relative_to(tmp_path)}" in text, context()
    assert f"Slurm job {job_id} requeued" in text, context()
    assert f"trainforge: job {job_id} (restart 1)" in text, context()
    assert f"x {PROCS_PER_NODE} processes = " in text, context()  # both ranks trained
    assert "resuming the run's newest checkpoint" in text, context()
    assert f"(epoch {meta['epoch']}, step {stopped_at})" in text, context()
    # The planned stop leaves trainforge's lines in the job log, not torchrun's crash report.
    stopped = f"trainforge: {PROCS_PER_NODE} training processes stopped on SIGUSR1 (exit 138)"
    assert stopped in text, context()
    for noise in ("Traceback", "ChildFailedError", "exitcode", "Setting OMP_NUM_THREADS"):
        assert noise not in text, context()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["global_step"] == MAX_STEPS
    assert summary["world_size"] == PROCS_PER_NODE
    assert not summary["interrupted"]


def test_scancel_sigterm_checkpoints_once_and_the_job_ends(slurm_cluster, cli, tmp_path):
    # Every process of the step gets SIGTERM from Slurm; torchrun must not forward a second
    # one, which would abort the training processes before the checkpoint is written.
    job_id, log, run_dir = submit(cli, slurm_cluster, tmp_path, "cancel", 100_000)
    context = context_for(slurm_cluster, job_id, log)
    wait_for_training(run_dir, context)
    slurm_cluster.run("scancel", job_id)
    interrupted = run_dir / "checkpoints/checkpoint_interrupted"
    meta = wait_for_checkpoint(interrupted, context)
    assert meta["global_step"] > 0
    wait_for(
        "the job to end",
        lambda: slurm_cluster.job(job_id)["JobState"] == "CANCELLED",
        120,
        context,
    )
    wait_for("the log", lambda: "SIGTERM: checkpoint saved" in log.read_text(), 60, context)
    assert slurm_cluster.job(job_id)["Restarts"] == "0", context()
    assert "requeued" not in log.read_text(), context()
