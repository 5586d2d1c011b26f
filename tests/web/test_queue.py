"""The web app's queue: one training at a time by default, the rest queued with their place,
cancel, the next run starting when one ends, and a setting for more at once."""

from __future__ import annotations

from pathlib import Path

from fakes.web import run_form, wait_for


def status(client, run_id: str) -> dict:
    return client.get(f"/api/runs/{run_id}").json()


def test_three_runs_one_runs_two_queue_cancel_and_the_next_starts(make_client, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "100000")  # runs until stopped
    client = make_client()
    views = [client.post("/api/runs", json=run_form(output_name=f"q{i}")) for i in range(3)]
    assert [v.status_code for v in views] == [201, 201, 201], views[-1].text
    assert [v.json()["status"] for v in views] == ["running", "queued", "queued"]
    assert [v.json()["position"] for v in views] == [None, 1, 2]
    assert status(client, "q2")["pid"] is None

    cancelled = client.post("/api/runs/q1/cancel")
    assert cancelled.status_code == 202 and cancelled.json()["status"] == "cancelled"
    assert status(client, "q2")["position"] == 1  # moved up
    assert client.post("/api/runs/q1/cancel").status_code == 409  # not queued any more

    wait_for(lambda: status(client, "q0")["num_records"] >= 1)
    client.post("/api/runs/q0/stop")  # the first ends ...
    wait_for(lambda: status(client, "q0")["status"] == "stopped")
    started = wait_for(lambda: (v := status(client, "q2"))["status"] == "running" and v)
    assert started["pid"] and started["position"] is None  # ... and the next starts
    assert status(client, "q1")["status"] == "cancelled"  # a cancelled run never starts
    assert started["attempts"] == 1


def test_stop_on_a_queued_run_cancels_it(make_client, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "100000")
    client = make_client()
    client.post("/api/runs", json=run_form(output_name="first"))
    client.post("/api/runs", json=run_form(output_name="waiting"))
    response = client.post("/api/runs/waiting/stop")
    assert response.status_code == 202 and response.json()["status"] == "cancelled"
    page = client.get("/runs/first")
    assert page.status_code == 200


def test_a_queued_run_page_offers_cancel_and_its_place(make_client, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "100000")
    client = make_client()
    client.post("/api/runs", json=run_form(output_name="first"))
    client.post("/api/runs", json=run_form(output_name="second"))
    html = client.get("/runs/second").text
    assert ">Cancel</button>" in html and "place 1 in the queue" in html


def test_more_in_parallel_and_each_child_gets_a_thread_budget(
    make_client, monkeypatch, tmp_path: Path
):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "100000")
    monkeypatch.delenv("TRAINFORGE_THREADS", raising=False)
    dump = tmp_path / "env.txt"
    monkeypatch.setenv("FAKE_TRAINER_ENV_DUMP", str(dump))
    client = make_client(max_parallel_runs=2)
    views = [client.post("/api/runs", json=run_form(output_name=f"p{i}")).json() for i in range(3)]
    assert [v["status"] for v in views] == ["running", "running", "queued"]
    wait_for(dump.is_file)
    assert "TRAINFORGE_THREADS" in wait_for(lambda: dump.read_text()).split()
