"""The run status many clients poll: built once per change of the run's record or files,
answered with an entity tag, and an empty 304 to a client that already has it."""

from __future__ import annotations

import json
import logging

from fakes.web import run_form, wait_for
from trainforge.runfolder import RunFolder
from trainforge.web import api, run_files
from trainforge.web.app_state import AppState
from trainforge.web.serve import quiet_polls


def finished_run(client, monkeypatch) -> dict:
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "6")
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.01")
    assert client.post("/api/runs", json=run_form()).status_code == 201
    return wait_for(
        lambda: (v := client.get("/api/runs/digits-web").json())["status"] == "completed" and v
    )


def test_an_unchanged_run_is_answered_304_and_a_change_gets_a_new_tag(
    make_client, project, monkeypatch
):
    client = make_client()
    view = finished_run(client, monkeypatch)
    first = client.get("/api/runs/digits-web")
    tag = first.headers["etag"]
    assert first.status_code == 200 and first.json() == view
    assert first.headers["cache-control"] == "no-cache"  # browsers ask again, with the tag

    again = client.get("/api/runs/digits-web", headers={"If-None-Match": tag})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == tag

    metrics = RunFolder(project / "runs" / "digits-web").metrics
    with metrics.open("a") as fh:
        fh.write(json.dumps({"split": "train", "step": 99, "loss": 0.5}) + "\n")
    changed = client.get("/api/runs/digits-web", headers={"If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["etag"] != tag
    assert changed.json()["step"] == 99 and changed.json()["num_records"] == view["num_records"] + 1


def test_polls_of_an_unchanged_run_parse_nothing(make_client, monkeypatch):
    client = make_client()
    finished_run(client, monkeypatch)
    client.get("/api/runs/digits-web")
    builds, reads = [], []
    build, read = AppState._build, run_files.read_records
    monkeypatch.setattr(AppState, "_build", lambda self, *a: builds.append(1) or build(self, *a))
    monkeypatch.setattr(run_files, "read_records", lambda *a: reads.append(1) or read(*a))
    for _ in range(20):
        assert client.get("/api/runs/digits-web").status_code == 200
    assert builds == [] and reads == []
    client.post("/api/runs/digits-web/resume")  # a completed run refuses: the record is unchanged
    assert client.get("/api/runs/digits-web").status_code == 200 and builds == []


def test_the_log_tail_is_read_again_only_when_the_log_changed(tmp_path, monkeypatch):
    log = tmp_path / "run.log"
    log.write_text("one\ntwo\rtwo, redrawn\n")
    assert run_files.log_tail(log) == ["one", "two, redrawn"]
    opened = []
    real_open = type(log).open

    def counted(self, mode="r", *args, **kwargs):
        if mode == "rb":
            opened.append(self)
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(type(log), "open", counted)
    assert run_files.log_tail(log, 1) == ["two, redrawn"] and opened == []
    log.write_text("one\ntwo\rtwo, redrawn\nthree\n")
    assert run_files.log_tail(log) == ["one", "two, redrawn", "three"] and opened == [log]


def test_the_access_log_leaves_out_answered_status_polls_only():
    def line(method: str, path: str, status: int) -> logging.LogRecord:
        args = ("127.0.0.1:5000", method, path, "1.1", status)
        return logging.LogRecord(
            "uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d', args, None
        )

    assert not quiet_polls(line("GET", "/api/runs/digits-web", 200))
    assert not quiet_polls(line("GET", "/api/runs/digits-web", 304))
    assert quiet_polls(line("GET", "/api/runs/digits-web", 404))  # a mistake stays visible
    assert quiet_polls(line("GET", "/api/runs", 200))
    assert quiet_polls(line("GET", "/api/runs/digits-web/log", 200))
    assert quiet_polls(line("POST", "/api/runs/digits-web/stop", 202))


def test_the_status_fast_path_answers_known_runs_behind_the_access_token(make_client, monkeypatch):
    client = make_client(token="tok-5e3c")
    auth = {"Authorization": "Bearer tok-5e3c"}
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "3")
    assert client.post("/api/runs", json=run_form(), headers=auth).status_code == 201
    wait_for(
        lambda: client.get("/api/runs/digits-web", headers=auth).json()["status"] == "completed"
    )
    assert client.get("/api/runs/digits-web").status_code == 401  # the guard comes first

    def routed(*args):
        raise AssertionError("the router answered a status poll")

    monkeypatch.setattr(api, "run_record", routed)  # the router's way to the record
    answer = client.get("/api/runs/digits-web", headers=auth)
    assert answer.status_code == 200 and answer.json()["status"] == "completed"
    monkeypatch.undo()
    assert client.get("/api/runs/no-such-run", headers=auth).status_code == 404
    assert client.get("/api/runs/..%2Fetc", headers=auth).status_code in (400, 404)
