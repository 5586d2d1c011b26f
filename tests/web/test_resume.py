"""Resume from the web app is the CLI's own command: `trainforge train --resume runs/NAME`,
nothing else, launched and shown at the top of the attempt's log; a queued run that ran
before restarts the same way; a run that died before writing run.json restarts from its own
arguments. The stand-in trainer (folder_trainer.py) refuses what the CLI refuses."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from fakes.web import run_form, wait_for
from trainforge.runfolder import RunFolder, resume_command

STEPS = 60


@pytest.fixture
def launched(monkeypatch) -> list[list[str]]:
    """Every argument list the runner starts a process with, in order."""
    calls: list[list[str]] = []
    popen = subprocess.Popen

    def record(argv, *args, **kwargs):
        calls.append(list(argv))
        return popen(argv, *args, **kwargs)

    monkeypatch.setattr("trainforge.web.runner.subprocess.Popen", record)
    return calls


def status(client, run_id: str) -> dict:
    return client.get(f"/api/runs/{run_id}").json()


def finished(client, run_id: str) -> dict:
    def check():
        view = status(client, run_id)
        return view if view["status"] not in ("running", "stopping", "queued") else None

    return wait_for(check)


def stopped_run(client, monkeypatch, run_id: str = "digits-web") -> dict:
    """A run stopped by Stop after a few steps (checkpoint_interrupted saved)."""
    monkeypatch.setenv("FAKE_TRAINER_STEPS", str(STEPS))
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.05")
    assert client.post("/api/runs", json=run_form(output_name=run_id)).status_code == 201
    wait_for(lambda: status(client, run_id)["step"] >= 3)
    assert client.post(f"/api/runs/{run_id}/stop").status_code == 202
    view = finished(client, run_id)
    assert view["status"] == "stopped" and view["interrupted_checkpoint"], view
    assert view["step"] < STEPS
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.001")
    return view


def command_lines(client, run_id: str) -> list[str]:
    """The command line at the top of each attempt in the run's log."""
    log = client.app.state.trainforge.runner.log_path(run_id)
    return [line for line in log.read_text().splitlines() if line.startswith("$ ")]


def train_steps(client, run_id: str) -> list[int]:
    records = client.get(f"/api/runs/{run_id}/metrics").json()["records"]
    return [r["step"] for r in records if r["split"] == "train"]


def test_resume_launches_exactly_train_resume_the_run_folder(make_client, monkeypatch, launched):
    client = make_client()
    first = stopped_run(client, monkeypatch)
    train = client.app.state.trainforge.settings.train_command
    assert launched == [[*train, *first["argv"]]]
    (client.app.state.trainforge.settings.root / first["config"]).unlink()  # run.json has it
    resumed = client.post("/api/runs/digits-web/resume")
    assert resumed.status_code == 202 and resumed.json()["attempts"] == 2
    assert launched[-1] == [*train, "--resume", "runs/digits-web"]
    expected = f"$ {resume_command(RunFolder(Path('runs') / 'digits-web'))}"
    assert expected == "$ trainforge train --resume runs/digits-web"
    assert command_lines(client, "digits-web") == [
        f"$ trainforge train {' '.join(first['argv'])}",
        expected,
    ]
    view = finished(client, "digits-web")
    assert view["status"] == "completed", view
    assert train_steps(client, "digits-web") == list(range(1, STEPS + 1))  # from its checkpoint


def test_a_queued_run_that_ran_before_restarts_with_resume(make_client, monkeypatch, launched):
    client = make_client()  # one training at a time
    first = stopped_run(client, monkeypatch, "first")
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "100000")  # runs until stopped
    assert client.post("/api/runs", json=run_form(output_name="busy")).json()["status"] == "running"
    queued = client.post("/api/runs/first/resume").json()
    assert queued["status"] == "queued" and queued["attempts"] == 1
    client.post("/api/runs/busy/stop")
    wait_for(lambda: (v := status(client, "first"))["status"] == "running" and v["attempts"] == 2)
    train = client.app.state.trainforge.settings.train_command
    assert launched[-1] == [*train, "--resume", "runs/first"]
    assert command_lines(client, "first")[-1] == "$ trainforge train --resume runs/first"
    # It continues from its checkpoint (the stand-in refuses a command the CLI would refuse).
    wait_for(lambda: status(client, "first")["step"] > first["step"] + 2)
    assert status(client, "first")["status"] == "running"
    assert train_steps(client, "first")[: first["step"] + 1] == list(range(1, first["step"] + 2))


def test_without_run_json_but_with_checkpoints_the_config_is_named(
    make_client, monkeypatch, launched, project
):
    client = make_client()
    first = stopped_run(client, monkeypatch)
    RunFolder(project / "runs" / "digits-web").run_json.unlink()
    assert client.post("/api/runs/digits-web/resume").status_code == 202
    train = client.app.state.trainforge.settings.train_command
    assert launched[-1] == [*train, *first["argv"], "--resume", "runs/digits-web"]
    assert command_lines(client, "digits-web")[-1] == (
        f"$ trainforge train {' '.join(first['argv'])} --resume runs/digits-web"
    )
    assert finished(client, "digits-web")["status"] == "completed"
    assert train_steps(client, "digits-web") == list(range(1, STEPS + 1))


@pytest.mark.parametrize("left", ["nothing", "leftovers"])
def test_a_run_that_died_before_run_json_starts_again_from_its_arguments(
    make_client, monkeypatch, launched, project, left
):
    client = make_client()
    first = stopped_run(client, monkeypatch)
    folder = RunFolder(project / "runs" / "digits-web")
    shutil.rmtree(folder.path)  # the attempt died before writing anything ...
    extra = []
    if left == "leftovers":  # ... or only its empty metrics file and TensorBoard folder
        folder.tensorboard.mkdir(parents=True)
        folder.metrics.write_text("")
        extra = ["--overwrite"]  # nothing to resume; what is there is this run's own
    assert client.post("/api/runs/digits-web/resume").status_code == 202
    train = client.app.state.trainforge.settings.train_command
    assert launched[-1] == [*train, *first["argv"], *extra]
    assert "--resume" not in launched[-1]
    assert command_lines(client, "digits-web")[-1] == (
        f"$ trainforge train {' '.join([*first['argv'], *extra])}"
    )
    view = finished(client, "digits-web")
    assert view["status"] == "completed", view
    assert train_steps(client, "digits-web") == list(range(1, STEPS + 1))  # a fresh start


def test_resume_needs_the_config_file_only_without_run_json(make_client, monkeypatch, project):
    client = make_client()
    first = stopped_run(client, monkeypatch)
    (project / first["config"]).unlink()
    RunFolder(project / "runs" / "digits-web").run_json.unlink()
    response = client.post("/api/runs/digits-web/resume")
    assert response.status_code == 409
    assert "config/vit_digits.yaml no longer exists" in response.json()["detail"]


def test_a_folder_a_terminal_run_is_using_is_refused_by_resume_and_by_a_new_run(
    make_client, monkeypatch, project
):
    """A `trainforge train` from a terminal holds the run folder (its lock): the web app
    neither resumes into it nor starts a run over it, Overwrite ticked or not."""
    import os

    client = make_client()
    stopped_run(client, monkeypatch)
    folder = RunFolder(project / "runs" / "digits-web")
    held = folder.lock()  # as the terminal's run holds it
    try:
        folder.mark_holder()
        resumed = client.post("/api/runs/digits-web/resume")
        assert resumed.status_code == 409
        assert resumed.json()["detail"] == (
            f"runs/digits-web is in use by process {os.getpid()} (trainforge train). "
            "stop that run first"
        )
        fresh = client.post("/api/runs", json=run_form(output_name="digits-web", overwrite=True))
        assert fresh.status_code == 422, fresh.json()
        assert "runs/digits-web is in use by process" in str(fresh.json())
        assert status(client, "digits-web")["attempts"] == 1  # nothing was launched
    finally:
        os.close(held)
    assert client.post("/api/runs/digits-web/resume").status_code == 202  # released
    assert finished(client, "digits-web")["status"] == "completed"
