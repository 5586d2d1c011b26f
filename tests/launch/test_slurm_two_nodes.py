"""One Slurm job across two nodes (`node1`, `node2`: each slurmd in its own network and UTS
namespace, tests/launch/conftest.py), through the script `trainforge slurm` ships.

One job lives through the whole story, which keeps `make test-slurm` short:
submitted with `--nodes 2` (srun starts torchrun on each node, the rendezvous is on node1,
one training process per node); `scancel --signal=USR1` checkpoints it and requeues it, and
the requeued job resumes on both nodes; then node2 is lost (its link cut and every process
in its namespace SIGKILLed, as a machine losing power): slurmctld marks it DOWN after
SlurmdTimeout and requeues the job (NODE_FAIL with `--requeue`), node2 comes back
(ReturnToService=2), and the job resumes again on both nodes and finishes. Its logged
losses equal a 1-process run of the same config, step by step, to 1e-4.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launch.slurm_jobs import (
    REPO,
    TINY,
    context_for,
    set_args,
    submit,
    train_records,
    wait_for,
    wait_for_checkpoint,
    wait_for_training,
)

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(1200)]

MAX_STEPS = 1200
NODES = ("node1", "node2")
# Every step logged: a logged loss is that step's own, not the mean of a window a stop cuts
# short, so the job and the 1-process run compare step by step.
EVERY_STEP = ["logging.logging_steps=1"]


def start_one_process_run(folder: Path, name: str) -> subprocess.Popen:
    """The same config on 1 process here, side by side with the job: the reference losses."""
    folder.mkdir()
    sets = set_args([*TINY, *EVERY_STEP, f"training.max_steps={MAX_STEPS}",
                     f"output.run_name={name}", "training.device=cpu",
                     "training.num_threads=1"])  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "trainforge", "train", str(REPO / "config/vit_digits.yaml"), *sets],
        cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )  # fmt: skip


def losses_by_step(records: list[dict]) -> dict[int, list[float]]:
    found: dict[int, list[float]] = {}
    for record in records:
        found.setdefault(record["step"], []).append(record["loss"])
    return found


def assert_on_one_process_trajectory(run_dir: Path, reference: Path) -> None:
    ours, theirs = losses_by_step(train_records(run_dir)), losses_by_step(train_records(reference))
    assert sorted(ours) == list(range(1, MAX_STEPS + 1)), sorted(
        set(range(1, MAX_STEPS + 1)) ^ set(ours)
    )
    assert sorted(theirs) == sorted(ours)
    # A step logged twice (trained again after a resume, or logged at a stop) agrees each time.
    worst = max(abs(loss - theirs[step][0]) for step, copies in ours.items() for loss in copies)
    assert worst <= 1e-4, f"largest loss difference to 1 process: {worst:.2e}"


def assert_segments_on_both_nodes(run_dir: Path) -> None:
    """run.json's segments: the start, the USR1 requeue and the node-fail requeue, each with
    one process on node1 and one on node2; the USR1 restart timed from its stop."""
    segments = json.loads((run_dir / "run.json").read_text())["segments"]
    assert len(segments) == 3, segments
    for segment in segments:
        placed = sorted((node["host"], node["processes"]) for node in segment["nodes"])
        assert placed == [(NODES[0], 1), (NODES[1], 1)], segment
    assert segments[0]["stop_signal"] == "SIGUSR1" and segments[1]["recovery_s"] > 0, segments
    assert segments[2]["resume"] == "exact", segments  # same nodes and processes: bitwise


def test_two_node_job_requeues_on_usr1_and_on_a_lost_node_and_stays_on_trajectory(
    slurm_two_nodes, cli, tmp_path
):
    cluster = slurm_two_nodes
    reference = start_one_process_run(tmp_path / "one", "one")
    job_id, log, run_dir = submit(
        cli, cluster, tmp_path, "two", MAX_STEPS, nodes=2, procs=1, extra=EVERY_STEP
    )
    context = context_for(cluster, job_id, log)
    wait_for_training(run_dir, context)
    assert cluster.job(job_id)["NodeList"] == "node[1-2]", context()

    # SIGUSR1 to the step on both nodes: checkpoint, requeue, resume on both nodes.
    cluster.run("scancel", "--signal=USR1", job_id)
    meta = wait_for_checkpoint(run_dir / "checkpoints/checkpoint_interrupted", context)
    stopped_at = meta["global_step"]
    assert 0 < stopped_at < MAX_STEPS, context()
    wait_for("the USR1 requeue", lambda: cluster.job(job_id)["Restarts"] == "1", 120, context)
    wait_for_training(run_dir, context, after_step=stopped_at + 20)

    # node2 dies mid-job: Slurm notices (SlurmdTimeout), requeues, and the node comes back.
    cluster.lose_node("node2")
    wait_for("the NODE_FAIL requeue", lambda: cluster.job(job_id)["Restarts"] == "2", 180, context)
    assert cluster.node_states()["node2"].startswith("down"), cluster.node_states()
    cluster.restore_node("node2")
    wait_for(
        "the requeued job to finish",
        lambda: cluster.job(job_id)["JobState"] in ("COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL"),
        600,
        context,
    )
    job = cluster.job(job_id)
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", context()

    text = log.read_text()
    for restart in range(3):
        assert f"trainforge: job {job_id} (restart {restart}) on node[1-2]" in text, context()
    assert text.count("x 2 processes = ") >= 3, context()  # one process on each of 2 nodes
    assert text.count("resuming the run's newest checkpoint") == 2, context()
    assert f"Slurm job {job_id} requeued" in text, context()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["global_step"] == MAX_STEPS and summary["world_size"] == 2, summary
    assert_segments_on_both_nodes(run_dir)

    out, _ = reference.communicate(timeout=600)
    assert reference.returncode == 0, out[-3000:]
    assert_on_one_process_trajectory(run_dir, tmp_path / "one/runs/one")
