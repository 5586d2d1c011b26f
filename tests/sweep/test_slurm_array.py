"""Sweeps as Slurm job arrays on the real single-node Slurm of `make test-slurm`: a 2-task
array whose tasks pull trials from the shared journal finishes a 4-trial study; SIGUSR1 to a
task (as `--signal=B:USR1@120` sends before the time limit) checkpoints its trial and requeues
the task, and the requeued task resumes the trial from that checkpoint."""

from __future__ import annotations

import json
import re
import time

import pytest

from fakes.sweeps import DIGITS, TINY, load_study

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(900)]


def test_a_two_task_array_finishes_a_four_trial_study(slurm_cluster, cli, tmp_path, space_file):
    space = space_file("params:\n  optimizer.learning_rate: {log_uniform: [1.0e-3, 3.0e-3]}\n")
    submitted = cli(
        "sweep", str(DIGITS), "--space", str(space), "--trials", "4", "--name", "arr",
        *TINY, "--slurm", "--time", "00:15:00", "--parallel", "2", "--submit",
        cwd=tmp_path, env=slurm_cluster.env,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job_id = re.search(r"Submitted batch job (\d+)", submitted.stdout).group(1)
    script = next((tmp_path / "runs" / "arr" / "logs").glob("*.sbatch")).read_text()
    assert "#SBATCH --array=0-1%2" in script
    folder = tmp_path / "runs" / "arr"
    deadline = time.monotonic() + 800
    while slurm_cluster.run("squeue", "-h", "-j", job_id, check=False).strip():
        if time.monotonic() > deadline:
            logs = "\n".join(p.read_text() for p in (folder / "logs").glob("slurm-*.out"))
            pytest.fail(f"the array did not finish\n{logs}\n{slurm_cluster.daemon_logs()}")
        time.sleep(1)
    study = load_study(folder)
    assert len(study.trials) == 4
    assert all(t.state.name in ("COMPLETE", "PRUNED") for t in study.trials), [
        t.state.name for t in study.trials
    ]
    logs = sorted((folder / "logs").glob(f"slurm-{job_id}_*.out"))
    assert len(logs) == 2  # both tasks ran
    worked = [
        log for log in logs if re.search(r"trial-\d{3}: (starting|resuming)", log.read_text())
    ]
    assert len(worked) == 2, [log.read_text() for log in logs]  # both pulled trials


def test_sigusr1_checkpoints_the_trial_requeues_the_task_and_it_resumes(
    slurm_cluster, cli, tmp_path, space_file
):
    space = space_file("params:\n  optimizer.learning_rate: {log_uniform: [1.0e-3, 3.0e-3]}\n")
    submitted = cli(
        "sweep", str(DIGITS), "--space", str(space), "--trials", "1", "--name", "requeue",
        *TINY, "--max_steps", "3000", "--set", "checkpoint.save_steps=100000",
        "--slurm", "--time", "00:15:00", "--parallel", "1", "--submit",
        cwd=tmp_path, env=slurm_cluster.env,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job_id = re.search(r"Submitted batch job (\d+)", submitted.stdout).group(1)
    folder = tmp_path / "runs" / "requeue"
    metrics = folder / "trial-000" / "metrics.jsonl"

    def logs() -> str:
        return "\n".join(p.read_text() for p in (folder / "logs").glob("*.out"))

    deadline = time.monotonic() + 300
    while not (metrics.exists() and metrics.read_text().count("\n") >= 1):
        assert time.monotonic() < deadline, logs()
        time.sleep(0.5)
    # Slurm's warning before the time limit (`--signal=B:USR1@120`), sent now.
    slurm_cluster.run("scancel", "--batch", "--signal=USR1", job_id)
    deadline = time.monotonic() + 600
    while slurm_cluster.run("squeue", "-h", "-j", job_id, check=False).strip():
        assert time.monotonic() < deadline, logs() + slurm_cluster.daemon_logs()
        time.sleep(1)
    text = logs()
    assert "requeued Slurm job" in text, text
    assert "trial-000: resuming" in text, text
    study = load_study(folder)
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert len(done) == 1 and not [t for t in study.trials if t.state.name == "RUNNING"]
    record = json.loads((folder / "trial-000" / "run.json").read_text())
    assert [s["from_checkpoint"] for s in record["segments"]] == [None, "checkpoint_interrupted"]
    assert json.loads((folder / "trial-000" / "summary.json").read_text())["global_step"] == 3000
