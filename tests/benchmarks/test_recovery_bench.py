"""The recovery benchmark's arithmetic, on the run.json of a recorded Slurm requeue (the real
run is `make bench ONLY=recovery`: root, slurm-wlm and munge)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import recovery
import run as bench_run

# run.json's segments of a job stopped by SIGUSR1 and requeued (trimmed to the times).
RECORDED = {
    "segments": [
        {
            "resume": "start",
            "process_started_at": "2026-11-28T09:47:39.190+00:00",
            "first_step_at": "2026-11-28T09:47:45.912+00:00",
            "end": "SIGUSR1 received",
            "stop_signal": "SIGUSR1",
            "stop_signal_at": "2026-11-28T09:47:46.493+00:00",
            "stop_saved_at": "2026-11-28T09:47:46.538+00:00",
        },
        {
            "resume": "exact",
            "from_checkpoint": "checkpoint_interrupted",
            "process_started_at": "2026-11-28T09:48:09.050+00:00",
            "checkpoint_loaded_at": "2026-11-28T09:48:17.783+00:00",
            "first_step_at": "2026-11-28T09:48:17.814+00:00",
            "recovery_s": 31.321,
        },
    ]
}
# `scontrol show job` after the requeue: SubmitTime is the requeue, StartTime the new start.
JOB = {"SubmitTime": "2026-11-28T09:47:48", "StartTime": "2026-11-28T09:47:59", "Restarts": "1"}


def test_recovery_is_signal_to_first_step_minus_the_queue_wait():
    wait = recovery.queue_wait_s(JOB)
    assert wait == 11.0
    found = recovery.figures(RECORDED, wait, outside=None)
    assert found["source"] == "run.json segments"
    assert found["recovery_save_s"] == pytest.approx(0.045, abs=1e-6)
    assert found["recovery_s"] == pytest.approx(31.321 - 11.0, abs=1e-6)
    phases = dict(found["phases"])
    assert phases["stop signal -> requeued process started"] == pytest.approx(22.557, abs=1e-6)
    assert phases["process started -> checkpoint loaded"] == pytest.approx(8.733, abs=1e-6)
    assert phases["checkpoint loaded -> first step"] == pytest.approx(0.031, abs=1e-6)
    text = recovery.table_text(found)
    assert "run.json segments" in text
    assert [line.split()[-1] for line in text.splitlines() if "recovery_s" in line] == ["20.3"]


def test_without_segment_times_the_outside_clock_is_used():
    outside = recovery.Outside(signal_at=100.0, saved_at=101.5, first_step_at=150.0)
    found = recovery.figures({"segments": [{"resume": "start"}]}, 12.0, outside)
    assert found["source"].startswith("outside")
    assert found["recovery_save_s"] == 1.5 and found["recovery_s"] == 38.0
    with pytest.raises(RuntimeError, match="no stop and restart times"):
        recovery.figures({}, 12.0, outside=None)


def test_a_machine_without_slurm_is_a_miss_row_with_one_line(monkeypatch, capsys):
    reason = "munged not installed: `make test-slurm` installs slurm-wlm and munge"
    monkeypatch.setattr(recovery, "missing_requirements", lambda: reason)
    text, ratios, failure = bench_run.run_module("recovery")
    assert (text, ratios) == ("", {}) and failure == f"RuntimeError: {reason}"
    rows = [row for row in bench_run.BENCHMARKS if row[0] == "recovery"]
    assert rows == [
        ("recovery", "recovery_s", 60.0, "<="),
        ("recovery", "recovery_save_s", 10.0, "<="),
    ]
