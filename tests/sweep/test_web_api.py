"""The sweep and compare API on a real app (no browser): a refused sweep answers one line per
problem and leaves nothing behind; Compare runs reads run folders under the runs folder only;
a sweep folder's trials and curves come from its journal and run folders."""

from __future__ import annotations

import json
import shutil

import pytest

from fakes.sweeps import REPO
from fakes.web import CPU


@pytest.fixture
def client(tmp_path):
    from fastapi.testclient import TestClient

    from trainforge.web.app import create_app
    from trainforge.web.settings import WebSettings

    shutil.copytree(REPO / "config", tmp_path / "config")
    with TestClient(create_app(WebSettings(root=tmp_path, fixture=CPU))) as c:
        yield c


def _run(folder, steps):
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"format": 1}))
    lines = [{"split": "val", "step": s, "loss": 2.0 / s, "accuracy": s / 100} for s in steps]
    lines.append({"split": "train", "step": steps[-1], "loss": 1.5})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_a_refused_sweep_names_every_problem_and_writes_nothing(client, tmp_path):
    body = {
        "config": "config/vit_digits.yaml", "name": "bad", "trials": 2,
        "space": "params:\n  model.embeding_dim: {choice: [32]}\n"
                 "  model.mlp_dropout: {uniform: [1, 0]}\n",
    }  # fmt: skip
    response = client.post("/api/sweeps", json=body)
    assert response.status_code == 422
    errors = response.json()["errors"]
    assert len(errors) == 2 and "did you mean model.embedding_dim" in errors[1] + errors[0]
    assert not (tmp_path / "runs" / "bad").exists()
    assert not list((tmp_path / "runs" / ".trainforge-web" / "sweeps").glob("*.yaml"))
    assert client.post("/api/sweeps", json={**body, "name": "../x"}).status_code == 400
    assert client.get("/api/sweeps/nothing").status_code == 404


def test_compare_reads_runs_and_sweep_trials_and_refuses_the_rest(client, tmp_path):
    _run(tmp_path / "runs" / "alone", [5, 10])
    _run(tmp_path / "runs" / "sw" / "trial-000", [5, 10, 15])
    assert client.get("/api/compare/runs").json() == ["alone", "sw/trial-000"]
    curves = client.get("/api/compare/curves?run=alone&run=sw/trial-000").json()
    # Each curve is the chart's buckets; a short run's are its points (width 1, one each).
    loss = curves["alone"]["val_loss"]
    got = (loss["width"], loss["step"], loss["last"], loss["n"])
    assert got == (1, [5, 10], [0.4, 0.2], [1, 1])
    assert loss["min"] == loss["max"] == loss["last"]
    assert curves["sw/trial-000"]["val_accuracy"]["last"] == [0.05, 0.1, 0.15]
    assert curves["alone"]["train_loss"]["step"] == [10]
    assert client.get("/api/compare/curves?run=../etc").status_code == 400
    assert client.get("/api/compare/curves?run=sw").status_code == 404
    # A zoom's window: that run's steps only, raw (as the run page's /series window).
    zoomed = client.get("/api/compare/curves?run=sw/trial-000&lo=8&hi=15").json()
    window = zoomed["sw/trial-000"]["val_loss"]
    assert (window["raw"], window["origin"], window["step"]) == (True, 8, [10, 15])
    assert client.get("/api/compare/curves?run=alone&lo=9&hi=3").status_code == 400
    page = client.get("/compare?run=alone")
    assert page.status_code == 200 and 'value="sw/trial-000"' in page.text
    assert client.get("/sweeps").status_code == 200


def _sweep_folder(project, name, states):
    """A sweep folder as `trainforge sweep` leaves it: its request, a journal whose trials
    ended in `states`, and a run folder per trial (run.json and metrics)."""
    from optuna.trial import TrialState

    from trainforge.sweep.cli import prepare, split_args
    from trainforge.sweep.study import SweepFolder, open_study

    space = project / "space.yaml"
    space.write_text("params:\n  optimizer.learning_rate: {log_uniform: [1.0e-4, 1.0e-2]}\n")
    argv = [str(project / "config" / "vit_digits.yaml"), "--space", str(space),
            "--trials", str(len(states)), "--name", name, "--max_steps", "10"]  # fmt: skip
    request = prepare(*split_args(argv))
    folder = SweepFolder(project / "runs" / name)
    folder.write_request(request)
    study = open_study(folder, request)
    for number, state in enumerate(states):
        trial = study.ask()
        if state == "COMPLETE":
            study.tell(trial, 0.9)
        else:
            study.tell(trial, state=getattr(TrialState, state))
        _run(folder.trial_dir(number), [5, 10])
    return folder


def _queued_sweep(client, name, status):
    from trainforge.web.db import RunRecord

    record = RunRecord(id=name, task="sweep", config="config/vit_digits.yaml", profile="auto",
                       argv=[], form={}, status=status, message="finished")  # fmt: skip
    client.app.state.trainforge.registry.save(record)


def test_a_sweep_whose_trials_all_failed_says_so_and_its_trials_open_as_runs(client, tmp_path):
    _sweep_folder(tmp_path, "all-failed", ["FAIL", "FAIL"])
    _queued_sweep(client, "all-failed", "completed")  # its process ended normally
    sweep = client.get("/api/sweeps/all-failed").json()
    assert (sweep["status"], sweep["message"]) == ("failed", "no trial completed")
    assert [t["page"] for t in sweep["trials"]] == [
        "/runs/all-failed/trial-000", "/runs/all-failed/trial-001",
    ]  # fmt: skip
    assert {"name": "all-failed", "status": "failed", "page": "/sweeps/all-failed"} in (
        client.get("/api/sweeps").json()
    )
    # Under Runs: the sweep row opens the sweep's page, with the same status.
    row = {r["id"]: r for r in client.get("/api/runs").json()}["all-failed"]
    assert (row["status"], row["message"], row["page"]) == (
        "failed", "no trial completed", "/sweeps/all-failed",
    )  # fmt: skip
    assert 'href="/sweeps/all-failed"' in client.get("/runs").text
    moved = client.get("/runs/all-failed", follow_redirects=False)
    assert moved.status_code == 303 and moved.headers["location"] == "/sweeps/all-failed"
    page = client.get("/sweeps/all-failed")
    assert page.status_code == 200 and 'data-sweep="all-failed"' in page.text
    assert client.get("/sweeps/no-such-sweep").status_code == 404
    # Each trial is a run page, live from its folder like any run.
    trial_page = client.get("/runs/all-failed/trial-001")
    assert trial_page.status_code == 200 and 'href="/sweeps/all-failed"' in trial_page.text
    trial = client.get("/api/runs/all-failed/trials/trial-001").json()
    assert trial["id"] == "all-failed/trial-001" and trial["step"] == 10
    assert trial["latest"]["val"]["accuracy"] == 0.1 and not trial["resumable"]
    assert trial["api"] == "/api/runs/all-failed/trials/trial-001"
    records = client.get("/api/runs/all-failed/trials/trial-001/metrics").json()["records"]
    assert [r["step"] for r in records] == [5, 10, 10]
    assert client.get("/api/runs/all-failed/trials/trial-001/log").json() == {"lines": []}
    assert client.get("/api/runs/all-failed/trials/trial-007").status_code == 404
    assert client.get("/api/runs/all-failed/trials/report").status_code == 400
    assert client.get("/runs/all-failed/trial-007").status_code == 404


def test_a_sweep_with_a_completed_trial_keeps_its_status(client, tmp_path):
    _sweep_folder(tmp_path, "one-done", ["FAIL", "COMPLETE"])
    _queued_sweep(client, "one-done", "completed")
    assert client.get("/api/sweeps/one-done").json()["status"] == "completed"
    _sweep_folder(tmp_path, "from-terminal", ["PRUNED", "FAIL"])  # not started here
    listed = {s["name"]: s["status"] for s in client.get("/api/sweeps").json()}
    assert listed == {"one-done": "completed", "from-terminal": "failed"}
