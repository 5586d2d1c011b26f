"""A run on a cluster target from the web app, in a real headless Chromium (Debian's chromium
through Playwright, as test_browser.py).

The login node is a real sshd on a loopback port (tests/targets/login_node.py) reached with a
key the fixture writes; everything between the app and the cluster goes through ssh and
rsync. Slurm on that node is the stand-in of tests/targets/fake_slurm.py (sbatch runs the
real rendered batch script, scancel sends SIGTERM to the job's processes), because a browser
test machine need not have Slurm; the real Slurm behind the same sshd is
tests/targets/test_slurm_target.py's (the command line: pending, running, stop, resume, pull).

The dialog submits to the target; the job waits (pending, with squeue's reason on the Runs
page and the run page), runs, and its live chart grows from the local mirror; Stop leaves a
checkpoint on the cluster and Resume completes the run there. With the login node's sshd
stopped the run's row carries the unreachable badge while the pages keep answering; with it
back the badge goes and the run completes.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml
from tests.targets import fake_slurm
from tests.targets.login_node import start_login_node
from tests.web.test_browser_cli_runs import chromium

from fakes.web import CPU, REPO, TINY_VIT, serving

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]
VENV_BIN = Path(sys.executable).parent
OVERRIDES = [
    *TINY_VIT,
    "training.max_steps=4000",
    "checkpoint.save_steps=100",
    "checkpoint.save_every_epochs=null",
    "evaluation.eval_steps=100",
    "evaluation.eval_every_epochs=null",
    "logging.logging_steps=10",
    "logging.tensorboard=false",
    "logging.progress_bar=false",
]
STEP_AT_LEAST = "(n) => Number(document.getElementById('s-step').textContent) >= n"


def stop_sshd(node) -> None:
    """The login node goes away: its listener and every connection it serves (the shared
    ControlMaster connection included)."""
    listener = psutil.Process(node.process.pid)
    for child in listener.children(recursive=True):
        child.kill()
    node.stop()


def restart_sshd(node) -> None:
    log = (node.root / "sshd.log").open("a")
    config = str(node.root / "sshd_config")
    node.process = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", config], stderr=log)


def test_dialog_submits_to_a_target_watch_stop_resume_and_badge(tmp_path, monkeypatch):
    from playwright.sync_api import expect, sync_playwright

    project, remote = tmp_path / "project", tmp_path / "cluster-project"
    (project / "config").mkdir(parents=True)
    remote.mkdir()
    (project / "config/vit_digits.yaml").write_text((REPO / "config/vit_digits.yaml").read_text())
    node = start_login_node(tmp_path / "login-node")
    bin_dir, jobs = fake_slurm.install(tmp_path / "slurm")
    (jobs / "hold").touch()  # the first job waits, as behind another user's
    # The job's Python reads the same sources as this side's (PYTHONPATH, where a checkout
    # runs its tests against another tree).
    path = os.environ.get("PYTHONPATH", "")
    setup = (
        f"export PATH={bin_dir}:$PATH FAKE_SLURM={jobs} PYTHONPATH={path} "
        f"&& source {VENV_BIN}/activate"
    )
    targets = tmp_path / "targets.yaml"
    fields = node.target_fields(remote_dir=str(remote), setup=setup, partition="debug")
    targets.write_text(yaml.safe_dump({"targets": {"hpc": fields}}), encoding="utf-8")
    monkeypatch.setenv("TRAINFORGE_TARGETS", str(targets))
    monkeypatch.setenv("TRAINFORGE_JOBS", str(tmp_path / "jobs" / "jobs.json"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    try:
        with serving(project, CPU) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium(), headless=True)
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.set_default_timeout(120_000)
            expect.set_options(timeout=120_000)  # polls over SSH on a busy machine, not speed
            page.goto(f"{url}/train")
            page.locator("#f-target option[value=hpc]").wait_for(state="attached")
            page.select_option("#f-target", "hpc")
            expect(page.locator("#f-time")).to_be_visible()
            # Judged beside the fields like the others, before anything is sent.
            page.fill("#f-time", "ten minutes")
            # The defaults have loaded (changing a field earlier would see them overwrite it).
            expect(page.locator("#f-config")).to_have_value("config/vit_digits.yaml")
            expect(page.locator("#f-output_name")).to_have_value("vit-digits")
            page.fill("#f-output_name", "on-cluster")
            page.fill("#f-overrides", "\n".join(OVERRIDES))
            page.click("#train-start")
            expect(page.locator('.error[data-for="time"]')).to_contain_text("ten minutes")
            page.fill("#f-time", "00:20:00")
            page.click("#train-start")
            expect(page).to_have_url(f"{url}/runs/on-cluster")
            expect(page.locator("#run-message")).to_contain_text("pending: Resources")

            page.goto(f"{url}/runs")
            row = page.locator('#runs-table tr[data-run="on-cluster"]')
            expect(row.locator("td.target")).to_contain_text("hpc")
            expect(row).to_contain_text("(Resources)")
            page.fill("#runs-filter", "hpc queued")
            expect(row).to_be_visible()
            page.fill("#runs-filter", "local")
            expect(row).to_be_hidden()
            page.fill("#runs-filter", "")

            (jobs / "hold").unlink()  # the cluster frees up
            page.goto(f"{url}/runs/on-cluster")
            expect(page.locator("#run-status")).to_have_text("running")
            page.wait_for_function(STEP_AT_LEAST, arg=20)
            chart = page.locator("#chart-loss")
            first = int(chart.get_attribute("data-points") or 0)
            page.wait_for_function(
                f"() => Number(document.getElementById('chart-loss').dataset.points) > {first}"
            )  # live from the mirror

            page.click("#stop-button")
            expect(page.locator("#run-status")).to_have_text("stopped", timeout=300_000)
            run_dir = remote / "runs/on-cluster"
            assert (run_dir / "checkpoints/checkpoint_interrupted").is_dir()
            stopped_at = int(page.locator("#s-step").inner_text())
            assert stopped_at < 4000

            page.click("#resume-button")
            page.wait_for_function(STEP_AT_LEAST, arg=stopped_at + 20)
            stop_sshd(node)
            page.goto(f"{url}/runs")
            badge = row.locator(".badge.unreachable")
            expect(badge).to_be_visible()
            assert "cannot reach" in badge.get_attribute("title")
            # The pages keep answering while the target does not.
            page.goto(f"{url}/runs/on-cluster")
            expect(page.locator("#run-status")).to_have_text("running")
            assert page.request.get(f"{url}/api/runs").ok

            restart_sshd(node)
            page.goto(f"{url}/runs")
            expect(badge).to_be_hidden(timeout=300_000)
            page.goto(f"{url}/runs/on-cluster")
            expect(page.locator("#run-status")).to_have_text("completed", timeout=600_000)
            expect(page.locator("#s-step")).to_have_text("4000")
            browser.close()
        listed = subprocess.run(
            [sys.executable, "-m", "trainforge", "jobs", "--json"],
            env={**os.environ}, cwd=project, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert '"state": "completed"' in listed.stdout, listed.stdout + listed.stderr
    finally:
        node.stop()
        for pid in fake_slurm.job_processes(jobs):  # a job left running
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
