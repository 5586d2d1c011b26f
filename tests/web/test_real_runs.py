"""The real `trainforge train` under the web app: a tiny digits run started through the API,
stopped (SIGINT -> checkpoint_interrupted, exit 130), resumed to the end, and a crash."""

from __future__ import annotations

import json
import os
import signal

import pytest

from fakes.web import TINY_VIT, run_form, wait_for
from trainforge.runfolder import RunFolder

pytestmark = pytest.mark.slow


def status(client, run_id):
    return client.get(f"/api/runs/{run_id}").json()


def done(client, run_id):
    def check():
        view = status(client, run_id)
        return view if view["status"] not in ("running", "stopping") else None

    return check


def test_real_run_stops_with_a_checkpoint_and_resumes_to_the_end(make_client, project):
    client = make_client(fake=False)
    overrides = [*TINY_VIT, "training.max_steps=1500", "logging.logging_steps=10"]
    response = client.post("/api/runs", json=run_form(overrides=overrides))
    assert response.status_code == 201, response.text
    wait_for(lambda: status(client, "digits-web")["num_records"] >= 2, timeout=600)
    client.post("/api/runs/digits-web/stop")
    view = wait_for(done(client, "digits-web"), timeout=600)
    log = "\n".join(client.get("/api/runs/digits-web/log").json()["lines"])
    assert view["status"] == "stopped" and view["exit_code"] == 130, log
    folder = RunFolder(project / "runs" / "digits-web")
    assert (folder.checkpoints / "checkpoint_interrupted").is_dir() and folder.is_run()
    assert view["total_steps"] == 1500 and 0 < view["step"] < 1500
    stopped_at = view["step"]

    assert client.post("/api/runs/digits-web/resume").status_code == 202
    view = wait_for(done(client, "digits-web"), timeout=600)
    assert view["status"] == "completed", view["message"]
    lines = client.get("/api/runs/digits-web/log", params={"lines": 1000}).json()["lines"]
    # The second attempt is the CLI's own resume command, the recipe read from run.json.
    assert [line for line in lines if line.startswith("$ ")][-1] == (
        "$ trainforge train --resume runs/digits-web"
    )
    assert "resumed from runs/digits-web/checkpoints/checkpoint_interrupted" in "\n".join(lines)
    summary = json.loads(folder.summary.read_text())
    assert summary["global_step"] == 1500 and not summary["interrupted"]
    steps = [r["step"] for r in client.get("/api/runs/digits-web/metrics").json()["records"]]
    assert max(steps) == 1500 and any(s > stopped_at for s in steps)
    assert view["latest"]["val"]["accuracy"] > 0


def test_real_run_killed_mid_training_is_failed_and_the_server_carries_on(make_client):
    client = make_client(fake=False)
    overrides = [*TINY_VIT, "training.max_steps=100000", "logging.logging_steps=10"]
    pid = client.post("/api/runs", json=run_form(overrides=overrides)).json()["pid"]
    wait_for(lambda: status(client, "digits-web")["num_records"] >= 1, timeout=600)
    os.kill(pid, signal.SIGKILL)
    view = wait_for(done(client, "digits-web"), timeout=600)
    assert view["status"] == "failed" and view["message"] == "killed by SIGKILL"
    assert client.get("/api/runs").status_code == 200
