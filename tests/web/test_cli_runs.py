"""Runs started from the command line are listed under Runs, read from runs/*/run.json, with
their status taken from the run folder's lock and files; a stopped one resumes from the app."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from fakes.web import TINY_VIT, wait_for
from trainforge.runfolder import RunFolder

# The stand-in trainer with the CLI's run folder contract, run here as from a terminal.
FOLDER_TRAINER = [sys.executable, str(Path(__file__).resolve().parent / "folder_trainer.py")]


def cli_folder(project: Path, name: str, started: float | None = None) -> RunFolder:
    """A run folder as `trainforge train` leaves it at start: run.json with one segment."""
    folder = RunFolder(project / "runs" / name)
    folder.path.mkdir(parents=True)
    stamp = datetime.fromtimestamp(started or time.time(), UTC).isoformat(timespec="seconds")
    folder.write_run({
        "created": stamp, "config_file": "config/vit_digits.yaml", "profile_used": "cpu",
        "command": ["train", "config/vit_digits.yaml"], "total_steps": 40,
        "segments": [{"started": stamp}],
    })  # fmt: skip
    folder.metrics.write_text(json.dumps({"split": "train", "step": 3, "loss": 1.5}) + "\n")
    return folder


def listed(client) -> dict[str, dict]:
    return {run["id"]: run for run in client.get("/api/runs").json()}


def test_a_real_command_line_run_is_listed_with_its_task_steps_and_status(make_client, project):
    sets = [*TINY_VIT, "training.max_steps=6", "output.run_name=from-terminal"]
    done = subprocess.run(
        [sys.executable, "-m", "trainforge", "train", "config/vit_digits.yaml",
         *(word for item in sets for word in ("--set", item))],
        cwd=project, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    client = make_client()
    run = listed(client)["from-terminal"]
    assert run["origin"] == "command line" and run["status"] == "completed"
    assert run["task"] == "image-classification" and run["config"] == "config/vit_digits.yaml"
    assert run["step"] == 6 and run["total_steps"] == 6 and run["profile"] == "cpu"
    assert run["started_at"] and run["finished_at"] >= run["started_at"]
    page = client.get("/runs").text
    assert 'href="/runs/from-terminal"' in page and "(command line)" in page
    assert client.get("/runs/from-terminal").status_code == 200
    # A finished run cannot be resumed or stopped from the app.
    assert client.post("/api/runs/from-terminal/resume").status_code == 409
    assert client.post("/api/runs/from-terminal/stop").status_code == 409


def test_status_comes_from_the_lock_and_the_files(make_client, project):
    running = cli_folder(project, "running")
    fd = running.lock()  # held as a training process holds it
    running.mark_holder()
    elsewhere = cli_folder(project, "elsewhere")  # held by a process that names another pid
    other_fd = elsewhere.lock()
    elsewhere.lock_file.write_text("process 1 (trainforge train)")
    cli_folder(project, "failed")  # ended without a summary: killed or crashed
    stopped = cli_folder(project, "stopped")
    (stopped.checkpoints / "checkpoint_interrupted").mkdir(parents=True)
    stale = cli_folder(project, "stale-summary")  # completed once, then resumed and killed
    stale.summary.write_text(json.dumps({"interrupted": False}))
    an_hour_ago = time.time() - 3600
    os.utime(stale.summary, (an_hour_ago, an_hour_ago))
    client = make_client()
    try:
        runs = listed(client)
        assert runs["running"]["status"] == "running"
        assert f"process {os.getpid()}" in runs["running"]["message"]
        assert runs["failed"]["status"] == "failed" and not runs["failed"]["resumable"]
        assert runs["stopped"]["status"] == "stopped" and runs["stopped"]["resumable"]
        assert runs["stale-summary"]["status"] == "failed"
        assert all(run["total_steps"] == 40 and run["step"] == 3 for run in runs.values())
        # The page says how to stop a command-line run, and offers Stop where this server
        # may signal its process: the one holding the folder, run by this user (this test's
        # own process here, so Stop is not pressed).
        mine = runs["running"]
        assert mine["pid"] == os.getpid() and mine["can_stop"]
        assert f"kill -INT {os.getpid()}" in mine["stop_hint"] and "Ctrl+C" in mine["stop_hint"]
        page = client.get("/runs/running").text
        assert not re_hidden(page, "stop-button") and f"kill -INT {os.getpid()}" in page
        # A pid that does not hold the folder (reused, or on another machine) is never
        # signalled: Stop is not offered and the API says where to stop it.
        other = runs["elsewhere"]
        assert other["pid"] == 1 and not other["can_stop"] and "kill -INT 1" in other["stop_hint"]
        refused = client.post("/api/runs/elsewhere/stop")
        assert refused.status_code == 409 and "Ctrl+C" in refused.json()["detail"]
        assert re_hidden(client.get("/runs/elsewhere").text, "stop-button")
    finally:
        os.close(fd)
        os.close(other_fd)
    wait_for(lambda: listed(client)["running"]["status"] == "failed")  # the lock is gone
    assert not listed(client)["running"]["stop_hint"]


def re_hidden(page: str, element: str) -> bool:
    start = page.index(f'id="{element}"')
    return " hidden" in page[start : page.index(">", start)]


def test_a_stopped_command_line_run_resumes_from_the_app(make_client, project, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "400")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.02")
    args = ["config/vit_digits.yaml", "--set", 'output.run_name="terminal-run"']
    started = subprocess.Popen([*FOLDER_TRAINER, *args], cwd=project, stdout=subprocess.PIPE)
    metrics = project / "runs" / "terminal-run" / "metrics.jsonl"
    wait_for(lambda: metrics.is_file() and metrics.read_text().count("\n") >= 3)
    started.send_signal(signal.SIGINT)  # Ctrl+C in the terminal
    assert started.wait(timeout=60) == 130
    client = make_client()
    run = listed(client)["terminal-run"]
    assert run["status"] == "stopped" and run["resumable"] and run["origin"] == "command line"
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "20")
    resumed = client.post("/api/runs/terminal-run/resume")
    assert resumed.status_code == 202, resumed.text
    registry = client.app.state.trainforge.registry
    assert registry.get("terminal-run") is not None  # the app runs it from now on
    wait_for(lambda: listed(client)["terminal-run"]["status"] == "completed")
    log = client.get("/api/runs/terminal-run/log").json()["lines"]
    assert log[0] == "$ trainforge train --resume runs/terminal-run", log
