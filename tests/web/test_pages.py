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


def model_link_hidden(page: str) -> bool:
    tag = re.search(r'<a id="model-link"[^>]*>', page)
    assert tag, "the run page has no model link for a causal-lm run"
    return " hidden" in tag.group(0)


def telemetry_note(page: str) -> str:
    return re.search(r'<td id="telemetry-note">(.*?)</td>', page).group(1)


def start_causal_lm(client, name: str):
    values = client.get("/api/train/defaults").json()["values"]
    form = {**values, "base_model": "base-gpt2", "output_name": name, "profile": "cpu"}
    response = client.post("/api/runs", json=form)
    assert response.status_code == 201, response.text
    return response.json()


def test_a_failed_run_links_no_model_and_says_why_it_has_no_telemetry(make_client, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_CRASH_AT", "2")
    client = make_client(fixture=JETSON)
    assert start_causal_lm(client, "lm-fails")["output_model"] == "lm-fails"
    view = wait_for(
        lambda: (v := client.get("/api/runs/lm-fails").json())["status"] == "failed" and v
    )
    assert view["model_ready"] is False
    assert view["telemetry_note"] == "The run failed before it recorded telemetry."
    page = client.get("/runs/lm-fails").text
    assert model_link_hidden(page)
    assert telemetry_note(page) == "The run failed before it recorded telemetry."
    assert "No telemetry records" not in page

    monkeypatch.delenv("FAKE_TRAINER_CRASH_AT")
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "3")
    start_causal_lm(client, "lm-done")
    wait_for(lambda: client.get("/api/runs/lm-done").json()["status"] == "completed")
    assert client.get("/api/runs/lm-done").json()["model_ready"] is True
    assert not model_link_hidden(client.get("/runs/lm-done").text)


def test_a_waiting_run_says_it_waits_not_that_telemetry_is_off(make_client, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "100000")  # runs until stopped
    client = make_client()
    first = client.post("/api/runs", json=run_form(output_name="first")).json()
    queued = client.post("/api/runs", json=run_form(output_name="second")).json()
    assert (first["status"], queued["status"]) == ("running", "queued")
    assert telemetry_note(client.get("/runs/second").text) == "Waiting for the run to start."
    assert telemetry_note(client.get("/runs/first").text) == (
        "Waiting for the first telemetry sample."
    )
    for page in (client.get("/runs/first").text, client.get("/runs/second").text):
        assert "No telemetry records" not in page and "set hardware.telemetry" not in page


def test_telemetry_off_is_said_once_the_run_config_says_so(make_client, project):
    from trainforge.web.run_files import telemetry_note as note

    folder = project / "runs" / "quiet"
    folder.mkdir(parents=True)
    (folder / "config.resolved.yaml").write_text("hardware:\n  telemetry: false\n")
    state = make_client().app.state.trainforge
    assert state.telemetry.get(state.settings.run_folder("quiet")) is False
    assert note("completed", False).endswith("(set hardware.telemetry=true).")
    assert note("completed", True) == "The run ended before its first telemetry sample."


def test_favicon_is_served_and_linked_even_before_sign_in(make_client):
    client = make_client(token="s3cret")
    icon = client.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert icon.text.startswith("<svg") and "</svg>" in icon.text
    assert client.get("/static/favicon.svg").status_code == 200
    login = client.get("/login").text
    assert '<link rel="icon" href="/static/favicon.svg"' in login
    assert client.get("/runs").status_code == 401  # the rest still needs the token
    page = client.get("/runs", headers={"Authorization": "Bearer s3cret"}).text
    assert '<link rel="icon" href="/static/favicon.svg"' in page
