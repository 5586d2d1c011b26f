"""A sweep as a 2-task Slurm job array on the real single-node Slurm of `make test-slurm`:
both tasks pull trials from the shared journal and together finish a 4-trial study."""

from __future__ import annotations

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
