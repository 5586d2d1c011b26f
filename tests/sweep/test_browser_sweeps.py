"""The Sweeps page and Compare runs in a real headless Chromium (Debian's chromium through
Playwright, as tests/web/test_browser.py): start a sweep from the page (it goes through the
training queue), watch its trials finish with their validation curves drawn, stop a second
sweep from the page, and overlay trials' curves in Compare runs."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from fakes.sweeps import REPO, TINY
from fakes.web import CPU, serving

pytestmark = pytest.mark.browser
ARTIFACTS = Path(os.environ.get("TRAINFORGE_TEST_ARTIFACTS", REPO / "build" / "test-artifacts"))
SPACE = """params:
  optimizer.learning_rate: {log_uniform: [1.0e-3, 3.0e-3]}
  model.embedding_dim: {choice: [32, 64]}
"""


def _chromium() -> str:
    for candidate in (os.environ.get("TRAINFORGE_CHROMIUM"), "/usr/lib/chromium/chromium",
                      "/usr/bin/chromium", "chromium"):  # fmt: skip
        found = shutil.which(candidate) if candidate else None
        if found:
            return found
    pytest.fail("no Chromium found: run `make test-browser` (installs Debian's chromium)")


@pytest.fixture
def server(tmp_path: Path):
    shutil.copytree(REPO / "config", tmp_path / "config")
    with serving(tmp_path, CPU) as url:
        yield url, tmp_path


def _start(page, name: str, trials: int, args: list[str]) -> None:
    page.locator("#sweep-start summary").click()
    page.locator("#sw-config").select_option("config/vit_digits.yaml")
    page.locator("#sw-name").fill(name)
    page.locator("#sw-trials").fill(str(trials))
    page.locator("#sw-args").fill(" ".join(args))
    page.locator("#sw-space").fill(SPACE)
    page.get_by_role("button", name="Start sweep").click()


def _zooms_to_raw_points(page, canvas: str) -> None:
    """A drag across the middle of chart `canvas` asks the server for that step window of
    every curve (`/api/compare/curves?...&lo=&hi=`) and draws its raw points."""
    box = page.locator(f"#{canvas}").bounding_box()
    window = lambda r: "/api/compare/curves?" in r.url and "&lo=" in r.url and "&hi=" in r.url  # noqa: E731
    with page.expect_response(window) as answer:
        page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + box["height"] / 2)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] * 0.8, box["y"] + box["height"] / 2, steps=4)
        page.mouse.up()
    assert answer.value.ok
    page.wait_for_function(f"() => document.getElementById('{canvas}').dataset.detail === 'raw'")


def test_sweeps_page_and_compare_runs_in_a_real_browser(server):
    from playwright.sync_api import expect, sync_playwright

    url, project = server
    shots = ARTIFACTS / "browser"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(30_000)
        page.goto(f"{url}/sweeps")
        # A bad space is refused on the page, one line per problem.
        page.locator("#sweep-start summary").click()
        page.locator("#sw-space").fill("params:\n  model.embeding_dim: {choice: [32]}\n")
        page.get_by_role("button", name="Start sweep").click()
        expect(page.locator("#sw-errors li")).to_contain_text("did you mean model.embedding_dim")
        page.locator("#sweep-start summary").click()  # closed again; _start opens it

        _start(page, "web-sweep", 3, TINY)
        rows = page.locator("#sweep-trials tbody tr")
        expect(page.locator("#sweep-title")).to_contain_text("web-sweep")
        page.wait_for_function(
            "() => [...document.querySelectorAll('#sweep-trials tbody tr')]"
            ".filter(r => ['COMPLETE', 'PRUNED'].includes(r.dataset.state)).length === 3",
            timeout=600_000,
        )
        expect(rows).to_have_count(3)
        page.wait_for_function(
            "() => Number(document.getElementById('sweep-curves').dataset.points) >= 12"
        )  # 3 trials x 4 validations, overlaid
        expect(page.locator("#sweep-message")).to_contain_text("completed")
        page.screenshot(path=str(shots / "sweeps-page.png"))
        _zooms_to_raw_points(page, "sweep-curves")

        # Compare runs: two trials' curves on the same axes.
        page.get_by_role("link", name="Compare these trials").click()
        expect(page.locator("#compare-runs input[value='web-sweep/trial-000']")).to_be_checked()
        page.wait_for_function(
            "() => Number(document.getElementById('compare-loss').dataset.points) >= 12"
            " && Number(document.getElementById('compare-metric').dataset.points) >= 12"
        )
        page.locator("#compare-runs input[value='web-sweep/trial-002']").uncheck()
        page.wait_for_function(
            "() => Number(document.getElementById('compare-loss').dataset.points) === 8"
        )
        page.screenshot(path=str(shots / "compare-runs.png"))
        _zooms_to_raw_points(page, "compare-train")

        # A long sweep, stopped from the page: its trial saves a checkpoint.
        page.goto(f"{url}/sweeps")
        long_args = [a if a != "20" else "5000" for a in TINY]
        _start(page, "long-sweep", 2, long_args)
        expect(page.locator("#sweep-title")).to_contain_text("long-sweep")
        trial = project / "runs" / "long-sweep" / "trial-000" / "metrics.jsonl"
        deadline = time.monotonic() + 300
        while not (trial.exists() and trial.read_text().count("\n") >= 2):
            assert time.monotonic() < deadline, "the long sweep's trial did not start training"
            time.sleep(0.5)
        page.locator("#sweep-stop").click()
        expect(page.locator("#sweep-message")).to_contain_text("stopped", timeout=120_000)
        checkpoints = project / "runs" / "long-sweep" / "trial-000" / "checkpoints"
        assert (checkpoints / "checkpoint_interrupted").is_dir()
        # Resume queues the same command: the sweep continues, the trial from its checkpoint.
        page.locator("#sweep-resume").click()
        expect(page.locator("#sweep-message")).to_contain_text("running")
        log = project / "runs" / ".trainforge-web" / "logs" / "long-sweep.log"
        deadline = time.monotonic() + 300
        while "trial-000: resuming" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        page.locator("#sweep-stop").click()
        expect(page.locator("#sweep-message")).to_contain_text("stopped", timeout=120_000)
        browser.close()


def test_a_sweep_under_runs_opens_its_page_and_each_trial_its_run_page(server):
    """Runs list -> the sweep's page -> a trial's run page, on a sweep the app ran."""
    import json
    import urllib.request

    from playwright.sync_api import expect, sync_playwright

    url, project = server
    body = {"config": "config/vit_digits.yaml", "name": "listed-sweep", "trials": 1,
            "space": SPACE, "args": TINY}  # fmt: skip
    started = urllib.request.urlopen(urllib.request.Request(
        f"{url}/api/sweeps", data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"}), timeout=300)  # fmt: skip
    assert started.status == 201
    deadline = time.monotonic() + 600  # a hung sweep, not speed
    while json.load(urllib.request.urlopen(f"{url}/api/sweeps/listed-sweep"))["status"] != (
        "completed"
    ):
        assert time.monotonic() < deadline, "the sweep did not complete"
        time.sleep(1)
    records = (project / "runs" / "listed-sweep" / "trial-000" / "metrics.jsonl").read_text()
    val = [r for r in map(json.loads, records.splitlines()) if r.get("split") == "val"][-1]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(60_000)
        page.goto(f"{url}/runs")
        row = page.locator('#runs-table tr[data-run="listed-sweep"]')
        expect(row).to_contain_text("completed")
        row.get_by_role("link", name="listed-sweep").click()
        expect(page).to_have_url(f"{url}/sweeps/listed-sweep")
        expect(page.locator("#sweep-title")).to_contain_text("listed-sweep: 1 of 1 trials")
        page.locator("#sweep-trials").get_by_role("link", name="trial-000").click()
        expect(page).to_have_url(f"{url}/runs/listed-sweep/trial-000")
        expect(page.locator("#run-status")).to_have_text("completed")
        expect(page.locator("#trial-of")).to_contain_text("listed-sweep")
        expect(page.locator("#s-step")).to_have_text(str(val["step"]))
        expect(page.locator("#s-val")).to_have_text(f"{val['accuracy'] * 100:.2f} %")
        page.locator("#trial-of").get_by_role("link", name="listed-sweep").click()
        expect(page).to_have_url(f"{url}/sweeps/listed-sweep")
        browser.close()
