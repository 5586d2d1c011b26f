"""Each point is drawn once: a restarted sweep and three sweep processes on one journal never
evaluate the same parameters twice (Optuna's retry of a dead trial aside), and the draws are
a function of (seed, trial number) alone."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from fakes.sweeps import load_study, run_sweep, sweep_args

FINISHED = ("COMPLETE", "PRUNED", "FAIL")
# Two continuous params: a repeat can only come from a sampler drawing the same stream again.
SPACE = (
    "params:\n"
    "  optimizer.learning_rate: {log_uniform: [1.0e-3, 3.0e-3]}\n"
    "  model.mlp_dropout: {uniform: [0.0, 0.2]}\n"
)
SMALL = ["--set", "model.num_layers=1", "--set", "model.embedding_dim=32"]


def _key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


def _retries(study) -> dict[int, int]:
    """retry trial number -> the number of the dead trial it repeats."""
    return {
        t.number: int(t.system_attrs["failed_trial"])
        for t in study.trials
        if "failed_trial" in t.system_attrs
    }


def _wait_for(predicate, what: str, deadline_s: float = 300.0) -> None:
    end = time.monotonic() + deadline_s
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_restart_after_kill_9_draws_no_point_twice(tmp_path, space_file):
    space = space_file(SPACE)
    args = sweep_args(space, 6, "restart", "--max_steps", "60", "--pruner", "none", *SMALL)
    folder = tmp_path / "runs" / "restart"
    sweep = subprocess.Popen(
        args, cwd=tmp_path, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_for(lambda: (folder / "trial-001" / "run.json").is_file(), "trial-001 to start")
    finally:
        os.killpg(sweep.pid, signal.SIGKILL)  # the sweep and its trial
        sweep.wait()
    assert load_study(folder).trials[1].state.name == "RUNNING"

    done = run_sweep(tmp_path, args)
    assert done.returncode == 0, done.stdout + done.stderr
    study = load_study(folder)
    retries = _retries(study)
    stale = set(retries.values())
    counted = [t for t in study.trials if t.number not in stale]
    assert len(counted) == 6 and all(t.state.name in FINISHED for t in counted)
    assert list(retries.values()) == [1]  # the killed trial, retried once
    seen: dict[tuple, int] = {}
    for t in counted:
        key = _key(t.params)
        assert key not in seen, f"trial {t.number} repeats trial {seen[key]}: {t.params}"
        seen[key] = t.number


def _three_at_once(cwd, space) -> dict[int, tuple]:
    """Three sweep processes on one journal, started together: trial number -> point."""
    args = sweep_args(space, 9, "three", "--max_steps", "10", "--pruner", "none", *SMALL)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = [
        subprocess.Popen(
            args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], "\n".join(outputs)
    assert all("trial-" in out for out in outputs)
    study = load_study(cwd / "runs" / "three")
    assert len(study.trials) == 9 and all(t.state.name == "COMPLETE" for t in study.trials)
    workers = {t.user_attrs["worker"] for t in study.trials}
    assert len(workers) >= 2, workers  # the processes shared the work
    return {t.number: _key(t.params) for t in study.trials}


@pytest.mark.slow
def test_three_processes_on_one_journal_draw_nine_points_once_and_again_the_same(
    tmp_path, space_file
):
    space = space_file(SPACE)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _three_at_once(tmp_path / "a", space)
    assert len(set(first.values())) == 9
    again = _three_at_once(tmp_path / "b", space)
    assert again == first  # the same point for each trial number, from scratch
