"""The web app a user would keep open, in a real headless Chromium: charts to read (hover
values, drag-zoom and reset, TensorBoard's debiased smoothing, a log scale, step ticks),
system charts with labelled series and units, a finished run's artefacts (download, Export
with its summary, latency and trtexec line), rename/tag/note/delete (never while running),
numbers in a user's units (MFU %, ETA, final metrics), a 390 px phone window, Compare runs
with runs picked and a legend, and links to the guides and the run's files.

One real `trainforge train` (6 steps of the digits config) is shared by every check; two more
runs are copies of its folder in the same format (one with a GPU's telemetry readings added,
one older), so the module trains once. The app's own runs use the stand-in trainer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from fakes.web import REPO, run_form, wait_for
from web.test_browser import chromium
from web.test_browser_pages import serve_project

pytestmark = pytest.mark.browser
RUN = "vit_digits"
GPU_RUN = "with-gpu"
OLD_RUN = "older"
SWEEP = "search"
GPU_READINGS = {
    "gpu0_util_pct": 87.0, "gpu0_mem_used_mib": 3072.0, "gpu0_mem_total_mib": 8192.0,
    "gpu0_temp_c": 61.0, "gpu0_power_w": 142.5,
}  # fmt: skip


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("keep-open")
    shutil.copytree(REPO / "config", root / "config")
    trained = subprocess.run(
        [sys.executable, "-m", "trainforge", "train", "config/vit_digits.yaml",
         "--max_steps", "6", "--set", "logging.logging_steps=1",
         "--set", "training.num_threads=1", "--set", "hardware.telemetry_interval_s=0.05",
         "--set", "logging.tensorboard=false"],
        cwd=root, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stdout + trained.stderr
    runs = root / "runs"
    shutil.copytree(runs / RUN, runs / GPU_RUN)
    with (runs / GPU_RUN / "metrics.jsonl").open("a") as out:
        for i in range(3):  # a CUDA machine's readings, as NVML's source names them
            record = {"time": time.time() + i, "split": "telemetry", "step": 6, **GPU_READINGS}
            out.write(json.dumps(record) + "\n")
    shutil.copytree(runs / RUN, runs / OLD_RUN)
    past = time.time() - 3600
    os.utime(runs / OLD_RUN / "run.json", (past, past))
    os.utime(runs / GPU_RUN / "run.json", (past + 60, past + 60))
    os.utime(runs / RUN / "run.json")  # the newest
    write_sweep(runs / SWEEP, runs / RUN)
    return root


def write_sweep(folder: Path, trial_run: Path) -> None:
    """A finished sweep as `trainforge sweep` leaves it: its request, its Optuna journal with
    four scored trials, and each trial's run folder (copies of one real run)."""
    from trainforge.sweep import study as studies
    from trainforge.sweep.space import parse_space
    from trainforge.sweep.study import SweepFolder

    sweep = SweepFolder(folder)
    request = {
        "space": {"params": {"model.mlp_dropout": {"uniform": [0.0, 0.2]}}},
        "trials": 4, "metric": "accuracy", "direction": "maximize", "pruner": "none",
    }  # fmt: skip
    folder.mkdir(parents=True)
    sweep.write_request(request)
    space, _ = parse_space(request["space"], "space")
    study = studies.open_study(sweep, request)
    for value in (0.4, 0.8, 0.6, 0.2):
        trial, _, lease = studies.claim(sweep, study, 4, space)
        os.close(lease)
        study.tell(trial, value)
        shutil.copytree(trial_run, sweep.trial_dir(trial.number))


@pytest.fixture(scope="module")
def served(project: Path):
    yield from serve_project(project)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()


def records(project: Path, run: str = RUN) -> list[dict]:
    lines = (project / "runs" / run / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def tensorboard_smoothing(values: list[float], weight: float) -> list[float]:
    """TensorBoard's scalar smoothing (plugins/scalar, resmoothDataset), written out again."""
    last, out = 0.0, []
    for n, y in enumerate(values, 1):
        last = last * weight + (1 - weight) * y
        out.append(last / (1 - weight**n))
    return out


def test_charts_hover_zoom_smoothing_log_scale_and_step_ticks(project, served, page):
    from playwright.sync_api import expect

    url, _ = served
    page.goto(f"{url}/runs/{RUN}")
    loss = page.locator("#chart-loss")
    page.wait_for_function(
        "() => Number(document.getElementById('chart-loss').dataset.points) >= 7"
    )
    ticks = loss.get_attribute("data-xticks").split(",")
    assert len(ticks) >= 3 and all(t.isdigit() for t in ticks), ticks  # not only first and last

    box = loss.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2)
    tip = page.locator("figure", has=loss).locator(".chart-tip")
    expect(tip).to_be_visible()
    expect(tip).to_contain_text("step ")
    expect(tip).to_contain_text("train ")

    page.mouse.move(box["x"] + 70, box["y"] + 60)  # drag from near step 1 to about step 4
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + 60, steps=5)
    page.mouse.up()
    zoomed = loss.get_attribute("data-zoomed")
    assert zoomed and zoomed != "", zoomed
    first, last = map(int, zoomed.split("-"))
    assert 1 <= first < last < 6, zoomed
    reset = page.locator("figure", has=loss).get_by_role("button", name="Reset zoom")
    reset.click()
    expect(loss).to_have_attribute("data-zoomed", "")
    expect(reset).to_be_hidden()

    losses = [r["loss"] for r in records(project) if r.get("split") == "train"]
    smoothed = page.evaluate("(v) => smoothValues(v, 0.6)", losses)
    assert smoothed == pytest.approx(tensorboard_smoothing(losses, 0.6), rel=1e-12)
    assert smoothed[0] == pytest.approx(losses[0])  # debiased: not pulled towards zero
    page.locator("#smoothing").fill("0.9")
    expect(page.locator("#smoothing-value")).to_have_text("0.90")
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2)
    expect(tip).to_contain_text("(raw ")  # the smoothed value, with the raw one beside it
    page.locator("#loss-log").check()
    expect(loss).to_have_attribute("data-log", "true")


def test_system_charts_have_labelled_series_with_units(served, page):
    from playwright.sync_api import expect

    url, _ = served
    page.goto(f"{url}/runs/{RUN}")  # this CPU: utilisation and memory, nothing more
    util = page.locator('#system-charts figure[data-group="util"]')
    expect(util.locator("figcaption")).to_contain_text("(%)")
    expect(util.locator("canvas")).to_have_attribute("data-series", "CPU")
    memory = page.locator('#system-charts figure[data-group="memory"]')
    expect(memory.locator("figcaption")).to_contain_text("GiB")
    expect(memory.locator("canvas")).to_have_attribute("data-series", "RAM used,this process (RSS)")
    expect(page.locator('#system-charts figure[data-group="temp"]')).to_have_count(0)
    expect(page.locator("#all-readings")).not_to_have_attribute("open", "")

    page.goto(f"{url}/runs/{GPU_RUN}")  # a GPU's readings: VRAM, temperature, power
    gpu = page.locator("#system-charts")
    expect(gpu.locator('[data-group="util"] canvas')).to_have_attribute("data-series", "CPU,GPU0")
    expect(gpu.locator('[data-group="memory"] canvas')).to_have_attribute(
        "data-series", "RAM used,this process (RSS),GPU0 VRAM used"
    )
    expect(gpu.locator('[data-group="temp"] figcaption')).to_contain_text("°C")
    expect(gpu.locator('[data-group="power"] figcaption')).to_contain_text("(W)")
    expect(gpu.locator('[data-group="power"] canvas')).to_have_attribute("data-series", "GPU0")

    page.goto(f"{url}/system")  # the machine's live samples, as charts over time
    live = page.locator('#system-charts figure[data-group="memory"]')
    expect(live.locator("figcaption")).to_contain_text("GiB")
    expect(live.locator("canvas")).to_have_attribute("data-series", "RAM used,this process (RSS)")


def test_finished_run_shows_final_metrics_mfu_percent_and_its_artefacts(project, served, page):
    from playwright.sync_api import expect

    url, _ = served
    summary = json.loads((project / "runs" / RUN / "summary.json").read_text())
    page.goto(f"{url}/runs/{RUN}")
    final = page.locator("#final-metrics")
    accuracy = summary["final_metrics"]["accuracy"]
    expect(final.locator('[data-metric="accuracy"]')).to_contain_text(f"{accuracy * 100:.2f} %")
    expect(page.locator("#s-lr")).to_be_hidden()  # no "learning rate 0" for a finished run
    expect(page.locator("#s-mfu")).to_have_text(f"{summary['mfu'] * 100:.2f} %")
    expect(page.locator("#run-eta")).to_be_hidden()

    with page.expect_download() as download:
        page.get_by_role("link", name="Download the final model").click()
    got = Path(download.value.path()).read_bytes()
    assert got == (project / "runs" / RUN / "model.safetensors").read_bytes()

    page.get_by_role("button", name="Export").click()  # ONNX is ticked by default
    row = page.locator('#export-results tr[data-format="onnx"]')
    expect(row).to_contain_text(" ms (onnxruntime)", timeout=300_000)
    written = json.loads((project / "runs" / RUN / "export" / "onnx" / "summary.json").read_text())
    expect(row).to_contain_text(f"{written['latency_batch1']['p50_ms']:.3f} ms")
    expect(page.locator("#trtexec")).to_contain_text(written["tensorrt"]["fp16"])
    expect(page.locator("#export-status")).to_have_text("done")


def test_rename_tag_note_and_delete_with_confirmation_never_while_running(
    project, served, page, monkeypatch
):
    from playwright.sync_api import expect

    url, state = served
    run_json = (project / "runs" / GPU_RUN / "run.json").read_bytes()
    page.goto(f"{url}/runs/{GPU_RUN}")
    page.locator("#manage summary").click()
    page.locator("#m-name").fill("GPU copy")
    page.locator("#m-tags").fill("baseline, gpu")
    page.locator("#m-note").fill("copied to try the charts")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#m-saved")).to_have_text("Saved.")
    page.reload()
    expect(page.locator("#run-title")).to_have_text("GPU copy")
    expect(page.locator("#run-tags .tag")).to_have_text(["baseline", "gpu"])
    expect(page.locator("#run-note")).to_have_text("copied to try the charts")
    assert (project / "runs" / GPU_RUN / "run.json").read_bytes() == run_json  # never edited
    assert state.registry.meta(GPU_RUN).tags == ("baseline", "gpu")

    monkeypatch.setenv("FAKE_TRAINER_STEPS", "100000")  # runs until stopped
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.05")
    started = httpx.post(f"{url}/api/runs", json=run_form(output_name="busy"))
    assert started.status_code == 201, started.text
    page.goto(f"{url}/runs/busy")
    expect(page.locator("#run-status")).to_have_text("running")
    expect(page.locator("#run-eta")).to_contain_text("ETA ")
    page.locator("#manage summary").click()
    expect(page.locator("#delete-button")).to_be_disabled()
    expect(page.locator("#delete-hint")).to_contain_text("stop it before deleting")
    assert httpx.delete(f"{url}/api/runs/busy").status_code == 409
    httpx.post(f"{url}/api/runs/busy/stop")
    wait_for(lambda: not state.get_run("busy").active, timeout=120)

    page.goto(f"{url}/runs/{OLD_RUN}")
    page.locator("#manage summary").click()
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.get_by_role("button", name="Delete run").click()
    wait_for(lambda: asked)
    assert (project / "runs" / OLD_RUN).is_dir()  # dismissed: nothing removed
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete run").click()
    page.wait_for_url(f"{url}/runs")
    assert not (project / "runs" / OLD_RUN).exists()
    assert httpx.get(f"{url}/api/runs/{OLD_RUN}").status_code == 404


def test_phone_width_folds_the_sidebar_and_wraps_the_output(browser, served):
    from playwright.sync_api import expect

    url, _ = served
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{url}/runs/{RUN}")
    expect(page.locator("#sidebar")).to_be_hidden()
    page.get_by_role("button", name="Menu").click()
    expect(page.locator("#sidebar")).to_be_visible()
    expect(page.locator("#sidebar").get_by_role("link", name="Compare runs")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.locator("#sidebar")).to_be_hidden()
    main = page.locator("main").bounding_box()
    assert main["width"] >= 380, main  # the page has the whole width
    chart = page.locator("#chart-loss").bounding_box()
    assert 300 <= chart["width"] <= 390, chart
    page.evaluate(
        "() => { document.getElementById('run-log').textContent = "
        "'x'.repeat(400) + ' runs/' + 'a/'.repeat(100); }"
    )
    fits = page.evaluate(
        "() => { const l = document.getElementById('run-log'); "
        "return l.scrollWidth <= l.clientWidth; }"
    )
    assert fits  # long lines wrap instead of being cut off
    wide = page.evaluate(
        "() => [...document.querySelectorAll('body *')].filter((e) => !e.closest('.table') "
        "&& e.getBoundingClientRect().right > 391).map((e) => e.id || e.tagName)"
    )
    # (a table scrolls sideways inside its own box)
    assert wide == [] and page.evaluate("() => document.documentElement.scrollWidth") <= 390, wide
    context.close()


def test_compare_starts_with_the_newest_runs_and_a_legend(project, served, page):
    from playwright.sync_api import expect

    url, _ = served
    runs = [p.parent for p in (project / "runs").glob("*/run.json")]  # other tests add runs
    newest = sorted(runs, key=lambda p: (p / "run.json").stat().st_mtime)[-2:]
    page.goto(f"{url}/compare")
    checked = page.locator("#compare-runs input:checked")
    expect(checked).to_have_count(2)
    names = {checked.nth(i).get_attribute("value") for i in range(2)}
    assert names == {p.name for p in newest}, names
    legend = page.locator("#compare-legend li")
    expect(legend).to_have_count(2)
    for item in legend.all():  # each run by its name, with its colour
        expect(item).to_contain_text(item.get_attribute("data-run"))
        assert item.locator(".swatch").evaluate("(e) => getComputedStyle(e).backgroundColor")
    page.wait_for_function(
        "() => Number(document.getElementById('compare-train').dataset.points) > 0"
    )
    page.goto(f"{url}/compare?run={RUN}")
    expect(page.locator("#compare-runs input:checked")).to_have_count(1)

    page.goto(f"{url}/compare?sweep={SWEEP}")  # the sweep page's link: its best 3 of 4 trials
    expect(legend).to_have_text([f"{SWEEP}/trial-{n:03d}" for n in (0, 1, 2)])
    page.wait_for_function(
        "() => document.getElementById('compare-metric').dataset.series.split(',').length === 3"
    )


def test_links_to_the_guides_and_the_run_files(project, served, page):
    from playwright.sync_api import expect

    url, _ = served
    page.goto(f"{url}/runs/{RUN}")
    files = page.locator("#run-files")
    expect(files).to_contain_text(f"runs/{RUN}")
    files.get_by_role("link", name="run.json").click()
    recorded = json.loads((project / "runs" / RUN / "run.json").read_text())
    assert json.loads(page.locator("body").inner_text()) == recorded
    page.goto(f"{url}/runs/{RUN}")
    page.locator("#run-files").get_by_role("link", name="metrics.jsonl").click()
    assert '"split": "telemetry"' in page.locator("body").inner_text()
    for name in ("model.safetensors", "..%2F..%2Fconfig%2Fvit_digits.yaml", ".lock"):
        assert httpx.get(f"{url}/runs/{RUN}/files/{name}").status_code == 404, name

    page.goto(f"{url}/runs")
    page.get_by_role("link", name="Guides").click()
    page.locator("#guides").get_by_role("link", name="sweeps").click()
    expect(page.locator("#guide h1")).to_be_visible()
    expect(page.locator("#guide")).to_contain_text("trainforge sweep")
