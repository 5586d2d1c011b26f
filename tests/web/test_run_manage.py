"""Runs management and the links around a run, without a browser: the web database's
run_meta table (and an old database that lacks it), rename/tag/note of a command-line run
without touching its run.json, delete and its refusals, the run-file view's path rule, the
guides, Export's refusals, and Compare's first pick (the newest runs, a sweep's best trials).
The same features in Chromium: test_browser_keep_open.py."""

from __future__ import annotations

import json
import os
import sqlite3
import time

from fakes.web import run_form, wait_for
from web.test_cli_runs import cli_folder

OLD_SCHEMA = """CREATE TABLE runs (id TEXT PRIMARY KEY, task TEXT NOT NULL, config TEXT NOT NULL,
profile TEXT NOT NULL, argv TEXT NOT NULL, form TEXT NOT NULL, output_model TEXT,
status TEXT NOT NULL, pid INTEGER, pid_started REAL, exit_code INTEGER, message TEXT,
attempts INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL, started_at REAL,
finished_at REAL)"""


def test_an_old_database_keeps_its_runs_and_gains_names_tags_and_notes(tmp_path):
    from trainforge.web.db import RunMeta, RunRegistry

    path = tmp_path / "runs.db"
    with sqlite3.connect(path) as db:  # a database from before the queue and run_meta
        db.execute(OLD_SCHEMA)
        db.execute(
            "INSERT INTO runs (id, task, config, profile, argv, form, status, created_at) "
            "VALUES ('old', 'image-classification', 'config/vit_digits.yaml', 'cpu', '[]', "
            "'{}', 'completed', 1.0)"
        )
    registry = RunRegistry(path)
    assert [r.id for r in registry.list()] == ["old"]
    assert registry.meta("old") == RunMeta()
    registry.set_meta("old", RunMeta("first try", ("baseline",), "lr too high"))
    again = RunRegistry(path)  # another server start reads it back
    assert again.meta("old") == RunMeta("first try", ("baseline",), "lr too high")
    again.delete("old")
    assert again.list() == [] and RunRegistry(path).meta("old") == RunMeta()


def test_a_command_line_run_is_renamed_tagged_and_noted_without_touching_run_json(
    make_client, project
):
    client = make_client()
    folder = cli_folder(project, "from-terminal")
    before = folder.run_json.read_bytes()
    answer = client.patch(
        "/api/runs/from-terminal/meta",
        json={"display_name": " Baseline ", "tags": ["a", " b ", "a", ""], "note": "first"},
    )
    assert answer.status_code == 200, answer.text
    view = answer.json()
    assert (view["display_name"], view["tags"], view["note"]) == ("Baseline", ["a", "b"], "first")
    assert folder.run_json.read_bytes() == before
    listed = {r["id"]: r for r in client.get("/api/runs").json()}
    assert listed["from-terminal"]["display_name"] == "Baseline"
    assert client.patch("/api/runs/from-terminal/meta", json={"note": "x"}).json()["tags"] == [
        "a",
        "b",
    ]  # fields left out keep their value
    too_many = client.patch("/api/runs/from-terminal/meta", json={"tags": ["t"] * 21})
    assert too_many.status_code == 422
    assert client.patch("/api/runs/..%2Fx/meta", json={}).status_code in (400, 404)


def test_delete_removes_a_finished_run_and_refuses_a_running_one(make_client, project, monkeypatch):
    client = make_client()
    folder = cli_folder(project, "done")
    assert client.delete("/api/runs/done").status_code == 204
    assert not folder.path.exists()
    assert client.get("/api/runs/done").status_code == 404

    monkeypatch.setenv("FAKE_TRAINER_STEPS", "100000")  # runs until stopped
    assert client.post("/api/runs", json=run_form(output_name="busy")).status_code == 201
    state = client.app.state.trainforge
    busy = state.settings.run_folder("busy")
    wait_for(lambda: state.get_run("busy").status == "running" and busy.metrics.is_file(), 120)
    refused = client.delete("/api/runs/busy")
    assert refused.status_code == 409 and "stop it first" in refused.json()["detail"]
    assert busy.metrics.is_file()


def test_delete_never_follows_a_link_out_of_the_runs_folder(make_client, project, tmp_path):
    client = make_client()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    kept = cli_folder(outside, "precious")
    (project / "runs").mkdir(exist_ok=True)
    os.symlink(kept.path, project / "runs" / "linked")
    answer = client.delete("/api/runs/linked")
    assert answer.status_code in (404, 409), answer.text
    assert kept.run_json.is_file()


def test_run_files_are_served_only_from_inside_the_run_folder(make_client, project, tmp_path):
    client = make_client()
    folder = cli_folder(project, "viewed")
    answer = client.get("/runs/viewed/files/run.json")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    assert json.loads(answer.text) == json.loads(folder.run_json.read_text())
    assert '"loss": 1.5' in client.get("/runs/viewed/files/metrics.jsonl").text
    for name in ("model.safetensors", ".lock", "..%2F..%2Fsecret", "summary.json"):
        assert client.get(f"/runs/viewed/files/{name}").status_code == 404, name
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    folder.summary.symlink_to(secret)  # a record that is a link out of the run folder
    refused = client.get("/runs/viewed/files/summary.json")
    assert refused.status_code == 404 and "not yours" not in refused.text
    view = client.get("/api/runs/viewed").json()
    assert view["folder"] == "runs/viewed" and "run.json" in view["files"]


def test_the_guides_are_pages_and_their_html_is_not_run(make_client):
    from trainforge.web.links import _render

    client = make_client()
    page = client.get("/help/sweeps")
    assert page.status_code == 200 and "<h1>" in page.text
    assert client.get("/help/sweeps.md").status_code == 200  # a guide's relative link
    assert client.get("/help/nope").status_code == 404
    assert 'href="/help/web_app"' in client.get("/help").text
    assert "<script>" not in _render("<script>alert(1)</script>")


def test_export_is_refused_for_a_run_without_a_final_model(make_client, project):
    client = make_client()
    cli_folder(project, "unfinished")
    refused = client.post("/api/runs/unfinished/export", json={"formats": ["onnx"]})
    assert refused.status_code == 409 and "no final model" in refused.json()["detail"]
    assert client.post("/api/runs/unfinished/export", json={"formats": ["tflite"]}).status_code == (
        422
    )
    assert client.get("/api/runs/unfinished/model").status_code == 404
    status = client.get("/api/runs/unfinished/export").json()
    assert status["running"] is False and status["artifacts"] == []


def test_compare_picks_the_two_newest_runs_or_a_sweeps_best_trials(make_client, project):
    from trainforge.sweep import study as studies
    from trainforge.sweep.space import parse_space
    from trainforge.sweep.study import SweepFolder

    for age, name in ((300, "oldest"), (200, "middle"), (100, "newest")):
        folder = cli_folder(project, name)
        then = time.time() - age
        os.utime(folder.run_json, (then, then))
    sweep = SweepFolder(project / "runs" / "search")
    request = {
        "space": {"params": {"model.mlp_dropout": {"uniform": [0.0, 0.2]}}},
        "trials": 4, "metric": "accuracy", "direction": "maximize", "pruner": "none",
    }  # fmt: skip
    sweep.path.mkdir(parents=True)
    sweep.write_request(request)
    space, _ = parse_space(request["space"], "space")
    study = studies.open_study(sweep, request)
    for value in (0.5, 0.9, 0.7, 0.1):
        trial, _, lease = studies.claim(sweep, study, 4, space)
        os.close(lease)
        study.tell(trial, value)
        cli_folder(project, f"search/{sweep.trial_name(trial.number)}")
    client = make_client()

    def picked(url: str) -> list[str]:
        page = client.get(url).text
        return [
            line.split('value="')[1].split('"')[0]
            for line in page.splitlines()
            if 'type="checkbox"' in line and " checked" in line
        ]

    assert sorted(picked("/compare")) == ["middle", "newest"]
    best = [sweep.trial_name(n) for n in (1, 2, 0)]  # 0.9, 0.7, 0.5: maximize
    assert picked("/compare?sweep=search") == sorted(f"search/{t}" for t in best)
    assert picked("/compare?run=oldest") == ["oldest"]
    assert picked("/compare?sweep=nothing") == []
    trial = client.get("/runs/search/trial-001")  # a trial's page: managed with its sweep
    assert trial.status_code == 200 and 'id="manage-form"' not in trial.text


def test_an_export_still_running_ends_with_the_server_and_its_log_says_so(project, monkeypatch):
    import subprocess
    import sys

    from fastapi.testclient import TestClient

    from fakes.web import CPU
    from trainforge.web import artefacts
    from trainforge.web.app import create_app
    from trainforge.web.settings import WebSettings

    folder = cli_folder(project, "finished")
    folder.summary.write_text(json.dumps({"interrupted": False}))
    folder.model.write_bytes(b"weights")  # a final model: Export is offered
    real, started = subprocess.Popen, []

    def export_that_never_ends(command, **options):
        assert command[3:5] == ["export", "runs/finished"]
        started.append(real([sys.executable, "-c", "import time; time.sleep(600)"], **options))
        return started[-1]

    monkeypatch.setattr(artefacts.subprocess, "Popen", export_that_never_ends)
    settings = WebSettings(root=project, fixture=CPU)
    with TestClient(create_app(settings)) as client:
        answer = client.post("/api/runs/finished/export", json={"formats": ["onnx"]})
        assert answer.status_code == 202, answer.text
        assert client.get("/api/runs/finished/export").json()["running"] is True
    (process,) = started
    assert process.poll() is not None  # ended when the server stopped, not left writing
    log = (settings.logs_path / "finished.export.log").read_text()
    assert log.endswith("export stopped: the server stopped; start it again from the run's page\n")
