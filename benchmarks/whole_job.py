"""The main job as a whole process: `trainforge train config/vit_digits.yaml` against a plain
PyTorch script doing the same job (benchmarks/peers/plain_digits.py), alternating processes.

What a user waits for is the command, so each side is timed from just before the process is
started to its exit, and split into
- start-up: process start -> first training step (imports, config, data, model, run folder);
- training: first step -> last step, evaluations every 5 epochs included;
- finish: last step -> exit (final evaluation passes, final save, summaries, report).
The plain script prints `first_step_unix` and `last_step_unix` itself. For trainforge the
training time is the fit time its summary.json records (`train_time_s`, fit start to fit
end), and the last step is when its last epoch line ("epoch 40/40 ...") reached this process
(stdout unbuffered): start-up = that moment - train_time_s - process start.

Targets (issue "performance end to end"): whole process <= 1.05x the plain script, start-up
at most 1.5 s more, validation accuracy equal or better. Both sides run with a private
TMPDIR so that trainings of other users on a shared machine do not shrink trainforge's
thread budget (hardware/threads.py) while the plain script takes every core.
"""

from __future__ import annotations

import json
import os
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


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", TMPDIR=str(tmp))
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "src"), str(REPO / "benchmarks"), env.get("PYTHONPATH")) if p
    )
    return env


Lines = list[tuple[float, str]]


def _run_lines(argv: list[str], env: dict[str, str]) -> tuple[float, float, Lines]:
    """(start, exit, [(arrival time, line)]) of one process; raises when it fails."""
    started = time.time()
    process = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    lines = [(time.time(), line.rstrip("\n")) for line in process.stdout]
    code = process.wait()
    ended = time.time()
    if code != 0:
        tail = "\n".join(line for _, line in lines[-15:])
        raise RuntimeError(f"{argv[1:3]} exited {code}:\n{tail}")
    return started, ended, lines


def run_trainforge(epochs: int, warmup: int, tmp: Path, index: int) -> Timing:
    out = tmp / "runs"
    name = f"whole-{index}"
    sets = [f"output.dir={out}", f"output.run_name={name}", "output.overwrite=true",
            f"training.num_train_epochs={epochs}", f"schedule.warmup_epochs={warmup}"]  # fmt: skip
    argv = [sys.executable, "-m", "trainforge", "train", "config/vit_digits.yaml"]
    argv += [arg for value in sets for arg in ("--set", value)]
    started, ended, lines = _run_lines(argv, _env(tmp))
    summary = json.loads((out / name / "summary.json").read_text())
    last_epoch = [t for t, line in lines if line.startswith(f"epoch {epochs}/{epochs} ")]
    if not last_epoch:
        raise RuntimeError(f"no 'epoch {epochs}/{epochs}' line in trainforge's output")
    last_step, train_s = last_epoch[-1], float(summary["train_time_s"])
    return Timing(
        total_s=ended - started,
        startup_s=last_step - train_s - started,
        train_s=train_s,
        finish_s=ended - last_step,
        accuracy=float(summary["final_metrics"]["accuracy"]),
    )


def run_plain(epochs: int, warmup: int, tmp: Path, index: int) -> Timing:
    argv = [sys.executable, str(PLAIN), str(tmp / f"plain-{index}"), "--epochs", str(epochs),
            "--warmup-epochs", str(warmup)]  # fmt: skip
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


def run(epochs: int = 40, pairs: int = 3, warmup: int = 3) -> tuple[str, dict[str, float]]:
    """The main job `pairs` times per side; `epochs`/`warmup` shrink it for the tests."""
    with tempfile.TemporaryDirectory(prefix="whole-job-") as folder:
        tmp = Path(folder)
        counter = iter(range(10_000))
        results = alternate(
            {
                "trainforge train": lambda: run_trainforge(epochs, warmup, tmp, next(counter)),
                "plain PyTorch script": lambda: run_plain(epochs, warmup, tmp, next(counter)),
            },
            pairs,
        )
    med = {
        name: Timing(*(median([getattr(t, f) for t in runs]) for f in Timing.__dataclass_fields__))
        for name, runs in results.items()
    }
    tf, plain = med["trainforge train"], med["plain PyTorch script"]
    rows = [
        [name, f"{t.total_s:.2f}", f"{t.startup_s:.2f}", f"{t.train_s:.2f}", f"{t.finish_s:.2f}",
         f"{t.accuracy * 100:.2f} %", " ".join(f"{r.total_s:.1f}" for r in results[name])]
        for name, t in med.items()
    ]  # fmt: skip
    text = table(
        f"Whole process, the main job (config/vit_digits.yaml, {epochs} epochs), medians of "
        f"{pairs} alternating pairs",
        ["side", "total s", "start-up s", "training s", "finish s", "val accuracy", "runs s"],
        rows,
    )
    ratios = {
        "whole_job_ratio": tf.total_s / plain.total_s,
        "whole_job_startup_extra_s": tf.startup_s - plain.startup_s,
        "whole_job_accuracy_delta": tf.accuracy - plain.accuracy,
    }
    return text, ratios


if __name__ == "__main__":
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    text, ratios = run(epochs, pairs, warmup=min(3, epochs - 1))
    print(text)
    print(json.dumps(ratios, indent=2))
