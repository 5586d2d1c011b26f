"""A command-line run in a real headless Chromium (Debian's chromium through Playwright, as
test_browser.py): a `trainforge train` started in a terminal of the project is listed under
Runs; its page says how to stop it (the command and its process id) and, as this server runs
as the same user, offers Stop, which stops it with a checkpoint; the Runs list's validation
accuracy is the run page's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakes.web import CPU, REPO, TINY_VIT, serving

pytestmark = pytest.mark.browser
SETS = [
    *TINY_VIT,
    "output.run_name=from-terminal",
    "training.max_steps=100000",  # runs until stopped
    "evaluation.eval_steps=5",
    "evaluation.eval_every_epochs=null",
    "logging.tensorboard=false",
]


def chromium() -> str:
    for candidate in (os.environ.get("TRAINFORGE_CHROMIUM"), "/usr/lib/chromium/chromium",
                      "/usr/bin/chromium", "chromium"):  # fmt: skip
        found = shutil.which(candidate) if candidate else None
        if found:
            return found
    pytest.fail("no Chromium found: run `make test-browser` (installs Debian's chromium)")


def _last_val_accuracy(run: Path) -> float:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r.get("split") == "val"][-1]["accuracy"]


def _wait(check, what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout  # a hung run, not speed
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_a_command_line_run_page_says_how_to_stop_it_and_stop_works(tmp_path: Path):
    from playwright.sync_api import expect, sync_playwright

    shutil.copytree(REPO / "config", tmp_path / "config")
    run = tmp_path / "runs" / "from-terminal"
    args = [sys.executable, "-m", "trainforge", "train", "config/vit_digits.yaml"]
    args += [word for item in SETS for word in ("--set", item)]
    log = (tmp_path / "terminal.log").open("w")
    terminal = subprocess.Popen(args, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        metrics = run / "metrics.jsonl"
        _wait(lambda: metrics.is_file() and '"val"' in metrics.read_text(), "no validation yet")
        with serving(tmp_path, CPU) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium(), headless=True)
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.set_default_timeout(60_000)
            page.goto(f"{url}/runs")
            row = page.locator('#runs-table tr[data-run="from-terminal"]')
            expect(row).to_contain_text("command line")
            row.get_by_role("link", name="from-terminal").click()
            expect(page).to_have_url(f"{url}/runs/from-terminal")
            hint = page.locator("#stop-hint")
            expect(hint).to_contain_text(f"kill -INT {terminal.pid}")
            expect(hint).to_contain_text("Ctrl+C")
            stop = page.locator("#stop-button")
            expect(stop).to_be_visible()  # this server may signal the run: same user
            stop.click()
            expect(page.locator("#run-status")).to_have_text("stopped", timeout=300_000)
            assert terminal.wait(timeout=300) == 130  # as after Ctrl+C in its terminal
            assert (run / "checkpoints" / "checkpoint_interrupted").is_dir()
            expect(hint).to_be_hidden()

            # The Runs list's accuracy is labelled as validation and is the run page's.
            expected = f"{_last_val_accuracy(run) * 100:.2f} %"
            page.goto(f"{url}/runs")
            header = page.locator("#runs-table thead th").nth(6)  # after Run, Target, Task, ...
            expect(header).to_have_text("Val accuracy")
            listed = row.locator("td.val-accuracy")
            expect(listed).to_have_text(expected)
            shown = listed.inner_text()
            page.goto(f"{url}/runs/from-terminal")
            expect(page.locator("#s-val")).to_have_text(shown)
            browser.close()
    finally:
        if terminal.poll() is None:
            terminal.kill()
            terminal.wait(timeout=60)
        log.close()
