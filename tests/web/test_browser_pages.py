"""The pages' finish in a real headless Chromium, with the stand-in trainer behind an app
served in this process: every page loads without a failed request (the favicon included),
a run started from the command line is listed under Runs, a queued run's Telemetry table
says it waits (and follows the run as it starts and ends), and a failed causal-lm run links
no model. The real trainer's run page (Output pane, telemetry, metrics) is in test_browser.py.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from fakes.web import CPU, run_form, wait_for
from web.test_browser import chromium, free_port

pytestmark = pytest.mark.browser
FOLDER_TRAINER = [sys.executable, str(Path(__file__).resolve().parent / "folder_trainer.py")]


def serve_project(project: Path):
    """The app on the stand-in trainer, served in this process on a free port: yields (its
    URL, its state); stops the runs it still has and the server at the end."""
    import uvicorn

    from trainforge.web.app import create_app
    from trainforge.web.settings import WebSettings

    settings = WebSettings(
        root=project, fixture=CPU, train_command=FOLDER_TRAINER, poll_interval_s=0.1
    )
    app = create_app(settings)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=120)
    yield f"http://127.0.0.1:{port}", app.state.trainforge
    state = app.state.trainforge
    for record in state.registry.active():
        state.runner.stop(record.id)
    server.should_exit = True
    thread.join(timeout=60)


@pytest.fixture
def served(project: Path):
    yield from serve_project(project)


def watch_failures(page) -> list[str]:
    """Responses of 400 and above, and requests that failed (an event stream that leaving
    the page aborts is not a failure)."""
    failures: list[str] = []

    def failed(request) -> None:
        if request.failure != "net::ERR_ABORTED":
            failures.append(f"{request.url} failed: {request.failure}")

    page.on("requestfailed", failed)
    page.on("response", lambda r: failures.append(f"{r.url} {r.status}") if r.status >= 400 else 0)
    return failures


def test_runs_page_lists_command_line_runs_and_loads_its_icon(project, served, monkeypatch):
    monkeypatch.setenv("FAKE_TRAINER_STEPS", "3")
    args = ["config/vit_digits.yaml", "--set", 'output.run_name="from-terminal"']
    done = subprocess.run([*FOLDER_TRAINER, *args], cwd=project, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stdout
    url, _ = served
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), headless=True)
        page = browser.new_page()
        page.set_default_timeout(30_000)
        failures = watch_failures(page)
        with page.expect_response(lambda r: "favicon" in r.url) as icon:
            page.goto(f"{url}/runs")
        assert icon.value.status == 200 and icon.value.header_value("content-type").startswith(
            "image/svg+xml"
        )
        row = page.locator('tr[data-run="from-terminal"]')
        expect(row).to_contain_text("(command line)")
        expect(row.locator(".status")).to_have_text("completed")
        row.get_by_role("link", name="from-terminal").click()
        expect(page.locator("#run-status")).to_have_text("completed")
        expect(page.locator("#s-step")).to_have_text("3")
        expect(page.locator("#stop-button")).to_be_hidden()
        page.goto(f"{url}/system")
        expect(page.locator("#telemetry")).to_contain_text("cpu_util_pct")
        browser.close()
    assert failures == []


def test_run_page_telemetry_note_follows_the_run_and_a_failed_run_links_no_model(
    served, monkeypatch
):
    url, state = served
    from playwright.sync_api import expect, sync_playwright

    monkeypatch.setenv("FAKE_TRAINER_STEPS", "100000")  # runs until stopped
    for name in ("first", "waiting"):
        assert httpx.post(f"{url}/api/runs", json=run_form(output_name=name)).status_code == 201
    note = "#telemetry-note"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), headless=True)
        page = browser.new_page()
        page.set_default_timeout(60_000)
        failures = watch_failures(page)
        page.goto(f"{url}/runs/waiting")
        expect(page.locator("#run-status")).to_have_text("queued")
        expect(page.locator(note)).to_have_text("Waiting for the run to start.")
        httpx.post(f"{url}/api/runs/first/stop")  # the queued run starts ...
        expect(page.locator("#run-status")).to_have_text("running")
        expect(page.locator(note)).to_have_text("Waiting for the first telemetry sample.")
        expect(page.locator("#s-step")).not_to_have_text("0")
        page.get_by_role("button", name="Stop").click()  # ... and ends without telemetry
        expect(page.locator("#run-status")).to_have_text("stopped")
        expect(page.locator(note)).to_have_text("The run ended before its first telemetry sample.")
        expect(page.locator("#telemetry")).not_to_contain_text("No telemetry records")

        monkeypatch.setenv("FAKE_TRAINER_CRASH_AT", "2")
        config = "config/jetson_training.json"
        values = httpx.get(f"{url}/api/train/defaults", params={"config": config}).json()
        form = {**values["values"], "base_model": "base-gpt2", "output_name": "lm-fails"}
        started = httpx.post(f"{url}/api/runs", json={**form, "profile": "cpu"})
        assert started.status_code == 201, started.text
        page.goto(f"{url}/runs/lm-fails")
        expect(page.locator("#run-status")).to_have_text("failed")
        expect(page.locator("#model-link")).to_have_count(1)
        expect(page.locator("#model-link")).to_be_hidden()
        expect(page.locator(note)).to_have_text("The run failed before it recorded telemetry.")
        assert not (state.settings.models_path / "lm-fails").exists()
        browser.close()
    assert failures == []
