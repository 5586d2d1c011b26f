"""Watching jobs on their targets: one poll per target asks Slurm about all of its jobs in one
round trip (squeue, then sacct for the ones squeue no longer lists) and takes each run's log
tail; rsync refreshes each job's local mirror (run.json, metrics.jsonl, summary.json) over the
same shared connection. Between polls the wait doubles while nothing changes (2, 4, 8 ... 60
s, as submitit does) and drops back to 2 s when something does: never one SSH connection per
job per second.

A target that does not answer is recorded on its jobs (`unreachable`), a badge rather than a
state: the jobs keep their last known state.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trainforge.errors import UserError
from trainforge.runfolder import RunFolder
from trainforge.targets.jobs import FINAL, JobRecord, mirror_dir
from trainforge.targets.remote import Remote
from trainforge.targets.spec import Target

BACKOFF_S = (2.0, 60.0)  # first wait, longest wait
_LAYOUT = RunFolder(Path("."))
MIRRORED = (_LAYOUT.run_json.name, _LAYOUT.metrics.name, _LAYOUT.summary.name)
LOG_TAIL_LINES = 200
RUNNING = ("RUNNING", "CONFIGURING", "COMPLETING", "STAGE_OUT", "SIGNALING")
REQUEUED = ("REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED")


def _probe(records: list[JobRecord]) -> str:
    ids = ",".join(r.job_id for r in records)
    parts = [
        f"squeue -h -o 'tf-q=%i|%T|%r' -j {ids} 2>/dev/null",
        f"sacct -n -P -X -j {ids} -o JobID,State,ExitCode,Restarts 2>/dev/null | sed 's/^/tf-a=/'",
    ]
    for r in records:
        # scontrol knows a finished job for MinJobAge (5 min by default) where no accounting
        # database backs sacct; sacct covers what comes later.
        parts.append(f"scontrol -o show job {r.job_id} 2>/dev/null | sed 's/^/tf-c=/'")
        parts.append(
            f"echo 'tf-log={r.name}'; tail -n {LOG_TAIL_LINES} {shlex.quote(r.log)} 2>/dev/null"
        )
    parts.append("echo 'tf-end=1'")
    return "; ".join(parts)


def _parse(text: str) -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, str]]:
    queue, accounting, logs = {}, {}, {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("tf-q="):
            fields = line[5:].split("|")
            queue[fields[0].split("_")[0]] = fields[1:]
        elif line.startswith("tf-a="):
            fields = line[5:].split("|")
            accounting[fields[0]] = fields[1:]
            # An array's tasks (ID_0, ID_1 ...) speak for the array: the first that did not
            # complete, else the first.
            base = fields[0].split("_")[0]
            if base != fields[0] and (
                base not in accounting or accounting[base][0].startswith("COMPLETED")
            ):
                accounting[base] = fields[1:]
        elif line.startswith("tf-c="):
            pairs = dict(item.split("=", 1) for item in line[5:].split() if "=" in item)
            key = pairs.get("ArrayJobId") or pairs.get("JobId")  # an array's task: its array
            state = pairs.get("JobState", "")
            # An array's tasks speak for it as in sacct's lines: one not completed wins.
            unfinished = "ArrayJobId" in pairs and not state.startswith("COMPLETED")
            if key and (key not in accounting or unfinished):
                accounting[key] = [state, pairs.get("ExitCode", "")]
        elif line.startswith(("tf-log=", "tf-end=")):
            current = logs.setdefault(line[7:], []) if line.startswith("tf-log=") else None
            continue
        elif current is not None:
            current.append(line)
    return queue, accounting, {k: "\n".join(v) for k, v in logs.items()}


def _summary(record: JobRecord) -> dict[str, Any] | None:
    path = mirror_dir(record) / _LAYOUT.summary.name
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None


def state_of(
    record: JobRecord, queued: list[str] | None, accounted: list[str] | None, summary: dict | None
) -> tuple[str, str]:
    """(state, reason) from what squeue and sacct say and the run's own summary."""
    if queued is not None:
        slurm, reason = queued[0], (queued[1] if len(queued) > 1 else "")
        if slurm in REQUEUED or (slurm == "PENDING" and record.state in ("running", "requeued")):
            return "requeued", reason if reason != "None" else ""
        if slurm in ("PENDING", "SUSPENDED"):
            return "pending", reason if reason != "None" else ""
        if slurm in RUNNING:
            return ("stopping" if record.state == "stopping" else "running"), ""
    if accounted is not None:
        slurm, code = accounted[0].split(" ")[0], (accounted[1] if len(accounted) > 1 else "")
        if slurm in ("PENDING",):
            return "pending", ""
        if slurm in RUNNING or slurm.startswith("REQUEUE"):
            return "running", ""
        stopped = bool(summary and summary.get("interrupted"))
        if slurm == "COMPLETED" and not stopped:
            return "completed", ""
        # A Stop that lands as the run finishes: scancel makes the job CANCELLED, yet the run
        # wrote its summary uninterrupted (its final model is saved), so it completed.
        if record.state == "stopping" and summary is not None and not stopped:
            return "completed", ""
        if stopped:
            return "stopped", f"{summary.get('signal') or 'stopped'}: checkpoint saved"
        return "failed", f"{slurm.lower()} (exit {code})" if code else slurm.lower()
    return record.state, record.reason


def _metric(record: JobRecord) -> tuple[int | None, dict[str, float]]:
    """The newest step and the newest validation record's numbers, from the mirror."""
    path = mirror_dir(record) / _LAYOUT.metrics.name
    if not path.is_file():
        return record.step, record.metric
    step, metric = record.step, record.metric
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        step = row.get("step", step)
        if row.get("split") == "val":
            metric = {k: v for k, v in row.items() if k in ("accuracy", "loss", "per", "wer")}
    return step, metric


def mirror(remote: Remote, record: JobRecord) -> None:
    folder = mirror_dir(record)
    folder.mkdir(parents=True, exist_ok=True)
    if record.options.get("sweep"):  # the study and its trials' records, not their weights
        source = remote.rsync_destination(record.run_dir) + "/"
        heavy = (_LAYOUT.checkpoints, _LAYOUT.tensorboard, _LAYOUT.model)
        skip = [word for path in heavy for word in ("--exclude", path.name)]
        remote.rsync([*skip, source, f"{folder}/"], timeout=300)
        return
    sources = [remote.rsync_destination(f"{record.run_dir}/{name}") for name in MIRRORED]
    remote.rsync(["--ignore-missing-args", *sources, f"{folder}/"], timeout=300)


def poll_target(target: Target, records: list[JobRecord]) -> list[JobRecord]:
    """Refresh the target's unfinished jobs (one round trip plus an rsync per job)."""
    live = [r for r in records if r.state not in FINAL]
    if not live:
        return []
    now = datetime.now(UTC).isoformat(timespec="seconds")
    remote = Remote(target)
    try:
        done = remote.run(_probe(live), timeout=120)
        queue, accounting, logs = _parse(done.out)
        for record in live:
            mirror(remote, record)
    except UserError as err:
        for record in live:
            record.unreachable = err.line()
        return live
    for record in live:
        (mirror_dir(record) / "log.tail").write_text(logs.get(record.name, ""), encoding="utf-8")
        record.step, record.metric = _metric(record)
        record.state, record.reason = state_of(
            record, queue.get(record.job_id), accounting.get(record.job_id), _summary(record)
        )
        record.updated_at, record.unreachable = now, ""
    return live


class Backoff:
    """The wait before the next poll: doubles while nothing changes, back to the first on a
    change."""

    def __init__(self, first: float = BACKOFF_S[0], longest: float = BACKOFF_S[1]) -> None:
        self.first, self.longest, self.wait = first, longest, first

    def next(self, changed: bool) -> float:
        self.wait = self.first if changed else min(self.longest, self.wait * 2)
        return self.wait


def watch(
    target: Target,
    records: list[JobRecord],
    until: Callable[[list[JobRecord]], bool],
    on_poll: Callable[[list[JobRecord]], None],
    *,
    deadline_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[JobRecord]:
    """Poll the target with back-off until `until(records)`; `on_poll` sees each result."""
    backoff = Backoff()
    started = time.monotonic()
    while True:
        before = [(r.state, r.step) for r in records]
        polled = poll_target(target, records)
        on_poll(polled)
        if until(records) or (deadline_s and time.monotonic() - started > deadline_s):
            return records
        sleep(backoff.next(before != [(r.state, r.step) for r in records]))


def log_tail(record: JobRecord) -> str:
    path = Path(mirror_dir(record)) / "log.tail"
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
