"""Recovery time is a number: run.json's segments record when the stop signal came, when its
checkpoint was saved, when the next process started, loaded it and ran its first step, and
the resume says how long training stood still. Also who decides that a restarted launcher
job continues its run by itself (torchrun's restart count and rendezvous id).

The first test is a real SIGUSR1 to a real `trainforge train` under a recorded Slurm job id
(the `scontrol` it calls is a fake that logs), then the job's restart.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from tests.engine.test_signals import DEADLINE_S, start, wait_for_training

from trainforge.run.segments import launcher_job, recovery_s, restart_line
from trainforge.runfolder import RunFolder

MILLISECONDS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00$")


def at(text: str) -> float:
    assert MILLISECONDS.match(text), text  # ISO 8601, UTC, milliseconds
    return datetime.fromisoformat(text).timestamp()


def fake_scontrol(tmp_path: Path) -> dict[str, str]:
    """A Slurm job id and an `scontrol` that accepts the requeue."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "scontrol").chmod(0o755)
    return {"SLURM_JOB_ID": "77", "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_a_requeue_records_stop_save_start_load_first_step_and_recovery(tmp_path):
    env = fake_scontrol(tmp_path)
    proc = start(tmp_path, "--set", "training.max_steps=100000", env=env)
    wait_for_training(tmp_path, proc)
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 128 + signal.SIGUSR1, out
    run = RunFolder(tmp_path / "runs/sig")
    (stopped,) = run.read_run()["segments"]
    assert stopped["stop_signal"] == "SIGUSR1" and stopped["launcher_job"] == "slurm 77"
    signal_at, saved_at = at(stopped["stop_signal_at"]), at(stopped["stop_saved_at"])
    assert signal_at <= saved_at and at(stopped["first_step_at"]) < signal_at
    assert stopped["checkpoint_loaded_at"] is None and stopped["recovery_s"] is None

    step = json.loads((run.checkpoints / "checkpoint_interrupted/meta.json").read_text())
    # The requeued job: the same command line, no --resume, two more steps.
    again = start(
        tmp_path, "--set", f"training.max_steps={step['global_step'] + 2}",
        "--set", "logging.report=true", env=env,  # its timeline is read below
    )  # fmt: skip
    out, _ = again.communicate(timeout=DEADLINE_S)
    assert again.returncode == 0, out
    first, second = run.read_run()["segments"]
    assert first["stop_signal_at"] == stopped["stop_signal_at"]  # kept as written
    started = at(second["process_started_at"])
    loaded, stepped = at(second["checkpoint_loaded_at"]), at(second["first_step_at"])
    tick = 1 / os.sysconf("SC_CLK_TCK")  # the kernel records a process's start to its tick
    assert saved_at <= started + tick and started <= loaded <= stepped
    assert second["recovery_s"] == pytest.approx(stepped - signal_at, abs=2e-3)
    assert second["end"] == "finished" and at(second["ended_at"]) >= stepped
    said = re.findall(r"resume: training again (\d+\.\d) s after the stop \(SIGUSR1 at ", out)
    assert said == [f"{second['recovery_s']:.1f}"], out
    # The report's scheduling timeline draws both segments and the recovery between them.
    report = run.report.read_text()
    assert report.count('<rect class="segment" data-segment=') == 2
    assert f'<rect class="recovery" data-recovery-s="{second["recovery_s"]}"' in report
    assert "requeued (slurm 77) · recovery" in report


def test_a_process_start_is_read_to_the_clock_tick_not_the_boot_second():
    """psutil's create_time() adds a process's age to /proc/stat's boot time, which is in whole
    seconds and drifts with NTP: a restarted process then seemed to start up to a second
    before its predecessor saved the checkpoint it resumes from."""
    before = time.time()
    child = subprocess.run(
        [sys.executable, "-c", "from trainforge.run.segments import process_started as p\n"
         "print(repr(p()))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    after = time.time()
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert before - tick <= float(child.stdout) <= after


def recorded(tmp_path: Path, job: str | None) -> RunFolder:
    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    folder.write_run({"launcher_job": job, "segments": []})
    return folder


def elastic(run_id: str, restarts: int) -> dict[str, str]:
    return {
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_RESTART_COUNT": str(restarts),
        "TORCHELASTIC_MAX_RESTARTS": "3",
    }


def test_a_torchrun_restart_of_the_same_job_continues_with_one_line(tmp_path):
    folder = recorded(tmp_path, "torchrun job-9")
    line = restart_line(folder, elastic("job-9", 1))
    assert line == (
        "torchrun restarted this job's processes (restart 1 of 3): continuing the run "
        "from its newest checkpoint"
    )
    joined = restart_line(folder, elastic("job-9", 0))  # a node joined: no restart counted
    assert joined is not None and "a node joined or left" in joined


def test_a_fresh_launch_or_another_jobs_run_is_not_taken_over(tmp_path):
    other = recorded(tmp_path, "torchrun job-8")
    assert restart_line(other, elastic("job-9", 2)) is None  # a first start was refused
    assert restart_line(other, {}) is None  # not under torchrun
    assert restart_line(RunFolder(tmp_path / "empty"), elastic("job-9", 1)) is None
    default_id = RunFolder(tmp_path / "default")
    default_id.path.mkdir()
    default_id.write_run({"launcher_job": "torchrun none"})
    assert restart_line(default_id, elastic("none", 0)) is None  # torchrun's default id
    assert restart_line(default_id, elastic("none", 1)) is not None
    slurm = {**elastic("job-9", 1), "SLURM_JOB_ID": "5"}  # Slurm's requeue rule decides
    assert launcher_job(slurm) == "slurm 5" and restart_line(other, slurm) is None


def test_recovery_is_known_only_after_a_recorded_stop_signal():
    stop = {"stop_signal_at": "2026-01-01T00:00:00.250+00:00"}
    first_step = datetime.fromisoformat("2026-01-01T00:00:12.000+00:00").timestamp()
    assert recovery_s(stop, first_step) == 11.75
    assert recovery_s({}, first_step) is None  # a node killed outright leaves no stop time
