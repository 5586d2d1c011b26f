"""Sweeps as Slurm job arrays on the real single-node Slurm of `make test-slurm`: a 2-task
array whose tasks pull trials from the shared journal finishes a 4-trial study; SIGUSR1 to a
task (as `--signal=B:USR1@120` sends before the time limit) checkpoints its trial and requeues
the task, and the requeued task resumes the trial from that checkpoint."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

from fakes.sweeps import DIGITS, TINY, load_study

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(900)]
VENV_BIN = Path(sys.executable).parent


def test_a_two_task_array_on_a_target_finishes_a_four_trial_study(
    slurm_cluster, cli, tmp_path, space_file
):
    """`sweep ... --slurm --submit --target NAME`: the array goes to the login node over SSH
    (a real sshd, tests/targets/login_node.py) with the sweep's record, config and space
    copied by rsync; its 2 tasks pull the 4 trials from the journal there, none twice."""
    import shutil

    import yaml

    from targets.login_node import start_login_node

    project, remote = tmp_path / "project", tmp_path / "cluster-project"
    (project / "config").mkdir(parents=True)
    remote.mkdir()
    shutil.copy(DIGITS, project / "config")
    (project / "space.yaml").write_text(
        "params:\n  optimizer.learning_rate: {log_uniform: [1.0e-3, 3.0e-3]}\n"
    )
    node = start_login_node(tmp_path / "login-node")
    setup = f"export SLURM_CONF={slurm_cluster.env['SLURM_CONF']} && source {VENV_BIN}/activate"
    targets = tmp_path / "targets.yaml"
    fields = node.target_fields(remote_dir=str(remote), setup=setup)
    targets.write_text(yaml.safe_dump({"targets": {"hpc": fields}}), encoding="utf-8")
    env = {
        **os.environ, "TRAINFORGE_TARGETS": str(targets), "HOME": str(tmp_path / "home"),
        "TRAINFORGE_JOBS": str(tmp_path / "jobs" / "jobs.json"),
    }  # fmt: skip
    env.pop("SLURM_CONF", None)  # this side knows the cluster only through its login node
    try:
        submitted = cli(
            "sweep", "config/vit_digits.yaml", "--space", "space.yaml", "--trials", "4",
            "--name", "arr", *TINY, "--slurm", "--time", "00:15:00", "--parallel", "2",
            "--submit", "--target", "hpc", cwd=project, env=env,
        )  # fmt: skip
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        job_id = re.search(r"Submitted batch job (\d+) on hpc", submitted.stdout).group(1)
        folder = remote / "runs" / "arr"
        script = next((folder / "logs").glob("*.sbatch")).read_text()
        assert "#SBATCH --array=0-1%2" in script
        deadline = time.monotonic() + 800
        while slurm_cluster.run("squeue", "-h", "-j", job_id, check=False).strip():
            if time.monotonic() > deadline:
                logs = "\n".join(p.read_text() for p in (folder / "logs").glob("slurm-*.out"))
                pytest.fail(f"the array did not finish\n{logs}\n{slurm_cluster.daemon_logs()}")
            time.sleep(1)
        listed = cli("jobs", "--json", cwd=project, env=env)
        assert listed.returncode == 0, listed.stderr
        record = next(r for r in json.loads(listed.stdout) if r["name"] == "arr")
        assert (record["target"], record["job_id"]) == ("hpc", job_id), record
        assert record["state"] == "completed", record
    finally:
        node.stop()
    study = load_study(folder)
    assert len(study.trials) == 4
    assert all(t.state.name in ("COMPLETE", "PRUNED") for t in study.trials), [
        t.state.name for t in study.trials
    ]
    trials = [int(n.name.removeprefix("trial-")) for n in folder.glob("trial-*")]
    assert sorted(trials) == [0, 1, 2, 3]  # each trial once
    logs = sorted((folder / "logs").glob(f"slurm-{job_id}_*.out"))
    assert len(logs) == 2  # both tasks ran
    worked = [
        log for log in logs if re.search(r"trial-\d{3}: (starting|resuming)", log.read_text())
    ]
    assert len(worked) == 2, [log.read_text() for log in logs]  # both pulled trials
    started = re.findall(r"trial-(\d{3}): starting", "".join(log.read_text() for log in logs))
    assert len(started) == len(set(started)) == 4, started  # no trial repeated


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
