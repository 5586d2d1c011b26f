"""A run of 10^6 logged steps in a real headless Chromium: the run page gets its charts from
the min/max/last buckets (under a megabyte in all), draws them, the hover over the bucket of
a spike planted at step 777,777 shows its max, and a drag-zoom around it refetches the window
and draws finer buckets."""

from __future__ import annotations

import json
import shutil

import pytest
from tests.observe.test_series import write_records
from tests.web.test_cli_runs import cli_folder

from fakes.web import REPO
from trainforge.observe import series
from web.test_browser import ARTIFACTS, chromium
from web.test_browser_pages import serve_project

pytestmark = pytest.mark.browser
# Where the chart draws the bucket holding the spike (the train series' bucket whose max it is).
SPIKE_X = """() => { const c = document.getElementById('chart-loss').chart;
  const b = c.series.find((s) => s.name === 'train').buckets.find((b) => b.max >= 100);
  return c.scale.sx(b.x); }"""
HOVER = """(step) => { const c = document.getElementById('chart-loss').chart;
  c.hoverX = step; c.draw(); }"""


def test_a_million_step_run_page_draws_its_buckets_keeps_the_spike_and_zooms(tmp_path):
    from playwright.sync_api import expect, sync_playwright

    shutil.copytree(REPO / "config", tmp_path / "config")
    folder = cli_folder(tmp_path, "long")
    write_records(folder.metrics, 1_000_000, spike=777_777, val_every=5_000)
    series.load(folder.metrics)  # the buckets the run would have written as it logged
    sizes: dict[str, int] = {}

    def count(response) -> None:
        if "/events" not in response.url:  # the event stream stays open: not a body to read
            sizes[response.url] = len(response.body())

    for url, _state in serve_project(tmp_path):
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium(), headless=True)
            page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            page.set_default_timeout(60_000)
            page.on("response", count)
            page.goto(f"{url}/runs/long")
            loss = page.locator("#chart-loss")
            page.wait_for_function(
                "() => Number(document.getElementById('chart-loss').dataset.drawn) > 500"
            )
            assert int(loss.get_attribute("data-width")) == 1024  # 10^6 steps in <= 1,000
            # Recorded, not asserted (no test depends on wall-clock time): navigation start
            # to the first chart drawn with data, and the bytes it took.
            paint = {"first_data_ms": int(loss.get_attribute("data-first-data-ms"))}
            page.wait_for_load_state("networkidle")
            assert sum(sizes.values()) <= 1_000_000, sizes
            paint["page_bytes"] = sum(sizes.values())
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            (ARTIFACTS / "long_run_first_paint.json").write_text(json.dumps(paint))
            print(f"10^6-step run page: {paint}")
            assert any("/series" in u for u in sizes) and not any("/metrics" in u for u in sizes)

            box = loss.bounding_box()
            x = page.evaluate(SPIKE_X)
            # A bucket here is 1,024 steps, about a pixel: the pointer's step is set as a
            # mouse move would set it (mapping the pointer is the keep-open test's part).
            page.evaluate(HOVER, 777_777)
            tip = page.locator("figure", has=loss).locator(".chart-tip")
            expect(tip).to_contain_text("max 100")  # the spike, kept as its bucket's max

            window = lambda r: "/series?" in r.url and "lo=" in r.url and "hi=" in r.url  # noqa: E731
            with page.expect_response(window):  # the zoom asks for its window
                page.mouse.move(box["x"] + x - 6, box["y"] + 60)  # a narrow window around it
                page.mouse.down()
                page.mouse.move(box["x"] + x + 6, box["y"] + 60, steps=4)
                page.mouse.up()
            page.wait_for_function(
                "() => { const d = document.getElementById('chart-loss').dataset.detail;"
                " return d === 'raw' || d.startsWith('width '); }"
            )
            assert int(loss.get_attribute("data-width")) < 1024  # finer than the whole run
            page.evaluate(HOVER, 777_777)
            expect(tip).to_contain_text("max 100")  # the spike, in a bucket of few steps now
            steps = page.evaluate("() => document.getElementById('chart-loss').dataset.width")
            assert int(steps) <= 64, steps
            browser.close()
