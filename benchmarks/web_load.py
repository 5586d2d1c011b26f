"""The web app under load: 50 clients poll a run's status while it trains, side by side with
the same run and no clients.

One `trainforge serve` process; each round trains the same tiny digits run twice through the
API, once alone and once while N clients (one asyncio loop, keep-alive connections) each ask
GET /api/runs/ID every `interval_s`. Reported: request latency percentiles under load, and
the training slowdown (the run's own train_time_s from summary.json, loaded / alone - 1).
Targets: p99 < 200 ms, slowdown < 5 %. The trainer gets one thread (training.num_threads=1)
in both arms, so on a small machine the server and the clients have a core to share, as they
would beside a run on a real one; the clients run on this machine too and their CPU counts
against the run.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from common import table

REPO = Path(__file__).resolve().parents[1]
P99_TARGET_MS = 200.0
SLOWDOWN_TARGET = 0.05
RUN = {
    "config": "config/vit_digits.yaml",
    "task": "image-classification",
    "dataset": "digits",
    "profile": "cpu",
    "overrides": [
        "model.embedding_dim=32", "model.num_layers=1", "model.num_heads=2",
        "model.mlp_size=32", "training.num_threads=1", "logging.logging_steps=20",
        "checkpoint.save_every_epochs=1000", "evaluation.eval_every_epochs=1000",
    ],
}  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(project: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    log = (project / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "trainforge", "serve", "--port", str(port)],
        cwd=project, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/api/runs", timeout=2).status_code == 200:
                return server, url
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    raise RuntimeError((project / "server.log").read_text())


def _train(url: str, name: str, steps: int) -> None:
    body = {
        **RUN,
        "output_name": name,
        "overrides": [*RUN["overrides"], f"training.max_steps={steps}"],
    }
    response = httpx.post(f"{url}/api/runs", json=body, timeout=30)
    response.raise_for_status()


def _status(url: str, name: str) -> dict:
    return httpx.get(f"{url}/api/runs/{name}", timeout=30).json()


def _wait(url: str, name: str, check, timeout: float = 600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        view = _status(url, name)
        if check(view):
            return view
        time.sleep(0.2)
    raise TimeoutError(f"run {name}: {view['status']}")


async def _clients(url: str, name: str, n: int, interval_s: float, stop: asyncio.Event):
    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:

        async def poll(offset: float) -> None:
            nonlocal errors
            await asyncio.sleep(offset)
            while not stop.is_set():
                start = time.perf_counter()
                try:
                    response = await client.get(f"/api/runs/{name}")
                    response.raise_for_status()
                    if response.json()["status"] != "running":
                        stop.set()
                except httpx.HTTPError:
                    errors += 1
                latencies.append(time.perf_counter() - start)
                await asyncio.sleep(interval_s)

        await asyncio.gather(*(poll(i * interval_s / n) for i in range(n)))
    return latencies, errors


def _loaded_run(url: str, name: str, steps: int, n: int, interval_s: float):
    _train(url, name, steps)
    _wait(url, name, lambda v: v["num_records"] > 0 or v["status"] != "running")

    async def main():
        stop = asyncio.Event()
        return await _clients(url, name, n, interval_s, stop)

    latencies, errors = asyncio.run(main())
    view = _wait(url, name, lambda v: v["status"] != "running")
    return view, latencies, errors


def _train_time(project: Path, name: str) -> float:
    summary = json.loads((project / "runs" / name / "summary.json").read_text())
    return float(summary["train_time_s"])


def run(
    clients: int = 50, interval_s: float = 0.5, steps: int = 2000, repeats: int = 2
) -> tuple[str, dict[str, float]]:
    project = Path(tempfile.mkdtemp(prefix="trainforge-webload-"))
    shutil.copytree(REPO / "config", project / "config")
    server, url = _start_server(project)
    alone: list[float] = []
    loaded: list[float] = []
    latencies: list[float] = []
    errors = 0
    try:
        for i in range(repeats):
            _train(url, f"alone-{i}", steps)
            view = _wait(url, f"alone-{i}", lambda v: v["status"] != "running")
            assert view["status"] == "completed", view["message"]
            alone.append(_train_time(project, f"alone-{i}"))
            view, lat, err = _loaded_run(url, f"loaded-{i}", steps, clients, interval_s)
            assert view["status"] == "completed", view["message"]
            loaded.append(_train_time(project, f"loaded-{i}"))
            latencies += lat
            errors += err
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(project, ignore_errors=True)
    ms = sorted(x * 1000 for x in latencies)
    p50, p99 = ms[len(ms) // 2], ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    slowdown = statistics.median(loaded) / statistics.median(alone) - 1
    rows = [
        ["training alone", f"{statistics.median(alone):.2f} s", "", "", ""],
        [f"training + {clients} clients", f"{statistics.median(loaded):.2f} s",
         f"{len(ms)} ({errors} errors)", f"{p50:.1f} ms", f"{p99:.1f} ms"],
    ]  # fmt: skip
    text = table(
        f"web app: {clients} clients polling GET /api/runs/ID every {interval_s} s while a "
        f"{steps}-step run trains (median of {repeats} rounds side by side)",
        ["case", "train_time_s", "requests", "p50", "p99"],
        rows,
    )
    verdict = "PASS" if p99 < P99_TARGET_MS else "MISS"
    text += f"\n{verdict}  web_poll_p99_ms = {p99:.1f} (target < {P99_TARGET_MS:.0f})"
    text += f"\ntraining slowdown {slowdown * 100:+.1f} % (target < {SLOWDOWN_TARGET * 100:.0f} %)"
    return text, {"web_poll_slowdown": slowdown, "web_poll_p99_ms": p99, "errors": errors}


if __name__ == "__main__":
    print(run()[0])
