"""One trial: its `trainforge train` child process, and what its end means for the study.

A trial trains in a child process, never in the sweep's own: the same command a user would
type (`trainforge train CONFIG FLAGS --set PATH=VALUE ... --output_dir runs/NAME --run_name
trial-NNN`), so the folder records the recipe and the trial reproduces alone; a retry of a
trial whose worker died is `trainforge train --resume runs/NAME/trial-NNN`. The child's
output goes to `logs/trial-NNN.log`. On Linux the child is asked for SIGTERM when its worker
dies (PR_SET_PDEATHSIG), so it saves a checkpoint instead of training on unwatched.

Outcomes: exit 0 with a `pruned` stop reason -> PRUNED; exit 0 -> COMPLETE with the metric
of the final validation; stopped by a signal (exit 128+N, or killed) -> back to the queue
(the trial resumes when the sweep goes on); any other exit -> FAIL with the child's last
line on stderr as its one-line reason. In a sweep with the `latency_ms` objective a COMPLETE
trial is then exported and timed by the export package's commands (`sweep.latency`); their
failure fails it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainforge.runfolder import RunFolder
from trainforge.sweep.latency import LATENCY, read_latency
from trainforge.sweep.latency import commands as latency_commands
from trainforge.sweep.pruning import PRUNED_PREFIX, TRIAL_ENV, trial_env
from trainforge.sweep.space import set_flags
from trainforge.sweep.study import SweepFolder, objectives

COMPLETE, PRUNED, FAIL, REQUEUE = "COMPLETE", "PRUNED", "FAIL", "REQUEUE"
_HOLDER_WAIT_S = 300.0  # a dead worker's child may still be writing its checkpoint


@dataclass(frozen=True)
class Outcome:
    state: str
    value: float | None = None
    reason: str = ""
    latency_ms: float | None = None  # an edge-aware sweep's measured batch-1 latency


def command(request: dict[str, Any], folder: SweepFolder, number: int, values: dict) -> list[str]:
    """The child's command line: a fresh trial, or the resume of one that started."""
    run = RunFolder(folder.trial_dir(number))
    base = [sys.executable, "-m", "trainforge", "train"]
    if run.is_run():
        return [*base, "--resume", str(run.path)]
    return [
        *base,
        request["config"],
        *request["train_args"],
        *set_flags(values),
        "--set",
        f"output.dir={folder.path}",
        "--set",
        f"output.run_name={folder.trial_name(number)}",
    ]


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the worker thread that started it dies."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def wait_for_holder(run: RunFolder, deadline_s: float = _HOLDER_WAIT_S) -> None:
    """Before resuming: let a dead worker's child finish its checkpoint and let go."""
    end = time.monotonic() + deadline_s
    while run.holder() is not None and time.monotonic() < end:
        time.sleep(0.5)


def run_trial(
    request: dict[str, Any],
    folder: SweepFolder,
    trial: Any,
    values: dict,
    *,
    number: int,
    threads: int | None,
    started: list[subprocess.Popen],
) -> Outcome:
    """Train trial `number` (the folder's number) to its end; its outcome for the study."""
    args = command(request, folder, number, values)
    if args[4] == "--resume":
        wait_for_holder(RunFolder(folder.trial_dir(number)))
    env = dict(os.environ)
    env[TRIAL_ENV] = trial_env(
        str(folder.journal.resolve()), folder.name, trial._trial_id, request["metric"],
        request["pruner"], report=len(objectives(request)) == 1,
    )  # fmt: skip
    if threads:
        env["TRAINFORGE_THREADS"] = str(threads)
    log_path = folder.trial_log(number)
    code = _child(args, env, log_path, request, started)
    result = outcome(code, RunFolder(folder.trial_dir(number)), request["metric"], log_path)
    if result.state != COMPLETE or LATENCY not in dict(objectives(request)):
        return result
    return _with_latency(result, request, folder.trial_dir(number), log_path, started)


def _child(
    args: list[str], env: dict[str, str], log_path: Path, request: dict[str, Any],
    started: list[subprocess.Popen],
) -> int:  # fmt: skip
    """Run one child to its end with its output appended to the trial's log."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(args)}\n")
        log.flush()
        process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            cwd=request.get("cwd") or None, preexec_fn=_die_with_parent,
        )  # fmt: skip
        started.append(process)
        try:
            return process.wait()
        finally:
            started.remove(process)


def _with_latency(
    result: Outcome, request: dict[str, Any], run_dir: Path, log_path: Path,
    started: list[subprocess.Popen],
) -> Outcome:  # fmt: skip
    """The trained trial exported and timed (`sweep.latency`), its latency added."""
    fmt = request.get("export_format") or "onnx"
    for args in latency_commands(run_dir, fmt):
        code = _child(args, dict(os.environ), log_path, request, started)
        if code < 0 or code in (128 + signal.SIGINT, 128 + signal.SIGTERM, 128 + signal.SIGUSR1):
            return Outcome(REQUEUE, reason=f"stopped by a signal while timing (exit {code})")
        if code != 0:
            return Outcome(FAIL, reason=f"{args[3]} for latency_ms: {last_line(log_path)}")
    latency_ms, _ = read_latency(run_dir)
    return Outcome(COMPLETE, result.value, latency_ms=latency_ms)


def outcome(code: int, run: RunFolder, metric: str, log_path: Path) -> Outcome:
    if code < 0 or code in (128 + signal.SIGINT, 128 + signal.SIGTERM, 128 + signal.SIGUSR1):
        return Outcome(REQUEUE, reason=f"stopped by a signal (exit {code})")
    if code != 0:
        return Outcome(FAIL, reason=last_line(log_path) or f"exit code {code}")
    try:
        summary = json.loads(run.summary.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return Outcome(FAIL, reason=f"{run.summary} was not written")
    value = (summary.get("final_metrics") or {}).get(metric)
    if str(summary.get("stop_reason", "")).startswith(PRUNED_PREFIX):
        return Outcome(PRUNED, value, summary["stop_reason"])
    if value is None:
        return Outcome(FAIL, reason=f"the run reported no validation {metric}")
    return Outcome(COMPLETE, float(value))


def last_line(log_path: Path) -> str:
    """The child's last non-empty line: a trainforge user error is one line, so this is it."""
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if line.strip():
            return line.strip()[:300]
    return ""
