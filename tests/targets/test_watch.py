"""What a poll makes of Slurm's answers: one round trip's output parsed per job, the state
each job is in, and the back-off between polls."""

from __future__ import annotations

import pytest

from trainforge.targets.jobs import JobRecord
from trainforge.targets.watch import Backoff, _parse, _probe, state_of


def record(state: str = "queued") -> JobRecord:
    return JobRecord("r", "hpc", "42", "c.yaml", "runs/r", "runs/slurm/x-42.out", "t", state=state)


def test_one_probe_asks_about_every_job_and_its_answer_is_split_per_job():
    probe = _probe([record(), JobRecord("s", "hpc", "43", "c", "runs/s", "l", "t")])
    assert probe.count("squeue") == 1 and "-j 42,43" in probe and probe.count("sacct") == 1
    out = "\n".join([
        "tf-q=42|PENDING|Resources",
        "tf-a=43|COMPLETED|0:0|0",
        "tf-c=JobId=43 JobName=x JobState=COMPLETED Reason=None ExitCode=0:0",
        "tf-log=r", "line 1", "line 2", "tf-log=s", "other", "tf-end=1",
    ])  # fmt: skip
    queue, accounting, logs = _parse(out)
    assert queue == {"42": ["PENDING", "Resources"]}
    assert accounting == {"43": ["COMPLETED", "0:0", "0"]}
    assert logs == {"r": "line 1\nline 2", "s": "other"}


@pytest.mark.parametrize(
    ("before", "queued", "accounted", "summary", "expected"),
    [
        ("queued", ["PENDING", "Resources"], None, None, ("pending", "Resources")),
        ("queued", ["RUNNING", "None"], None, None, ("running", "")),
        ("running", ["PENDING", "BeginTime"], None, None, ("requeued", "BeginTime")),
        ("running", ["REQUEUE_HOLD", "None"], None, None, ("requeued", "")),
        ("stopping", ["COMPLETING", "None"], None, None, ("stopping", "")),
        ("running", None, ["COMPLETED", "0:0"], {"interrupted": False}, ("completed", "")),
        (
            "stopping",
            None,
            ["CANCELLED", "0:15"],
            {"interrupted": True, "signal": "SIGTERM"},
            ("stopped", "SIGTERM: checkpoint saved"),
        ),
        # the Stop lands as the run finishes: Slurm says cancelled, the run completed
        ("stopping", None, ["CANCELLED", "0:15"], {"interrupted": False}, ("completed", "")),
        ("stopping", None, ["CANCELLED", "0:9"], None, ("failed", "cancelled (exit 0:9)")),
        ("running", None, ["FAILED", "1:0"], None, ("failed", "failed (exit 1:0)")),
        ("running", None, ["NODE_FAIL", "0:0"], None, ("failed", "node_fail (exit 0:0)")),
        ("queued", None, None, None, ("queued", "")),
    ],
)
def test_the_state_follows_slurm_and_the_runs_summary(before, queued, accounted, summary, expected):
    assert state_of(record(before), queued, accounted, summary) == expected


def test_the_wait_doubles_while_nothing_changes_and_drops_back_on_a_change():
    backoff = Backoff()
    waits = [backoff.next(changed=False) for _ in range(7)]
    assert waits == [4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    assert backoff.next(changed=True) == 2.0
