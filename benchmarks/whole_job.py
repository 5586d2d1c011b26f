"""The main job as a whole process: `trainforge train config/vit_digits.yaml` against a plain
PyTorch script doing the same job (benchmarks/peers/plain_digits.py), alternating processes.

What a user waits for is the command at a terminal, so each side runs under a pseudo-terminal
(what a shell gives it: trainforge draws its live bar and hands the report to a detached
child, as it does for a user) and is timed from just before the process is started to its
exit, split into
- start-up: process start -> first training step (imports, config, data, model, run folder);
- training: first step -> last step, evaluations every 5 epochs included;
- finish: last step -> exit (final evaluation passes, final save, summaries).
The plain script prints `first_step_unix` and `last_step_unix` itself. For trainforge the
last step is the time of the last training record in its metrics.jsonl and the training
time the fit time its summary.json records (`train_time_s`, fit start to fit end):
start-up = last step - train_time_s - process start. The report drawn after exit is not in
the total; its own column says how long after the exit the page was complete, and the next
process starts only then, so it never slows the other side.

Pair i trains with seed i on both sides, and the accuracy compared is the mean over the
pairs: the validation accuracy of a run moves by a few of the 360 images from one seed to the
next on either side, so a single seed would compare draws, not recipes.

Targets (issue "the cost of watching"): whole process <= 1.0x the plain script over 5
alternating pairs, start-up at most 1.5 s more, validation accuracy equal or better; the
training phase's ratio is reported beside them. Both sides run with a private
TMPDIR so that trainings of other users on a shared machine do not shrink trainforge's
thread budget (hardware/threads.py) while the plain script takes every core.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import pty
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from common import alternate, median, table

REPO = Path(__file__).resolve().parents[1]
PLAIN = Path(__file__).resolve().parent / "peers" / "plain_digits.py"


@dataclass
class Timing:
    total_s: float
    startup_s: float
    train_s: float
    finish_s: float
    accuracy: float
    report_s: float = float("nan")  # report complete, seconds after the exit


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", TMPDIR=str(tmp))
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "src"), str(REPO / "benchmarks"), env.get("PYTHONPATH")) if p
    )
    return env


Lines = list[tuple[float, str]]
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def _run_lines(argv: list[str], env: dict[str, str]) -> tuple[float, float, Lines]:
    """(start, exit, [(arrival time, line)]) of one process on a pseudo-terminal; raises
    when it fails. The live bar's redraws (escape sequences, carriage returns) are removed."""
    leader, follower = pty.openpty()
    started = time.time()
    try:
        process = subprocess.Popen(
            argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower
        )
    finally:
        os.close(follower)
    lines: Lines = []
    pending = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the process and every holder of the terminal closed it
            chunk = b""
        if not chunk:
            break
        pending += chunk
        *complete, pending = pending.split(b"\n")
        now = time.time()
        lines += [(now, _ESCAPES.sub("", raw.decode("utf-8", "replace"))) for raw in complete]
    os.close(leader)
    code = process.wait()
    ended = time.time()
    if code != 0:
        tail = "\n".join(line for _, line in lines[-15:])
        raise RuntimeError(f"{argv[1:3]} exited {code}:\n{tail}")
    return started, ended, lines


def _await_report(path: Path, exited: float, deadline_s: float = 600.0) -> float:
    """Seconds after the exit at which the detached child had the report page in place."""
    while not path.is_file():
        if time.time() - exited > deadline_s:
            raise RuntimeError(f"no report at {path} {deadline_s:.0f} s after the run ended")
        time.sleep(0.05)
    return path.stat().st_mtime - exited


def run_trainforge(epochs: int, warmup: int, tmp: Path, seed: int) -> Timing:
    out = tmp / "runs"
    name = f"whole-{seed}"
    sets = [f"output.dir={out}", f"output.run_name={name}", "output.overwrite=true",
            f"training.num_train_epochs={epochs}", f"schedule.warmup_epochs={warmup}",
            f"training.seed={seed}"]  # fmt: skip
    argv = [sys.executable, "-m", "trainforge", "train", "config/vit_digits.yaml"]
    argv += [arg for value in sets for arg in ("--set", value)]
    started, ended, _lines = _run_lines(argv, _env(tmp))
    summary = json.loads((out / name / "summary.json").read_text())
    records = (json.loads(line) for line in (out / name / "metrics.jsonl").open())
    train_times = [r["time"] for r in records if r.get("split") == "train"]
    if not train_times:
        raise RuntimeError("no training record in trainforge's metrics.jsonl")
    last_step, train_s = train_times[-1], float(summary["train_time_s"])
    return Timing(
        total_s=ended - started,
        startup_s=last_step - train_s - started,
        train_s=train_s,
        finish_s=ended - last_step,
        accuracy=float(summary["final_metrics"]["accuracy"]),
        report_s=_await_report(out / name / "report.html", ended),
    )


def run_plain(epochs: int, warmup: int, tmp: Path, seed: int) -> Timing:
    argv = [sys.executable, str(PLAIN), str(tmp / f"plain-{seed}"), "--epochs", str(epochs),
            "--warmup-epochs", str(warmup), "--seed", str(seed)]  # fmt: skip
    started, ended, lines = _run_lines(argv, _env(tmp))
    stamps = {}
    for _, line in lines:
        key, _, value = line.partition(" ")
        if key in ("first_step_unix", "last_step_unix", "accuracy"):
            stamps[key] = float(value)
    first, last = stamps["first_step_unix"], stamps["last_step_unix"]
    return Timing(
        total_s=ended - started,
        startup_s=first - started,
        train_s=last - first,
        finish_s=ended - last,
        accuracy=stamps["accuracy"],
    )


def run(epochs: int = 40, pairs: int = 5, warmup: int = 3) -> tuple[str, dict[str, float]]:
    """The main job `pairs` times per side, seed i in pair i; `epochs`/`warmup` shrink it for
    the tests."""
    with tempfile.TemporaryDirectory(prefix="whole-job-") as folder:
        tmp = Path(folder)
        rounds = {"trainforge": itertools.count(), "plain": itertools.count()}  # = the seed
        results = alternate(
            {
                "trainforge train": lambda: run_trainforge(
                    epochs, warmup, tmp, next(rounds["trainforge"])
                ),
                "plain PyTorch script": lambda: run_plain(
                    epochs, warmup, tmp, next(rounds["plain"])
                ),
            },
            pairs,
        )
    med = {
        name: Timing(*(median([getattr(t, f) for t in runs]) for f in Timing.__dataclass_fields__))
        for name, runs in results.items()
    }
    mean_accuracy = {
        name: sum(r.accuracy for r in runs) / len(runs) for name, runs in results.items()
    }
    rows = [
        [name, f"{t.total_s:.2f}", f"{t.startup_s:.2f}", f"{t.train_s:.2f}", f"{t.finish_s:.2f}",
         "-" if math.isnan(t.report_s) else f"{t.report_s:.2f}",
         f"{mean_accuracy[name] * 100:.2f} %",
         " ".join(f"{r.accuracy * 100:.1f}" for r in results[name]),
         " ".join(f"{r.total_s:.1f}" for r in results[name])]
        for name, t in med.items()
    ]  # fmt: skip
    header = ["side", "total s", "start-up s", "training s", "finish s", "report after exit s",
              "mean val accuracy", "per seed %", "runs s"]  # fmt: skip
    text = table(
        f"Whole process at a terminal, the main job (config/vit_digits.yaml, {epochs} epochs), "
        f"medians of {pairs} alternating pairs (pair i: seed i)",
        header,
        rows,
    )
    tf, plain = med["trainforge train"], med["plain PyTorch script"]
    ratios = {
        "whole_job_ratio": tf.total_s / plain.total_s,
        "whole_job_startup_extra_s": tf.startup_s - plain.startup_s,
        "whole_job_training_ratio": tf.train_s / plain.train_s,
        "whole_job_accuracy_delta": mean_accuracy["trainforge train"]
        - mean_accuracy["plain PyTorch script"],
    }
    return text, ratios


if __name__ == "__main__":
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    text, ratios = run(epochs, pairs, warmup=min(3, epochs - 1))
    print(text)
    print(json.dumps(ratios, indent=2))
