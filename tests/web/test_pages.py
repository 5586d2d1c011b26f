"""The server-rendered pages: sidebar, Runs, a run page, Models, System with live telemetry."""

from __future__ import annotations

import json
import re

from fakes.web import JETSON, run_form, wait_for


def test_every_page_has_the_sidebar_and_the_train_dialog(make_client):
    client = make_client()
    for path in ("/runs", "/models", "/system"):
        page = client.get(path)
        assert page.status_code == 200
        for item in ("Train Model", 'href="/runs"', 'href="/models"', 'href="/system"'):
            assert item in page.text, (path, item)
        assert 'id="train-dialog"' in page.text and "Start Training" in page.text
    assert client.get("/", follow_redirects=False).headers["location"] == "/runs"
    opened = client.get("/train")
    assert opened.status_code == 200 and 'data-open="1"' in opened.text


def test_runs_and_run_pages_show_a_finished_run(make_client, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "4")
    client = make_client()
    client.post("/api/runs", json=run_form(output_name="page-run"))
    wait_for(lambda: client.get("/api/runs/page-run").json()["status"] == "completed")
    runs = client.get("/runs").text
    assert 'href="/runs/page-run"' in runs and "status-completed" in runs
    page = client.get("/runs/page-run").text
    embedded = re.search(r'<script id="run-data" type="application/json">(.*?)</script>', page)
    data = json.loads(embedded.group(1))
    assert data["id"] == "page-run" and data["status"] == "completed" and data["step"] == 4
    for element in ("chart-loss", "chart-accuracy", "chart-lr", "stop-button", "resume-button"):
        assert f'id="{element}"' in page
    assert client.get("/runs/no-such-run").status_code == 404


def test_system_page_shows_platform_profile_and_live_telemetry(make_client):
    client = make_client(fixture=JETSON)
    page = client.get("/system").text
    assert "Jetson" in page and "jetson-orin" in page and "docs/jetson_training.md" in page
    data = wait_for(lambda: client.get("/api/system").json()["telemetry"]["readings"] or None)
    assert data["ram_total_mib"] > 0 and "cpu_util_pct" in data
    notes = client.get("/api/system").json()["telemetry"]["notes"]
    assert any("tegrastats not found" in note for note in notes)  # recorded board, no binary


def test_user_text_is_escaped_in_pages(make_client, monkeypatch, project):
    monkeypatch.setenv("FAKE_TRAINER_CRASH_AT", "1")
    client = make_client()
    client.post("/api/runs", json=run_form())
    wait_for(lambda: client.get("/api/runs/digits-web").json()["status"] == "failed")
    client.app.state.trainforge.registry.update("digits-web", message="<script>alert(1)</script>")
    page = client.get("/runs/digits-web").text
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page
