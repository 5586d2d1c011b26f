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
    assert curves["alone"]["val_loss"] == [[5, 0.4], [10, 0.2]]
    assert curves["sw/trial-000"]["val_accuracy"] == [[5, 0.05], [10, 0.1], [15, 0.15]]
    assert curves["alone"]["train_loss"] == [[10, 1.5]]
    assert client.get("/api/compare/curves?run=../etc").status_code == 400
    assert client.get("/api/compare/curves?run=sw").status_code == 404
    page = client.get("/compare?run=alone")
    assert page.status_code == 200 and 'value="sw/trial-000"' in page.text
    assert client.get("/sweeps").status_code == 200
