"""A run sent to a Slurm cluster over SSH, watched, stopped, resumed and brought home.

The cluster is the real single-node Slurm of `make test-slurm` (benchmarks/slurm_cluster.py),
and its login node a real sshd on a loopback port (tests/targets/login_node.py) reached with
a key the fixture writes. The "local" project and the cluster's project folder are two
folders of this machine: what passes between them goes through ssh and rsync only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from slurm_cluster import ClusterError, SlurmCluster, single_node

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
TINY = [
    "model.embedding_dim=32", "model.num_layers=1", "model.num_heads=2", "model.mlp_size=32",
    "checkpoint.save_steps=100", "checkpoint.save_every_epochs=null",
    "evaluation.eval_every_epochs=null", "evaluation.eval_steps=100", "logging.logging_steps=10",
    "logging.tensorboard=false", "logging.progress_bar=false", "training.max_steps=3000",
]  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[SlurmCluster]:
    try:
        with single_node(tmp_path_factory.mktemp("slurm-target")) as running:
            yield running
    except ClusterError as err:
        pytest.fail(str(err))


def jobs_cli(project: Path, env: dict, *args: str, timeout: float = 600):
    return subprocess.run(
        [sys.executable, "-m", "trainforge", "jobs", *args],
        cwd=project, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def job_state(project: Path, env: dict, name: str) -> dict:
    done = jobs_cli(project, env, "--json")
    assert done.returncode == 0, done.stderr
    return next(r for r in json.loads(done.stdout) if r["name"] == name)


def wait_state(project, env, name, ready, what, cluster, timeout=300.0) -> dict:
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = job_state(project, env, name)
        seen.append((record["state"], record["step"]))
        if ready(record):
            return record
        time.sleep(1)
    jobs = cluster.run("squeue", "-a", check=False)
    logs = "".join(
        f"--- {log.name}\n{log.read_text(errors='replace')[-4000:]}\n"
        for log in sorted(project.parent.glob("cluster-project/runs/slurm/*"))
    )
    pytest.fail(f"timed out waiting for {what}; seen {seen[-10:]}\n{jobs}\n{logs}")


def test_submit_watch_stop_resume_and_pull(cluster, login_node, tmp_path):
    project, remote_project = tmp_path / "project", tmp_path / "cluster-project"
    (project / "config").mkdir(parents=True)
    remote_project.mkdir()
    shutil.copy(REPO / "config/vit_digits.yaml", project / "config")
    targets = tmp_path / "targets.yaml"
    setup = f"export SLURM_CONF={cluster.env['SLURM_CONF']} && source {VENV_BIN}/activate"
    fields = login_node.target_fields(remote_dir=str(remote_project), setup=setup)
    targets.write_text(yaml.safe_dump({"targets": {"hpc": fields}}), encoding="utf-8")
    env = {
        **os.environ, "HOME": str(tmp_path / "home"), "TRAINFORGE_TARGETS": str(targets),
        "TRAINFORGE_JOBS": str(tmp_path / "jobs" / "jobs.json"), "COLUMNS": "200",
    }  # fmt: skip
    env.pop("SLURM_CONF", None)  # this side knows nothing of the cluster but its login node

    # A job that holds both CPUs: ours waits for it, and `jobs` says why.
    blocker = cluster.run(
        "sbatch",
        "--parsable",
        "-c",
        "2",
        "-o",
        str(tmp_path / "blocker.out"),
        "--wrap",
        "sleep 600",
    ).strip()
    sets = [w for item in TINY for w in ("--set", item)]
    # `train --target`: train's own flags (--num_threads) and Slurm's go to the job.
    done = subprocess.run(
        [sys.executable, "-m", "trainforge", "train", "config/vit_digits.yaml", "--target", "hpc",
         "--time", "00:15:00", "--nodes", "1", "--gpus-per-node", "0", "--procs-per-node", "1",
         "--num_threads", "1", *sets],
        cwd=project, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Submitted batch job" in done.stdout and "run vit_digits" in done.stdout
    assert (remote_project / "config/vit_digits.yaml").is_file()  # copied over rsync
    pending = wait_state(
        project, env, "vit_digits", lambda r: r["state"] == "pending" and r["reason"],
        "pending with a reason", cluster,
    )  # fmt: skip
    assert pending["reason"] in ("Resources", "Priority"), pending
    cluster.run("scancel", blocker)
    running = wait_state(
        project, env, "vit_digits", lambda r: r["state"] == "running" and (r["step"] or 0) >= 20,
        "running with steps", cluster,
    )  # fmt: skip
    assert running["unreachable"] == ""

    done = jobs_cli(project, env, "stop", "vit_digits")
    assert done.returncode == 0, done.stderr
    stopped = wait_state(
        project, env, "vit_digits", lambda r: r["state"] in ("stopped", "failed", "completed"),
        "the stop", cluster,
    )  # fmt: skip
    assert stopped["state"] == "stopped", stopped
    run_dir = remote_project / "runs/vit_digits"
    assert (run_dir / "checkpoints/checkpoint_interrupted").is_dir()
    stopped_at = stopped["step"]

    done = jobs_cli(project, env, "resume", "vit_digits")
    assert done.returncode == 0, done.stdout + done.stderr
    finished = wait_state(
        project, env, "vit_digits", lambda r: r["state"] in ("completed", "failed", "stopped"),
        "the resumed job to finish", cluster, timeout=600,
    )  # fmt: skip
    assert finished["state"] == "completed", finished
    assert finished["step"] == 3000 and finished["metric"].get("accuracy") is not None
    assert stopped_at < 3000

    done = jobs_cli(project, env, "pull", "vit_digits", "home-run")
    assert done.returncode == 0, done.stderr
    home_run = project / "home-run"
    assert (home_run / "summary.json").is_file() and (home_run / "run.json").is_file()
    more = subprocess.run(
        [sys.executable, "-m", "trainforge", "train", "--resume", str(home_run),
         "--max_steps", "3020"],
        cwd=project, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert more.returncode == 0, more.stdout[-3000:] + more.stderr
    assert "exact" in more.stdout or "continued" in more.stdout, more.stdout[-3000:]
    assert "done: finished after 3020 steps" in more.stdout
