"""The web app's cluster targets without a browser: the dialog's Target fields are judged
beside the fields (for the target's nodes and GPUs, not this machine's), and the server never
waits on SSH: a run submitted to a login node that accepts the connection and then says
nothing is answered at once, the pages keep answering while that connection hangs, and when
it drops the run fails with the one line saying why."""

from __future__ import annotations

import socket
import time

import pytest
import yaml
from fastapi.testclient import TestClient

from fakes.web import CPU, REPO

FORM = {
    "config": "config/vit_digits.yaml", "output_name": "on-cluster", "profile": "auto",
    "overrides": ["training.max_steps=5"], "target": "hpc", "nodes": 1, "gpus_per_node": 0,
    "time": "00:10:00",
}  # fmt: skip


@pytest.fixture
def silent_node():
    """A TCP port that accepts connections and never speaks (a hung login node)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.settimeout(120)
        yield listener


@pytest.fixture
def client(tmp_path, monkeypatch, silent_node):
    from trainforge.web.app import create_app
    from trainforge.web.settings import WebSettings

    project = tmp_path / "project"
    (project / "config").mkdir(parents=True)
    (project / "config/vit_digits.yaml").write_text((REPO / "config/vit_digits.yaml").read_text())
    targets = tmp_path / "targets.yaml"
    trust = ["StrictHostKeyChecking=no", f"UserKnownHostsFile={tmp_path}/known_hosts"]
    port = silent_node.getsockname()[1]
    hpc = {"host": "127.0.0.1", "port": port, "user": "nobody", "ssh_options": trust}
    targets.write_text(yaml.safe_dump({"targets": {"hpc": hpc}}), encoding="utf-8")
    monkeypatch.setenv("TRAINFORGE_JOBS", str(tmp_path / "jobs" / "jobs.json"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(project)  # the server runs in its project folder
    settings = WebSettings(root=project, fixture=CPU, targets_file=targets)
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_target_fields_are_judged_beside_the_fields_for_the_targets_nodes(client):
    listed = client.get("/api/targets").json()
    assert [t["name"] for t in listed] == ["local", "hpc"]
    errors = client.post(
        "/api/targets/runs", json={**FORM, "target": "nope", "time": "ten"}
    ).json()["errors"]
    assert "nope is not a cluster target (known: hpc)" in errors["target"][0]
    assert "--time 'ten' is not HH:MM:SS" in errors["time"][0]
    # jetson-orin trains in fp16: refused for a CPU job, beside the profile that asks for it.
    errors = client.post("/api/targets/runs", json={**FORM, "profile": "jetson-orin"}).json()
    assert "training.precision = 'fp16'" in errors["errors"]["profile"][0], errors
    assert client.get("/api/runs").json() == []  # nothing was started or recorded


def test_the_server_never_waits_on_ssh(client, silent_node):
    started = client.post("/api/targets/runs", json=FORM)
    assert started.status_code == 201, started.text
    assert (started.json()["status"], started.json()["message"]) == (
        "queued",
        "submitting to hpc",
    )
    connection, _ = silent_node.accept()  # ssh has connected and waits for the banner now
    try:
        for _ in range(3):  # the pages answer while it waits
            assert client.get("/runs").status_code == 200
            runs = client.get("/api/runs").json()
            assert [(r["id"], r["status"]) for r in runs] == [("on-cluster", "queued")]
        assert client.get("/api/targets/runs").json()["on-cluster"]["target"] == "hpc"
    finally:
        connection.close()  # the login node drops the connection
    deadline = time.monotonic() + 120  # a hung submission thread, not speed
    while (run := client.get("/api/runs/on-cluster").json())["status"] == "queued":
        assert time.monotonic() < deadline, run
        time.sleep(0.2)
    assert run["status"] == "failed", run
    assert "target hpc:" in run["message"] and "127.0.0.1" in run["message"], run


def test_the_sweeps_page_starts_a_sweep_on_a_target_as_a_job_array(client, silent_node):
    sweep = {
        "config": "config/vit_digits.yaml", "name": "arr", "trials": 4, "pruner": "none",
        "space": "params:\n  optimizer.learning_rate: {log_uniform: [1.0e-3, 3.0e-3]}\n",
        "args": ["--max_steps", "20"], "target": "hpc", "parallel": 2, "time": "soon",
    }  # fmt: skip
    refused = client.post("/api/sweeps", json=sweep)
    assert refused.status_code == 422 and "--time 'soon'" in refused.json()["errors"][0]
    assert "hpc" in client.get("/sweeps").text  # the form's Target list
    started = client.post("/api/sweeps", json={**sweep, "time": "00:10:00"})
    assert started.status_code == 201, started.text
    assert started.json() == {"name": "arr", "status": "queued", "target": "hpc"}
    connection, _ = silent_node.accept()  # the submission waits on the login node ...
    try:
        record = client.get("/api/runs/arr").json()  # ... and the app answers meanwhile
        assert (record["task"], record["status"]) == ("sweep", "queued")
        assert client.get("/api/targets/runs").json()["arr"]["target"] == "hpc"
    finally:
        connection.close()
