"""Runs through the API with the stand-in trainer (tests/fakes/fake_trainer.py): a subprocess
per attempt, live progress as server-sent events, Stop, Resume, crashes, vanished processes
and a history that survives a restart. The real `trainforge train` is in test_real_runs.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from fakes.web import JETSON, run_form, wait_for
from trainforge.runfolder import RunFolder
from trainforge.web.db import RunRecord


def recorded(run_id: str, pid: int, pid_started: float | None) -> RunRecord:
    """A run the registry believes is running as `pid`."""
    return RunRecord(
        id=run_id, task="image-classification", config="config/vit_digits.yaml", profile="cpu",
        argv=[], form={}, pid=pid, pid_started=pid_started, started_at=time.time(),
    )  # fmt: skip


def status(client, run_id: str) -> dict:
    return client.get(f"/api/runs/{run_id}").json()


def finished(client, run_id: str):
    def check():
        view = status(client, run_id)
        return view if view["status"] not in ("running", "stopping") else None

    return check


def read_events(client, run_id: str, offset: int = 0) -> list[tuple[str, object]]:
    """Every event of a run's stream until `end` (the stream closes itself then)."""
    events = []
    url = f"/api/runs/{run_id}/events?offset={offset}"
    with client.stream("GET", url) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[6:])))
    return events


def test_a_run_is_a_subprocess_that_streams_progress_and_completes(make_client, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "12")
    client = make_client()
    response = client.post("/api/runs", json=run_form())
    assert response.status_code == 201, response.text
    run = response.json()
    assert run["status"] == "running" and run["attempts"] == 1
    assert run["pid"] != os.getpid()
    events = read_events(client, "digits-web")
    steps = [r["step"] for name, records in events if name == "metrics" for r in records]
    train = [s for s in steps[:-1]]
    assert train == list(range(1, 13)), steps  # every record, in order, once
    assert events[-1] == ("end", {"status": "completed", "offset": events[-1][1]["offset"]})
    statuses = [data["status"] for name, data in events if name == "status"]
    assert statuses[-1] == "completed"
    view = status(client, "digits-web")
    assert view["exit_code"] == 0 and view["step"] == 12 and view["total_steps"] == 12
    assert view["latest"]["val"]["accuracy"] == 0.5
    assert view["latest"]["train"]["cpu_util_pct"] == 12.5
    assert not view["resumable"]
    # The argument list is the CLI's: config, profile, each changed field as --set (the
    # form's batch 64 is the config's own: no override).
    argv = view["argv"]
    assert argv[:3] == ["config/vit_digits.yaml", "--profile", "cpu"]
    assert not [a for a in argv if a.startswith("training.per_device_train_batch_size=")]
    assert 'output.run_name="digits-web"' in argv


def test_event_stream_resumes_from_an_offset(make_client, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "6")
    client = make_client()
    client.post("/api/runs", json=run_form())
    wait_for(finished(client, "digits-web"))
    first = read_events(client, "digits-web")
    offset = first[-1][1]["offset"]
    again = read_events(client, "digits-web", offset=offset)
    assert [name for name, _ in again] == ["status", "end"]  # nothing new after the offset
    metrics = client.get("/api/runs/digits-web/metrics", params={"offset": 0}).json()
    assert len(metrics["records"]) == 7 and metrics["offset"] == offset


def test_stop_checkpoints_gracefully_and_resume_continues(make_client, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "400")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.02")
    client = make_client()
    client.post("/api/runs", json=run_form())
    wait_for(lambda: status(client, "digits-web")["step"] >= 3)
    stopping = client.post("/api/runs/digits-web/stop")
    assert stopping.status_code == 202 and stopping.json()["status"] == "stopping"
    view = wait_for(finished(client, "digits-web"))
    assert view["status"] == "stopped" and view["exit_code"] == 130
    assert view["interrupted_checkpoint"] and view["resumable"]
    assert "checkpoint_interrupted saved" in view["message"]
    stopped_at = view["step"]
    assert 3 <= stopped_at < 400

    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.001")
    resumed = client.post("/api/runs/digits-web/resume")
    assert resumed.status_code == 202 and resumed.json()["attempts"] == 2
    assert resumed.json()["argv"] == view["argv"]  # the run's own arguments stay recorded
    view = wait_for(finished(client, "digits-web"))
    assert view["status"] == "completed" and view["step"] == 400
    records = client.get("/api/runs/digits-web/metrics").json()["records"]
    train_steps = [r["step"] for r in records if r["split"] == "train"]
    assert train_steps == list(range(1, 401))  # continued from the checkpoint, no repeats
    assert client.post("/api/runs/digits-web/resume").status_code == 409  # completed


def test_stop_twice_sends_sigterm(make_client, monkeypatch, tmp_path):
    # A trainer that ignores SIGINT: the second Stop must still end it (SIGTERM -> 143).
    script = tmp_path / "stubborn.py"
    ready = tmp_path / "handlers-installed"
    script.write_text(
        "import pathlib, signal, sys, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(600)\n"
    )
    client = make_client(train_command=[sys.executable, str(script)])
    client.post("/api/runs", json=run_form())
    wait_for(ready.exists)  # its handlers are in place
    assert client.post("/api/runs/digits-web/stop").json()["message"] == "SIGINT sent"
    assert wait_for(lambda: status(client, "digits-web")["status"] == "stopping")
    assert client.post("/api/runs/digits-web/stop").json()["message"] == "SIGTERM sent"
    view = wait_for(finished(client, "digits-web"))
    assert view["status"] == "stopped" and view["exit_code"] == 143


def test_a_crashed_run_is_failed_and_the_server_carries_on(make_client, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_CRASH_AT", "3")
    client = make_client()
    client.post("/api/runs", json=run_form())
    view = wait_for(finished(client, "digits-web"))
    assert view["status"] == "failed" and view["exit_code"] == 1
    assert "RuntimeError: fake crash at step 3" in view["message"]
    assert client.get("/api/runs/digits-web/log").json()["lines"][-1].startswith("RuntimeError")
    monkeypatch.delenv("FAKE_TRAINER_CRASH_AT")
    second = client.post("/api/runs", json=run_form(output_name="after-crash"))
    assert second.status_code == 201
    assert wait_for(finished(client, "after-crash"))["status"] == "completed"


def test_a_killed_run_is_failed(make_client, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "1000")
    client = make_client()
    pid = client.post("/api/runs", json=run_form()).json()["pid"]
    wait_for(lambda: status(client, "digits-web")["step"] >= 1)
    os.kill(pid, signal.SIGKILL)
    view = wait_for(finished(client, "digits-web"))
    assert view["status"] == "failed" and view["message"] == "killed by SIGKILL"


def test_history_survives_a_restart_and_vanished_runs_are_failed(make_client, project):
    client = make_client()
    client.post("/api/runs", json=run_form(output_name="done-before"))
    wait_for(finished(client, "done-before"))
    registry = client.app.state.trainforge.registry
    # A run recorded as running whose process is gone (the machine rebooted, say).
    ghost = subprocess.Popen([sys.executable, "-c", "pass"])
    ghost.wait()
    registry.save(recorded("ghost", ghost.pid, 0.0))
    # A run still going, started by an earlier server: adopted, then noticed when it ends.
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    from trainforge.web.runner import _create_time

    registry.save(recorded("adopted", live.pid, _create_time(live.pid)))

    restarted = make_client()  # same project, same database
    runs = {r["id"]: r for r in restarted.get("/api/runs").json()}
    assert runs["done-before"]["status"] == "completed"
    assert runs["ghost"]["status"] == "failed"
    assert runs["ghost"]["message"] == "the training process vanished without finishing"
    assert runs["adopted"]["status"] == "running"
    live.kill()
    live.wait()
    view = wait_for(finished(restarted, "adopted"))
    assert view["status"] == "failed"


def test_a_reused_pid_is_not_mistaken_for_the_run(make_client):
    client = make_client()
    registry = client.app.state.trainforge.registry
    registry.save(recorded("reused", os.getpid(), 1.0))  # our pid, another start time
    restarted = make_client()
    assert status(restarted, "reused")["status"] == "failed"


def test_name_in_use_is_refused_beside_the_output_name(make_client, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "1000")
    client = make_client()
    client.post("/api/runs", json=run_form())
    again = client.post("/api/runs", json=run_form())
    assert again.status_code == 422
    assert "is running" in again.json()["errors"]["output_name"][0]


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("left", ["checkpoints", "metrics", "run.json"])
def test_a_folder_that_holds_a_run_needs_overwrite(make_client, project, overwrite, left):
    folder = RunFolder(project / "runs" / "digits-web")
    if left == "checkpoints":
        (folder.checkpoints / "checkpoint-5").mkdir(parents=True)
    elif left == "metrics":
        folder.path.mkdir(parents=True)
        folder.metrics.write_text("")
    else:
        folder.path.mkdir(parents=True)
        folder.write_run({"command": []})
    response = make_client().post("/api/runs", json=run_form(overwrite=overwrite))
    if overwrite:
        assert response.status_code == 201 and response.json()["argv"][-1] == "--overwrite"
    else:
        message = response.json()["errors"]["output_name"][0]
        assert message.startswith(f"runs/digits-web already holds a run ({left})")
        assert "`trainforge train --resume runs/digits-web`" in message


def test_causal_lm_run_writes_a_model_that_the_models_list_shows(make_client, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "5")
    client = make_client(fixture=JETSON)
    values = client.get("/api/train/defaults").json()["values"]
    form = {**values, "base_model": "base-gpt2", "output_name": "jetson-tuned", "profile": "cpu"}
    response = client.post("/api/runs", json=form)
    assert response.status_code == 201, response.text
    assert response.json()["output_model"] == "jetson-tuned"
    argv = response.json()["argv"]
    assert 'model.model_name_or_path="models/base-gpt2"' in argv
    # The dataset the dialog showed is the config's own: no override (the run reads it as is).
    assert not [a for a in argv if a.startswith("data.options.train_file=")]
    assert wait_for(finished(client, "jetson-tuned"))["status"] == "completed"
    names = [m["name"] for m in client.get("/api/models").json()]
    assert names == ["base-gpt2", "jetson-tuned"]
    page = client.get("/models").text
    assert "jetson-tuned" in page and "GPT2LMHeadModel" in page


def test_run_events_announce_completion_to_the_models_page(make_client, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "3")
    client = make_client()
    app_state = client.app.state.trainforge
    version = app_state.registry.version
    client.post("/api/runs", json=run_form())
    wait_for(finished(client, "digits-web"))
    assert app_state.registry.version >= version + 2  # started, then completed


def test_the_token_is_not_handed_to_the_training_process(make_client, monkeypatch, tmp_path):
    dump = tmp_path / "env.txt"
    monkeypatch.setenv("FAKE_TRAINER_ENV_DUMP", str(dump))
    monkeypatch.setenv("TRAINFORGE_WEB_TOKEN", "s3cret-from-env")
    client = make_client(token="s3cret-from-env")
    client.headers["Authorization"] = "Bearer s3cret-from-env"
    client.post("/api/runs", json=run_form())
    wait_for(finished(client, "digits-web"))
    names = dump.read_text().split()
    assert "PATH" in names and "TRAINFORGE_WEB_TOKEN" not in names


def test_the_documented_minimal_request_starts_a_run(make_client, monkeypatch):
    # docs/web_app.md: config, output name, profile and overrides; the rest from the config.
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "3")
    client = make_client()
    body = {"config": "config/vit_digits.yaml", "output_name": "digits-api", "profile": "auto",
            "overrides": ["training.max_steps=200"]}  # fmt: skip
    response = client.post("/api/runs", json=body)
    assert response.status_code == 201, response.text
    assert response.json()["task"] == "image-classification"
    assert response.json()["profile"] == "cpu"  # auto on the recorded CPU machine
    assert wait_for(finished(client, "digits-api"))["status"] == "completed"


def test_a_run_the_oom_killer_ended_says_so(make_client, monkeypatch, project, tmp_path):
    """The process record a start leaves, and its memory cgroup's OOM count that grew: the
    run page says out of memory, with the limit and the fix (a real OOM kill is in
    tests/engine/test_oom_kill.py)."""
    from trainforge.web.settings import WebSettings

    monkeypatch.setenv("FAKE_TRAINER_STEPS", "1000")
    client = make_client()
    pid = client.post("/api/runs", json=run_form()).json()["pid"]
    wait_for(lambda: status(client, "digits-web")["step"] >= 1)
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    folder = WebSettings(root=project).run_folder("digits-web")
    record = {"pid": pid, "memory_cgroup": str(cgroup), "oom_kills": 0}
    record.update(memory_limit_bytes=1.5 * 1024**3, memory_source="cgroup limit")
    folder.process_file.write_text(json.dumps(record))
    (cgroup / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n")
    os.kill(pid, signal.SIGKILL)
    view = wait_for(finished(client, "digits-web"))
    assert view["status"] == "failed"
    assert view["message"] == (
        "killed: out of memory (limit 1.5 GiB); lower the micro-batch or use --batch_size auto"
    )
