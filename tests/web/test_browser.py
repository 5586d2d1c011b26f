"""The Jetson guide's flow in a real headless Chromium (Playwright driving Debian's chromium,
which `make test-browser` installs): open the app on a recorded Jetson (fixture root), click
Train Model, check the autofill, see a field error, start a tiny causal-lm run with the real
`trainforge train`, watch the chart update, stop it, resume it, and see the new model appear
in the Models list without a reload. The run page's learning rate, samples/s, data-wait
share and telemetry must show the values of the run's own metrics.jsonl. Screenshots go to
build/test-artifacts/browser/ and are checked to be PNG files written by this test.

This machine has no GPU, so the run uses the cpu profile: the dialog's profile is switched
from the detected jetson-orin (fp16) to cpu, as a user on a CPU would.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakes.web import JETSON, REPO, serving

pytestmark = pytest.mark.browser
ARTIFACTS = Path(os.environ.get("TRAINFORGE_TEST_ARTIFACTS", REPO / "build" / "test-artifacts"))
CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "/usr/bin/chromium", "chromium")
SCREENSHOTS = (
    "1-dialog-jetson-autofill.png", "2-dialog-field-error.png", "3-run-live-chart.png",
    "4-run-stopped.png", "5-run-completed.png", "6-models-refreshed.png",
)  # fmt: skip
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def chromium() -> str:
    configured = os.environ.get("TRAINFORGE_CHROMIUM")
    for candidate in ([configured] if configured else []) + list(CHROMIUM_CANDIDATES):
        found = shutil.which(candidate)
        if found:
            return found
    pytest.fail("no Chromium found: run `make test-browser` (installs Debian's chromium)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def jetson_project(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "config", tmp_path / "config")
    (tmp_path / "example_datasets").mkdir()
    shutil.copy(REPO / "example_datasets" / "jetson_training.json", tmp_path / "example_datasets")
    made = subprocess.run(
        [sys.executable, "-m", "trainforge", "models", "init", "tiny", "--arch", "gpt2",
         "--size", "tiny", "--corpus", "example_datasets/jetson_training.json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return tmp_path


@pytest.fixture
def server(jetson_project: Path):
    with serving(jetson_project, JETSON) as url:
        yield url


def last_records(run_dir: Path) -> tuple[int, dict, dict | None]:
    """A finished attempt's last step, last train record and last telemetry record (or None)."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r.get("split") == "train"]
    telemetry = [r for r in records if r.get("split") == "telemetry"]
    last_step = [r["step"] for r in records if r.get("step") is not None][-1]
    return last_step, train[-1], (telemetry[-1] if telemetry else None)


def shown_number(text: str) -> float:
    return float(text.replace("%", "").strip())


def assert_shown(page, expect, run_dir: Path) -> None:
    """The run page's numbers are those of the run's last records, to the digits run.js
    shows (3 significant for lr, 4 for samples/s, 0.1 % for the data-wait share)."""
    last_step, record, telemetry = last_records(run_dir)

    def close(text: str, value: float, digits: int) -> bool:
        unit = 10 ** (math.floor(math.log10(abs(value))) - digits + 1) if value else 1e-12
        return abs(shown_number(text) - value) <= unit / 2 * 1.000001

    expect(page.locator("#s-step")).to_have_text(str(last_step))  # the stream has caught up
    lr, samples = page.locator("#s-lr").inner_text(), page.locator("#s-samples").inner_text()
    wait = page.locator("#s-wait").inner_text()
    assert close(lr, record["lr"], 3), (lr, record)
    assert close(samples, record["samples_per_s"], 4), (samples, record)
    assert wait.endswith(" %") and abs(shown_number(wait) - record["data_wait_share"] * 100) <= 0.05
    assert telemetry is not None, "the run wrote no telemetry records (cpu profile: on)"
    # ram_total_mib does not change while the run trains; run.js shows 2 decimals at most.
    row = page.locator("#telemetry tr", has=page.locator("th", has_text="ram_total_mib"))
    expect(row.locator("td")).to_have_text(
        f"{telemetry['ram_total_mib']:.2f}".rstrip("0").rstrip(".")
    )


# True when `needle`'s last occurrence in the Output pane lies inside the pane's visible part,
# and the pane holds more than it shows (so following the newest lines was needed).
LOG_SHOWS = """(needle) => {
  const log = document.getElementById("run-log");
  const node = log.firstChild;
  const at = node ? node.textContent.lastIndexOf(needle) : -1;
  if (at < 0 || log.scrollHeight <= log.clientHeight) return false;
  const range = document.createRange();
  range.setStart(node, at);
  range.setEnd(node, at + needle.length);
  const line = range.getBoundingClientRect(), pane = log.getBoundingClientRect();
  return line.top >= pane.top && line.bottom <= pane.bottom + 1;
}"""
# Metrics of the causal-lm task: numbers beside the training stats, never telemetry.
TASK_METRICS = ("model_tflops", "tokens_per_s", "perplexity")


def assert_metrics_not_telemetry(page, expect) -> None:
    for key in TASK_METRICS:
        expect(page.locator("#telemetry th", has_text=key)).to_have_count(0)
    for key in ("tokens_per_s", "perplexity"):  # from the train records
        expect(page.locator(f'#more-metrics [data-metric="{key}"]')).to_be_visible()


def assert_screenshots(shots: Path, started: float) -> None:
    for name in SCREENSHOTS:
        path = shots / name
        assert path.is_file(), f"no screenshot {path}"
        data = path.read_bytes()
        assert len(data) > 1000 and data.startswith(PNG_SIGNATURE), path
        assert path.stat().st_mtime >= started, f"{path} is left over from an earlier run"


def test_jetson_flow_in_a_real_browser(server, jetson_project):
    from playwright.sync_api import expect, sync_playwright

    from trainforge.profiles import load_profile

    shots = ARTIFACTS / "browser"
    shots.mkdir(parents=True, exist_ok=True)
    started = time.time() - 1.0  # file times may be rounded down
    run_dir = jetson_project / "runs" / "jetson-tuned"
    config_notes = json.loads((jetson_project / "config/jetson_training.json").read_text())["notes"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(30_000)
        page.goto(f"{server}/runs")
        page.get_by_role("button", name="Train Model").click()
        dialog = page.locator("#train-dialog")
        expect(dialog).to_be_visible()
        # Autofill for the recorded Jetson: the guide's config, data set and defaults.
        expect(page.locator("#f-config")).to_have_value("config/jetson_training.json")
        expect(page.locator("#f-dataset")).to_have_value("example_datasets/jetson_training.json")
        expect(page.locator("#f-epochs")).to_have_value("1")
        expect(page.locator("#f-batch_size")).to_have_value("1")
        expect(page.locator("#f-learning_rate")).to_have_value("0.00025")
        expect(page.locator("#f-profile")).to_have_value("jetson-orin")
        # The profile's notes, the run config's notes and the guide's path, as the files say.
        notes = page.locator("#profile-notes")
        expect(notes.locator(".profile-note")).to_have_text(load_profile("jetson-orin").notes)
        expect(notes.locator(".config-note")).to_have_text(config_notes)
        expect(notes.locator(".guide code")).to_have_text("docs/jetson_training.md")
        expect(notes).to_contain_text("gradient checkpointing")
        expect(page.locator("#detected")).to_contain_text("Jetson")
        page.screenshot(path=str(shots / "1-dialog-jetson-autofill.png"))

        # A bad name is refused beside its field.
        page.locator("#f-output_name").fill("../escape")
        page.locator("#f-base_model").select_option("tiny")
        page.get_by_role("button", name="Start Training").click()
        expect(page.locator('.error[data-for="output_name"]')).to_contain_text("plain name")
        page.screenshot(path=str(shots / "2-dialog-field-error.png"))

        # No GPU here: switch to the cpu profile (the dialog reloads its defaults for it).
        page.locator("#f-profile").select_option("cpu")
        expect(page.locator('.error[data-for="output_name"]')).to_have_text("")
        page.locator("#f-base_model").select_option("tiny")
        page.locator("#f-output_name").fill("jetson-tuned")
        page.locator("#f-overrides").fill(
            "training.max_steps=120\nlogging.logging_steps=4\ntraining.num_threads=1\n"
            "evaluation.eval_steps=60\nhardware.telemetry_interval_s=0.5"
        )
        page.get_by_role("button", name="Start Training").click()
        page.wait_for_url(f"{server}/runs/jetson-tuned")
        expect(page.locator("#run-status")).to_have_text("running")

        chart = page.locator("#chart-loss")
        page.wait_for_function(
            "() => Number(document.getElementById('chart-loss').dataset.points) >= 2",
            timeout=180_000,
        )
        first = int(chart.get_attribute("data-points"))
        page.wait_for_function(
            f"() => Number(document.getElementById('chart-loss').dataset.points) > {first}"
        )
        for stat in ("#s-lr", "#s-samples", "#s-wait"):  # filled from the streamed records
            expect(page.locator(stat)).not_to_have_text("")
        page.screenshot(path=str(shots / "3-run-live-chart.png"))

        page.get_by_role("button", name="Stop").click()
        expect(page.locator("#run-status")).to_have_text("stopped", timeout=60_000)
        expect(page.locator("#run-message")).to_contain_text("checkpoint_interrupted saved")
        assert (jetson_project / "runs/jetson-tuned/checkpoints/checkpoint_interrupted").is_dir()
        assert_shown(page, expect, run_dir)
        # The Output pane follows the newest lines: the stop message is in view.
        page.wait_for_function(LOG_SHOWS, arg="SIGINT: checkpoint saved to")
        assert_metrics_not_telemetry(page, expect)
        stopped_points = int(chart.get_attribute("data-points"))
        page.screenshot(path=str(shots / "4-run-stopped.png"))

        models = browser.new_page(viewport={"width": 1280, "height": 700})
        models.goto(f"{server}/models")
        expect(models.locator('tr[data-model="tiny"]')).to_be_visible()
        tiny = models.locator('tr[data-model="tiny"] .summary')  # made by `models init`
        expect(tiny).to_contain_text("trainforge models init")
        expect(tiny).not_to_contain_text("no trainforge.json")
        expect(models.locator('tr[data-model="jetson-tuned"]')).to_have_count(0)

        page.get_by_role("button", name="Resume").click()
        expect(page.locator("#run-status")).to_have_text("running")
        # The resume line may scroll past between two refreshes of a fast run: the pane
        # keeps it to scroll back to, and follows the newest lines to the run's last.
        expect(page.locator("#run-log")).to_contain_text("resumed from", timeout=120_000)
        expect(page.locator("#run-status")).to_have_text("completed", timeout=240_000)
        page.wait_for_function(LOG_SHOWS, arg="metrics:     runs/jetson-tuned/metrics.jsonl")
        expect(page.locator("#run-log")).to_contain_text("SIGINT: checkpoint saved to")
        assert int(chart.get_attribute("data-points")) > stopped_points
        assert_shown(page, expect, run_dir)
        assert_metrics_not_telemetry(page, expect)
        page.screenshot(path=str(shots / "5-run-completed.png"))

        # The Models page, open all along, lists the new model once the run completes.
        row = models.locator('tr[data-model="jetson-tuned"]')
        expect(row).to_be_visible(timeout=30_000)
        expect(row).to_contain_text("GPT2LMHeadModel")
        expect(row).to_contain_text("models/tiny")
        models.screenshot(path=str(shots / "6-models-refreshed.png"))
        browser.close()
    assert_screenshots(shots, started)


def test_no_causal_lm_submit_without_a_base_model(server, jetson_project):
    """The dialog refuses a causal-lm run with no base model before anything is sent, beside
    the field; the base-model field is hidden for an image task."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(30_000)
        posts: list[str] = []
        page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
        page.goto(f"{server}/runs")
        page.get_by_role("button", name="Train Model").click()
        expect(page.locator("#train-dialog")).to_be_visible()
        expect(page.locator("#f-config")).to_have_value("config/jetson_training.json")
        page.locator("#f-profile").select_option("cpu")
        expect(page.locator("#f-task")).to_have_value("causal-lm")
        expect(page.locator("#base-model-field")).to_be_visible()
        page.locator("#f-base_model").select_option("")
        page.locator("#f-output_name").fill("no-base")
        page.get_by_role("button", name="Start Training").click()
        error = page.locator('.error[data-for="base_model"]')
        expect(error).to_contain_text("pick one in Base model")
        assert posts == [], posts  # refused before submit
        expect(page).to_have_url(f"{server}/runs")
        page.locator("#f-task").select_option("image-classification")
        expect(page.locator("#base-model-field")).to_be_hidden()
        browser.close()
    assert not (jetson_project / "runs" / "no-base").exists()
