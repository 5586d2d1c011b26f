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

import pytest

from launch.slurm_jobs import (
    context_for,
    submit,
    wait_for,
    wait_for_checkpoint,
    wait_for_training,
)

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(900)]

PROCS_PER_NODE = 2
MAX_STEPS = 1000


def test_sigusr1_checkpoints_requeues_and_the_requeued_job_resumes(slurm_cluster, cli, tmp_path):
    job_id, log, run_dir = submit(
        cli, slurm_cluster, tmp_path, "requeue", MAX_STEPS, procs=PROCS_PER_NODE
    )
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
    job_id, log, run_dir = submit(
        cli, slurm_cluster, tmp_path, "cancel", 100_000, procs=PROCS_PER_NODE
    )
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
