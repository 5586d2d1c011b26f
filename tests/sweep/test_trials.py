"""Sweeps that train: a failing trial, a kill -9 mid-sweep, K at once, the digits study."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakes.sweeps import DIGITS, TINY, load_study, run_sweep, sweep_args
from trainforge.engine import checkpoint as ckpt

FINISHED = ("COMPLETE", "PRUNED", "FAIL")


def _counted(study) -> list:
    stale = {n for t in study.trials for n in t.system_attrs.get("retry_history", [])}
    return [t for t in study.trials if t.number not in stale]


def _folder_number(trial) -> int:
    return int(trial.system_attrs.get("failed_trial", trial.number))


@pytest.mark.slow
def test_a_failing_trial_records_its_reason_and_the_sweep_goes_on(tmp_path, space_file):
    space = space_file("params:\n  data.dataset: {choice: [digits, image-folder]}\n")
    # Two points, each drawn once: one trial fails, the other completes, and the sweep exits 0.
    args = sweep_args(space, 2, "fails", "--set", "data.root=nowhere", "--max_steps", "10")
    done = run_sweep(tmp_path, args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 of 2 trials finished: 1 completed, 0 pruned, 1 failed" in done.stdout
    folder = tmp_path / "runs" / "fails"
    trials = load_study(folder).trials
    assert sorted(t.state.name for t in trials) == ["COMPLETE", "FAIL"]
    for t in trials:
        if t.params["data.dataset"] == "image-folder":
            assert t.state.name == "FAIL"
            assert "data.root nowhere does not exist" in t.user_attrs["fail_reason"]
        else:
            assert t.state.name == "COMPLETE" and 0.0 < t.value <= 1.0
            assert (folder / f"trial-{t.number:03d}" / "run.json").is_file()
    # status: the table, summary.csv and summary.md agree with the journal
    status = run_sweep(
        tmp_path, [sys.executable, "-m", "trainforge", "sweep", "status", str(folder)]
    )
    assert status.returncode == 0, status.stderr
    for t in trials:
        assert f"trial-{t.number:03d}" in status.stdout
    rows = list(csv.DictReader((folder / "summary.csv").open()))
    assert {r["trial"]: r["state"] for r in rows} == {
        f"trial-{t.number:03d}": t.state.name for t in trials
    }
    assert "| trial | state | accuracy |" in (folder / "summary.md").read_text()
    report = (folder / "report.html").read_text()
    assert "Parallel coordinates" in report and "accuracy by trial" in report
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert report.count("<circle") == len(complete)  # one point per trial with a metric
    assert report.count("<polyline") >= len(complete)  # its validation curve


def _wait_for(predicate, what: str, deadline_s: float = 600.0) -> None:
    end = time.monotonic() + deadline_s
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.slow
def test_kill_9_mid_sweep_then_the_same_command_finishes_exactly_n(tmp_path, space_file):
    space = space_file(
        "params:\n"
        "  optimizer.learning_rate: {log_uniform: [1.0e-3, 3.0e-3]}\n"
        "  model.embedding_dim: {choice: [32, 64]}\n"
    )
    args = sweep_args(
        space, 3, "killed", "--max_steps", "200", "--set", "evaluation.eval_steps=50",
        "--set", "checkpoint.save_steps=10", "--pruner", "none",
    )  # fmt: skip
    folder = tmp_path / "runs" / "killed"
    victim = folder / "trial-001" / "checkpoints"
    sweep = subprocess.Popen(
        args, cwd=tmp_path, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_for(
            lambda: (
                victim.is_dir() and any(p.name.startswith("checkpoint-") for p in victim.iterdir())
            ),
            "a checkpoint of trial-001",
        )
    finally:
        os.killpg(sweep.pid, signal.SIGKILL)  # the sweep and its trial, no checkpoint saved
        sweep.wait()
    assert not (folder / "trial-001" / "summary.json").exists()
    assert load_study(folder).trials[1].state.name == "RUNNING"

    done = run_sweep(tmp_path, args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "trial-001: resuming" in done.stdout
    study = load_study(folder)
    counted = _counted(study)
    assert len(counted) == 3
    assert all(t.state.name in FINISHED for t in counted)
    assert not [t for t in study.trials if t.state.name == "RUNNING"]
    folders = sorted(_folder_number(t) for t in counted)
    assert len(set(folders)) == 3 and folders[:2] == [0, 1]  # none duplicated, 1 resumed
    record = json.loads((folder / "trial-001" / "run.json").read_text())
    segments = record["segments"]
    assert len(segments) == 2 and segments[1]["from_step"] >= 10
    assert segments[1]["from_checkpoint"].startswith("checkpoint-")
    assert json.loads((folder / "trial-001" / "summary.json").read_text())["global_step"] == 200


@pytest.mark.slow
def test_k_trials_at_once_split_the_thread_budget(tmp_path, space_file):
    space = space_file("params:\n  optimizer.learning_rate: {log_uniform: [1.0e-3, 3.0e-3]}\n")
    args = sweep_args(space, 4, "pair", "--parallel", "2")
    at = args.index("training.num_threads=1")
    del args[at - 1 : at + 1]  # the budget comes from the sweep
    done = run_sweep(tmp_path, args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 at a time" in done.stdout
    study = load_study(tmp_path / "runs" / "pair")
    assert len(study.trials) == 4 and all(t.state.name in FINISHED for t in study.trials)
    cores = max(1, len(os.sched_getaffinity(0)))
    for n in range(4):
        run = json.loads((tmp_path / "runs" / "pair" / f"trial-{n:03d}" / "run.json").read_text())
        assert run["segments"][0]["threads"] == max(1, cores // 2)


@pytest.mark.slow
def test_digits_with_a_median_pruner(tmp_path, space_file):
    """12 trials over the learning rate (log-uniform) and the embedding (choice): one at
    least is pruned, the best reproduces bitwise when trained alone, and a plain Optuna
    client agrees with summary.csv."""
    space = space_file(
        "params:\n"
        "  optimizer.learning_rate: {log_uniform: [1.0e-5, 1.0e-2]}\n"
        "  model.embedding_dim: {choice: [32, 64, 128]}\n"
    )
    done = run_sweep(tmp_path, sweep_args(space, 12, "digits", "--pruner", "median"))
    assert done.returncode == 0, done.stdout + done.stderr
    folder = tmp_path / "runs" / "digits"
    study = load_study(folder)
    states = [t.state.name for t in study.trials]
    assert len(states) == 12 and "PRUNED" in states and "RUNNING" not in states
    pruned = next(t for t in study.trials if t.state.name == "PRUNED")
    run = folder / f"trial-{pruned.number:03d}"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stop_reason"].startswith("pruned") and summary["global_step"] < 20
    # stopped cleanly: a checkpoint of the step it stopped at
    assert ckpt.latest(run / "checkpoints").global_step == summary["global_step"]
    assert max(pruned.intermediate_values) == summary["global_step"]

    rows = {r["trial"]: r for r in csv.DictReader((folder / "summary.csv").open())}
    for t in study.trials:
        row = rows[f"trial-{t.number:03d}"]
        assert row["state"] == t.state.name
        if t.state.name == "COMPLETE":
            assert float(row["value"]) == t.value
        assert float(row["optimizer.learning_rate"]) == t.params["optimizer.learning_rate"]
    best = study.best_trial
    assert rows[f"trial-{best.number:03d}"]["best"] == "True"

    # The best trial's recorded params, trained alone with the same seed: bitwise.
    alone = run_sweep(
        tmp_path,
        [sys.executable, "-m", "trainforge", "train", str(DIGITS), *TINY,
         "--set", f"optimizer.learning_rate={best.params['optimizer.learning_rate']!r}",
         "--set", f"model.embedding_dim={best.params['model.embedding_dim']}",
         "--set", "output.run_name=alone"],
    )  # fmt: skip
    assert alone.returncode == 0, alone.stderr
    summary = json.loads(Path(tmp_path / "runs" / "alone" / "summary.json").read_text())
    assert summary["final_metrics"]["accuracy"] == best.value
    trial = json.loads((folder / f"trial-{best.number:03d}" / "summary.json").read_text())
    assert summary["final_metrics"]["loss"] == trial["final_metrics"]["loss"]
