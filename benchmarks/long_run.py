"""Long runs: nothing a run does per step may grow memory or a later command's cost.

A soak of the real `trainforge train` (one process, one thread, CPU): the `vit_digits` recipe
shrunk to a 1-layer ViT of width 32 on the bundled digits, 10^5 steps with a metrics record
at every step (`logging.logging_steps=1`), TensorBoard on with weight histograms at their
default cadence, validation and a checkpoint at half the run and at its end, no telemetry
sampler, no report drawn at the end. A 10^3-step run of the same recipe is the short one the
long one is compared with. Measured, each against its target:

- `long_run_rss_growth`: the training process's RSS (itself and its children, read by psutil
  from /proc every 0.5 s; the run's own `process_rss_mib` is telemetry, which is off) from the
  time metrics.jsonl records 20 % of the steps to its last train record: the highest reading
  in that span over the reading at its start, minus 1. Target <= 3 %.
- `long_run_throughput_ratio`: steps/s of the last fifth of the steps over the second fifth,
  from metrics.jsonl's record times at the fifths' boundaries. Target >= 0.95.
- `long_run_resume_ratio`: `trainforge train --resume runs/NAME --set training.max_steps=N`
  with N 10 steps past where the folder stands, from the process start to its first new step
  (run.json's newest segment: `process_started_at` -> `first_step_at`), the 10^5-step folder
  over the 10^3-step one, the median of alternating rounds. Target <= 1.5.
- `long_run_report_s`: the wall time of `trainforge report runs/long` (a fresh process, its
  imports included) on the long folder. The goal is <= 5 s at 10^6 records; measured here at
  the run's own count, printed beside it.
- `long_run_serve_rss_growth`: one `trainforge serve` (127.0.0.1, a free port, the long run
  in its runs folder) while a client fetches the run page and its data (the status, and the
  chart's series: `/api/runs/ID/series` where the server has it, else every metrics record
  from offset 0 through `/api/runs/ID/metrics`) back to back for `poll_s` (default 10
  minutes): the server's highest RSS after 20 % of that time over its RSS at 20 %, minus 1.
  Target <= 3 %.
- `long_run_page_mb`: megabytes a client gets for the long run's page, its status and its
  chart data (`/api/runs/ID/series`) in one round of that polling (median); target 1 MB.
- `long_run_histogram_off_cadence`: TensorBoard steps holding weight histograms that are not
  a multiple of `logging.histogram_steps`, plus multiples that have none, read back from the
  long run's event file. Target 0: histograms keep their own cadence at every-step logging.

`python benchmarks/long_run.py [--steps N] [--poll-s S]` runs it alone (a quick look:
`--steps 5000 --poll-s 20`); `make bench ONLY=long_run` as rows.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).parent))
from common import table

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "config" / "vit_digits.yaml"
LONG_STEPS = 100_000
SHORT_STEPS = 1_000
POLL_S = 600.0
RESUME_ROUNDS = 3
RESUME_EXTRA_STEPS = 10
SAMPLE_S = 0.5
HISTOGRAM_STEPS = 500  # logging.histogram_steps' default, set explicitly so the check knows it
# key: (target, direction), as benchmarks/run.py checks them
TARGETS: dict[str, tuple[float, str]] = {
    "long_run_rss_growth": (0.03, "<="),
    "long_run_throughput_ratio": (0.95, ">="),
    "long_run_resume_ratio": (1.5, "<="),
    "long_run_report_s": (5.0, "<="),
    "long_run_serve_rss_growth": (0.03, "<="),
    "long_run_page_mb": (1.0, "<="),
    "long_run_histogram_off_cadence": (0.0, "<="),
}
TINY = [
    "model.embedding_dim=32", "model.num_layers=1", "model.num_heads=2", "model.mlp_size=32",
    "training.device=cpu", "training.num_threads=1", "hardware.telemetry=false",
    "logging.logging_steps=1", "logging.progress_bar=false", "logging.report=false",
    f"logging.histogram_steps={HISTOGRAM_STEPS}",
    "evaluation.eval_every_epochs=null", "checkpoint.save_every_epochs=null",
]  # fmt: skip


def _sets(values: list[str]) -> list[str]:
    return [arg for value in values for arg in ("--set", value)]


def train_command(name: str, steps: int) -> list[str]:
    rare = max(1, steps // 2)  # validation and a checkpoint at half the run (and the end)
    overrides = [*TINY, f"training.max_steps={steps}", f"evaluation.eval_steps={rare}",
                 f"checkpoint.save_steps={rare}", f"output.run_name={name}"]  # fmt: skip
    return [sys.executable, "-m", "trainforge", "train", str(RECIPE), "--profile", "cpu",
            *_sets(overrides)]  # fmt: skip


class RssSampler:
    """(time, RSS bytes) of a process and its children every `interval_s`, on a thread."""

    def __init__(self, pid: int, interval_s: float = SAMPLE_S) -> None:
        self.process = psutil.Process(pid)
        self.interval_s = interval_s
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _read(self) -> int | None:
        try:
            total = self.process.memory_info().rss
            for child in self.process.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except psutil.Error:
                    continue
        except psutil.Error:
            return None
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = self._read()
            if rss is not None:
                self.samples.append((time.time(), rss))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def growth(samples: list[tuple[float, int]], start: float, end: float) -> tuple[float, int, int]:
    """(highest reading in [start, end] over the first reading at or after start, minus 1;
    that first reading; the highest), readings in bytes. A window shorter than the sampling
    interval (a small run on a busy machine) takes the readings just around it."""
    span = [rss for t, rss in samples if start <= t <= end]
    if not span:
        before = [rss for t, rss in samples if t < start][-1:]
        after = [rss for t, rss in samples if t > end][:1]
        span = before + after
    if not span:
        raise RuntimeError(f"no RSS reading around {start:.1f} to {end:.1f}")
    return max(span) / span[0] - 1, span[0], max(span)


def train_times(metrics: Path) -> dict[int, float]:
    """{step: record time} of the train records of a metrics.jsonl (the last one per step)."""
    times = {}
    with metrics.open() as fh:
        for line in fh:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("split") == "train":
                times[int(record["step"])] = float(record["time"])
    return times


def fifths(times: dict[int, float], steps: int) -> tuple[float, float]:
    """(steps/s of the second fifth, of the last fifth) of a `steps`-step run."""
    fifth = steps // 5

    def rate(a: int, b: int) -> float:
        return (b - a) / (times[b] - times[a])

    return rate(fifth, 2 * fifth), rate(4 * fifth, 5 * fifth)


def tenths(times: dict[int, float], steps: int) -> list[float]:
    """Steps/s of each tenth of a `steps`-step run (from step 1 for the first): whether a
    late slowdown is a trend or the host's noise."""
    bounds = [max(1, steps * i // 10) for i in range(11)]
    return [(b - a) / (times[b] - times[a]) for a, b in itertools.pairwise(bounds)]


def _run(cmd: list[str], cwd: Path, log: Path, sampler: bool = False):
    with log.open("a") as out:
        process = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        if not sampler:
            rc = process.wait()
            samples: list[tuple[float, int]] = []
        else:
            with RssSampler(process.pid) as rss:
                rc = process.wait()
            samples = rss.samples
    if rc != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise RuntimeError(f"{' '.join(cmd[2:5])} exited {rc}: " + " | ".join(tail))
    return samples


def _iso(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def resume_seconds(work: Path, name: str, steps: int, log: Path) -> float:
    """Resume runs/NAME to `steps`; seconds from the process start to its first new step."""
    cmd = [sys.executable, "-m", "trainforge", "train", "--resume", f"runs/{name}",
           *_sets([f"training.max_steps={steps}"])]  # fmt: skip
    _run(cmd, work, log)
    segment = json.loads((work / "runs" / name / "run.json").read_text())["segments"][-1]
    return _iso(segment["first_step_at"]) - _iso(segment["process_started_at"])


def histogram_check(tensorboard: Path, every: int, last_step: int) -> tuple[int, int]:
    """(steps off the cadence: histogram steps not a multiple of `every` plus multiples
    without one, number of steps holding histograms), read from the event files."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto import event_pb2

    steps: set[int] = set()
    for path in sorted(tensorboard.glob("events.out.tfevents.*")):
        for raw in RawEventFileLoader(str(path)).Load():
            event = event_pb2.Event.FromString(raw)
            if any(v.HasField("histo") for v in event.summary.value):
                steps.add(event.step)
    expected = set(range(every, last_step + 1, every))
    return len(steps ^ expected), len(steps)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_poll(work: Path, run_id: str, poll_s: float, log: Path) -> dict[str, Any]:
    """`trainforge serve` over work/runs while one client fetches the run's page and data
    back to back for `poll_s`; the server's RSS growth from 20 % of that time on."""
    port = _free_port()
    cmd = [sys.executable, "-m", "trainforge", "serve", "--port", str(port),
           "--runs-dir", str(work / "runs"), "--db", str(work / "web.db")]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    with log.open("a") as out:
        server = subprocess.Popen(cmd, cwd=work, stdout=out, stderr=subprocess.STDOUT)
    try:
        client = httpx.Client(base_url=url, timeout=120)
        deadline = time.monotonic() + 60
        while True:
            try:
                if client.get("/api/runs").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("trainforge serve did not answer: " + log.read_text()[-500:])
            time.sleep(0.2)
        api = f"/api/runs/{run_id}"
        series = client.get(f"{api}/series").status_code == 200

        def chart_data() -> int:
            if series:
                return len(client.get(f"{api}/series").content)
            offset, size = 0, 0
            while True:
                answer = client.get(f"{api}/metrics", params={"offset": offset})
                answer.raise_for_status()
                size += len(answer.content)
                body = answer.json()
                if not body["records"] or body["offset"] == offset:
                    return size
                offset = body["offset"]

        rounds, latencies, sizes = 0, [], []
        with RssSampler(server.pid) as rss:
            started = time.time()
            while time.time() - started < poll_s:
                begin = time.perf_counter()
                page = 0
                for path in (f"/runs/{run_id}", api):
                    answer = client.get(path)
                    answer.raise_for_status()
                    page += len(answer.content)
                sizes.append(page + chart_data())
                latencies.append(time.perf_counter() - begin)
                rounds += 1
            ended = time.time()
        value, first, peak = growth(rss.samples, started + 0.2 * (ended - started), ended)
        return {
            "growth": value, "first": first, "peak": peak, "rounds": rounds,
            "round_s": statistics.median(latencies), "bytes": statistics.median(sizes),
            "endpoint": f"{api}/series" if series else f"{api}/metrics (from offset 0)",
        }  # fmt: skip
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _verdict(key: str, value: float) -> str:
    target, direction = TARGETS[key]
    ok = value <= target if direction == "<=" else value >= target
    return "PASS" if ok and math.isfinite(value) else "MISS"


def run(
    steps: int = LONG_STEPS,
    short_steps: int | None = None,
    poll_s: float = POLL_S,
    resume_rounds: int = RESUME_ROUNDS,
    keep: Path | None = None,
) -> tuple[str, dict[str, float]]:
    """The table and {key: value}; `keep`: the work folder to use and leave behind."""
    short_steps = short_steps or min(SHORT_STEPS, max(10, steps // 10))
    if steps < 10 or steps % 5:
        raise ValueError("steps must be a multiple of 5, at least 10")
    work = keep or Path(tempfile.mkdtemp(prefix="trainforge-long-run-"))
    work.mkdir(parents=True, exist_ok=True)
    log = work / "bench.log"
    try:
        started = time.perf_counter()
        samples = _run(train_command("long", steps), work, log, sampler=True)
        train_s = time.perf_counter() - started
        _run(train_command("short", short_steps), work, log)
        folder = work / "runs" / "long"
        times = train_times(folder / "metrics.jsonl")
        records = sum(1 for _ in (folder / "metrics.jsonl").open())
        rss_growth, rss_first, rss_peak = growth(samples, times[steps // 5], times[steps])
        second, last = fifths(times, steps)
        by_tenth = tenths(times, steps) if steps >= 20 else []
        off_cadence, histogram_sets = histogram_check(folder / "tensorboard", HISTOGRAM_STEPS,
                                                      steps)  # fmt: skip
        report_s = _timed(lambda: _run([sys.executable, "-m", "trainforge", "report",
                                        "runs/long"], work, log))  # fmt: skip
        resumes: dict[str, list[float]] = {"long": [], "short": []}
        planned = {"long": steps, "short": short_steps}
        for round_index in range(resume_rounds):
            order = ["long", "short"] if round_index % 2 == 0 else ["short", "long"]
            for name in order:
                planned[name] += RESUME_EXTRA_STEPS
                resumes[name].append(resume_seconds(work, name, planned[name], log))
        long_resume, short_resume = (statistics.median(resumes[n]) for n in ("long", "short"))
        web = serve_poll(work, "long", poll_s, log)
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
    values = {
        "long_run_rss_growth": rss_growth,
        "long_run_throughput_ratio": last / second,
        "long_run_resume_ratio": long_resume / short_resume,
        "long_run_report_s": report_s,
        "long_run_serve_rss_growth": web["growth"],
        "long_run_page_mb": web["bytes"] / 1e6,
        "long_run_histogram_off_cadence": float(off_cadence),
    }
    mib = 2**20
    details = {
        "long_run_rss_growth": f"{rss_first / mib:.1f} -> peak {rss_peak / mib:.1f} MiB "
        f"from step {steps // 5} to {steps} ({len(samples)} readings)",
        "long_run_throughput_ratio": f"steps {steps // 5}-{2 * steps // 5}: {second:.1f}/s, "
        f"{4 * steps // 5}-{steps}: {last:.1f}/s",
        "long_run_resume_ratio": f"{steps}-step folder {long_resume:.2f} s, {short_steps}-step "
        f"{short_resume:.2f} s to the first new step (medians of {resume_rounds})",
        "long_run_report_s": f"trainforge report on {records:,} records (goal: 5 s at 10^6)",
        "long_run_serve_rss_growth": f"{web['first'] / mib:.1f} -> peak {web['peak'] / mib:.1f} "
        f"MiB over {poll_s:.0f} s, {web['rounds']} rounds of page + status + "
        f"{web['endpoint']} ({web['bytes'] / 1e6:.1f} MB, {web['round_s']:.2f} s a round)",
        "long_run_page_mb": f"the run page, its status and {web['endpoint']} of the "
        f"{steps}-step run, one round (median)",
        "long_run_histogram_off_cadence": f"{histogram_sets} histogram steps, every "
        f"{HISTOGRAM_STEPS} of {steps}",
    }
    rows = []
    for key, value in values.items():
        target, direction = TARGETS[key]
        rows.append([key, f"{value:.3f}", f"{direction} {target:g}", _verdict(key, value),
                     details[key]])  # fmt: skip
    text = table(
        f"long run: ViT 1x32 on digits, {steps:,} steps at logging_steps=1 "
        f"({train_s:.0f} s with its start), 1 thread, CPU; resume against {short_steps:,} steps",
        ["row", "measured", "target", "verdict", "detail"],
        rows,
    )
    if by_tenth:
        text += "\nsteps/s by tenth of the long run: " + " ".join(f"{r:.0f}" for r in by_tenth)
    return text, values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=LONG_STEPS, help="the long run's steps")
    parser.add_argument("--short-steps", type=int, default=None, help="the short run's steps")
    parser.add_argument("--poll-s", type=float, default=POLL_S, help="seconds of web polling")
    parser.add_argument("--resume-rounds", type=int, default=RESUME_ROUNDS)
    parser.add_argument("--keep", type=Path, default=None, help="work folder to leave behind")
    args = parser.parse_args(argv)
    text, _ = run(args.steps, args.short_steps, args.poll_s, args.resume_rounds, args.keep)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
