"""Several runs on one machine through the web app: two digits runs submitted together
against the same two run one after the other.

Before the queue, two runs started together from the web app each started as many threads
as there are cores; on 2 cores they delivered 0.44x of one run's throughput together. Now
the web app runs one training per device at a time by default and queues the rest
(web/runner.py); with `max_parallel_runs: 2` each child gets cores / 2 threads
(hardware/threads.py). Arms, each timed from the first submission to the end of the last run,
in alternating order:
- one after the other: submit A, wait for it to end, submit B;
- together (default queue): submit A and B at once (B queues and starts when A ends);
- together, 2 in parallel: `max_parallel_runs=2`, each child with half the cores (info).
Target: together (default) <= 1.1x one after the other, the median of the rounds' own
ratios (a round's arms run back to back, so a slow spell of the shared host falls on both:
the ratio of the medians of 2 rounds read 0.946 to 1.130 for the same code across four
`make bench` runs, with single arms moving by 20 %). Also reported: the median seconds of
a run's process outside its training loop (start-up before the first step; final model,
report and exit after the last), taken from the run's start and end times in the app and
the `train_time_s` of its summary.json: for short runs most of a run's time.

The runs are the main job's recipe shortened to `epochs` (warm-up 1 epoch, none for one),
through the real `trainforge train` the app starts, in an in-process app (FastAPI's
TestClient).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import alternate, median, table

from trainforge.runfolder import RunFolder

REPO = Path(__file__).resolve().parents[1]


def _form(name: str, epochs: int) -> dict:
    return {
        "config": "config/vit_digits.yaml", "output_name": name, "epochs": epochs,
        "profile": "cpu", "overwrite": True,
        "overrides": [f"schedule.warmup_epochs={min(1, epochs - 1)}", "hardware.telemetry=false"],
    }  # fmt: skip


def _client(project: Path, parallel: int):
    from fastapi.testclient import TestClient

    from trainforge.web.app import create_app
    from trainforge.web.settings import WebSettings

    settings = WebSettings(root=project, max_parallel_runs=parallel, poll_interval_s=0.2)
    return TestClient(create_app(settings))


def _wait_done(client, names: list[str], timeout: float = 3600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        views = [client.get(f"/api/runs/{name}").json() for name in names]
        if all(v["status"] not in ("queued", "running", "stopping") for v in views):
            failed = [v for v in views if v["status"] != "completed"]
            if failed:
                raise RuntimeError(f"run {failed[0]['id']} {failed[0]['status']}: "
                                   f"{failed[0]['message']}")  # fmt: skip
            return
        time.sleep(0.2)
    raise RuntimeError(f"runs {names} did not finish within {timeout} s")


def _arm(project: Path, epochs: int, parallel: int, together: bool) -> Arm:
    names = ["run-a", "run-b"]
    with _client(project, parallel) as client:
        started = time.perf_counter()
        for name in names:
            response = client.post("/api/runs", json=_form(name, epochs))
            if response.status_code != 201:
                raise RuntimeError(f"submit {name}: {response.status_code} {response.text}")
            if not together:
                _wait_done(client, [name])
        _wait_done(client, names)
        elapsed = time.perf_counter() - started
        overhead = []
        for name in names:
            view = client.get(f"/api/runs/{name}").json()
            summary = json.loads(RunFolder(project / "runs" / name).summary.read_text())
            wall = view["finished_at"] - view["started_at"]
            overhead.append(wall - float(summary["train_time_s"]))
        return Arm(elapsed, median(overhead))


@dataclass(frozen=True)
class Arm:
    """Seconds from the first submission to the end of the last run, and the median seconds
    of a run's process outside its training loop (start-up before the first step, the
    final model, report and exit after the last)."""

    seconds: float
    outside_training_s: float


def run(epochs: int = 10, repeats: int = 3) -> tuple[str, dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix="web-queue-") as folder:
        project = Path(folder)
        shutil.copytree(REPO / "config", project / "config")
        times = alternate(
            {
                "one after the other": lambda: _arm(project, epochs, 1, together=False),
                "together (queue, default)": lambda: _arm(project, epochs, 1, together=True),
                "together, 2 in parallel": lambda: _arm(project, epochs, 2, together=True),
            },
            repeats,
        )
    med = {name: median([arm.seconds for arm in arms]) for name, arms in times.items()}
    base = [arm.seconds for arm in times["one after the other"]]
    ratio = {
        name: median([arm.seconds / b for arm, b in zip(arms, base, strict=True)])
        for name, arms in times.items()
    }
    rows = [
        [name, f"{value:.1f}", f"{ratio[name]:.3f}",
         " ".join(f"{arm.seconds:.1f}" for arm in times[name]),
         f"{median([arm.outside_training_s for arm in times[name]]):.1f}"]
        for name, value in med.items()
    ]  # fmt: skip
    text = table(
        f"Two main-job runs ({epochs} epochs each) through the web app, medians of {repeats} "
        "rounds; against one after the other: the median of the rounds' own ratios",
        ["arm", "both done s", "vs one after the other", "rounds s", "per run outside training s"],
        rows,
    )
    return text, {
        "web_two_runs_queued_vs_sequential": ratio["together (queue, default)"],
        "web_two_runs_parallel_vs_sequential": ratio["together, 2 in parallel"],
    }


if __name__ == "__main__":
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    text, ratios = run(epochs, int(sys.argv[2]) if len(sys.argv) > 2 else 3)
    print(text)
    print(ratios)
