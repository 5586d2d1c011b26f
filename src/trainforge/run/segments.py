"""run.json's segments: one per start of a run, and the clock of every stop and restart.

A segment says where that part of the run computed (its nodes: host, node rank, process
count; the split of the step), who started it (the launcher's job: a Slurm job id or
torchrun's rendezvous id, and torchrun's restart count), what it resumed from and with which
guarantee. Its times, ISO 8601 UTC with milliseconds, make the cost of a preemption a
number: on a stopped segment `stop_signal`, `stop_signal_at` (the signal arrived) and
`stop_saved_at` (its checkpoint was on disk); on the next one `process_started_at` (the
process's own start, from the kernel through psutil), `checkpoint_loaded_at`,
`first_step_at`, and `recovery_s` = first_step_at - the previous segment's stop_signal_at
when that is known (a node killed outright leaves no stop time). `ended_at` and `end` close
a segment that ended by itself. The report's scheduling timeline draws them.

Also here: whether a launcher's restart continues the run by itself (`restart_line`). A
requeued Slurm job does (`resume.resume_point`); so does a torchrun job whose agent
restarted its worker group after a failure (`TORCHELASTIC_RESTART_COUNT` > 0) or after a
node joined or left (the same rendezvous id), when run.json says this same job wrote the
run: a first start that was refused never makes its restart take over another run.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainforge import parallel
from trainforge.engine.callbacks import Callback, GracefulStop
from trainforge.errors import UserError
from trainforge.runfolder import RunFolder

if TYPE_CHECKING:
    from trainforge.engine.loop import Loop


def iso(seconds: float | None) -> str | None:
    """Epoch seconds as ISO 8601 UTC with milliseconds (None stays None)."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")


def seconds(text: Any) -> float | None:
    """An ISO 8601 time of run.json back as epoch seconds (None when absent or unreadable)."""
    try:
        return datetime.fromisoformat(str(text)).timestamp() if text else None
    except ValueError:
        return None


def process_started() -> float:
    """When this process started (the kernel's record): the clock of a restart starts there,
    before Python and torch are imported.

    On Linux this is the process's age on the boot-time clock subtracted from now: psutil's
    `create_time()` adds that age to the boot time, which /proc/stat gives in whole seconds
    and which drifts from the wall clock as NTP corrects it, so it can read up to a second
    (or more) early, before the previous process had even saved its checkpoint."""
    age = _process_age_s()
    if age is not None:
        return time.time() - age
    import psutil

    return psutil.Process().create_time()


def _process_age_s() -> float | None:
    """Seconds since this process started (to the kernel's clock tick), None off Linux."""
    try:
        stat = Path("/proc/self/stat").read_text()
        # Field 22 (starttime, in clock ticks since boot); the fields after the command name,
        # which sits in parentheses and may hold spaces, start at field 3.
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        now = time.clock_gettime(time.CLOCK_BOOTTIME)
    except (OSError, IndexError, ValueError, AttributeError):
        return None
    return max(0.0, now - ticks / os.sysconf("SC_CLK_TCK"))


# ------------------------------------------------------------------ the launcher's job
def launcher_job(env: Mapping[str, str] | None = None) -> str | None:
    """The launcher's name for this job (`slurm 4242`, `torchrun two-nodes`), None without."""
    env = os.environ if env is None else env
    if env.get("SLURM_JOB_ID"):
        return f"slurm {env['SLURM_JOB_ID']}"
    if env.get("TORCHELASTIC_RUN_ID"):
        return f"torchrun {env['TORCHELASTIC_RUN_ID']}"
    return None


def restart_line(folder: RunFolder, env: Mapping[str, str] | None = None) -> str | None:
    """One line when torchrun restarted this job's processes and the run in `folder` is this
    job's own (run.json names it): the run continues from its newest checkpoint. None
    otherwise (a fresh start; Slurm's requeue is `resume.resume_point`'s)."""
    env = os.environ if env is None else env
    run_id = env.get("TORCHELASTIC_RUN_ID")
    if not run_id or env.get("SLURM_JOB_ID") or not folder.is_run():
        return None
    try:
        recorded = folder.read_run().get("launcher_job")
    except UserError:
        return None
    restarts = int(env.get("TORCHELASTIC_RESTART_COUNT") or 0)
    if recorded != launcher_job(env):
        return None
    if restarts > 0:
        most = env.get("TORCHELASTIC_MAX_RESTARTS") or "?"
        return (
            f"torchrun restarted this job's processes (restart {restarts} of {most}): "
            "continuing the run from its newest checkpoint"
        )
    if run_id == "none":  # torchrun's default id names no job: a new launch, not a restart
        return None
    return (
        f"torchrun job {run_id} started again (a node joined or left): continuing the run "
        "from its newest checkpoint"
    )


# ------------------------------------------------------------------ a segment
def node_of(env: Mapping[str, str] | None = None) -> tuple[str, int]:
    """(host, node rank) of this process: torchrun's GROUP_RANK or Slurm's SLURM_NODEID."""
    env = os.environ if env is None else env
    node = env.get("GROUP_RANK") or env.get("SLURM_NODEID") or "0"
    return socket.gethostname(), int(node) if node.isdigit() else 0


def nodes(placements: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """Every rank's (host, node rank) as one entry per node with its process count."""
    counts: dict[tuple[str, int], int] = {}
    for place in placements:
        counts[tuple(place)] = counts.get(tuple(place), 0) + 1
    return [{"host": h, "node": n, "processes": c} for (h, n), c in sorted(counts.items())]


def record_segment(
    folder: RunFolder,
    setup: dict[str, Any],
    from_step: int,
    start_from: Path | None,
    guarantee: str = "start",
    reasons: list[str] | None = None,
) -> None:
    """Append where this part of the run computes to run.json's `segments`: the history of
    the machines, process counts and splits a run has moved over. Called on every rank right
    after the checkpoint is loaded (the ranks' nodes are gathered); rank 0 writes. `setup`:
    how the run computes (`engine.resumable.RunSetup.now`), `from_step` its step now."""
    loaded_at = time.time() if start_from else None
    placements = parallel.gather_objects(node_of())  # collective: every rank
    if not parallel.context().is_main:
        return
    record = folder.read_run()
    restarts = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    segment = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "nodes": nodes(placements),
        "folder": str(folder.path.resolve()),
        **setup,
        "launcher_job": launcher_job(),
        "restart_count": int(restarts) if restarts and restarts.isdigit() else None,
        "from_checkpoint": start_from.name if start_from else None,
        "from_step": from_step,
        "resume": guarantee,
        "reasons": reasons or [],
        "process_started_at": iso(process_started()),
        "checkpoint_loaded_at": iso(loaded_at),
        "first_step_at": None,
        "recovery_s": None,
    }
    record["segments"] = [*record.get("segments", []), segment]
    folder.write_run(record)


def update_segment(folder: RunFolder, fields: dict[str, Any]) -> None:
    """Write `fields` into run.json's newest segment (this process's)."""
    record = folder.read_run()
    found = record.get("segments") or []
    if found:
        found[-1] = {**found[-1], **fields}
        folder.write_run(record)


def recovery_s(previous: Mapping[str, Any], first_step_at: float) -> float | None:
    """Seconds from the previous segment's stop signal to this one's first step."""
    stopped = seconds(previous.get("stop_signal_at"))
    return None if stopped is None else round(first_step_at - stopped, 3)


class SegmentClock(Callback):
    """Rank 0 writes the times of this segment into run.json: the first step (and the
    recovery time since the previous segment's stop, said in one line), and at the end how
    it ended, with the stop signal's times from `stop` (the run's GracefulStop)."""

    def __init__(self, folder: RunFolder, stop: GracefulStop) -> None:
        self.folder = folder
        self.stop = stop
        self.first_step_at: float | None = None

    def on_step_end(self, loop: Loop) -> None:
        if self.first_step_at is not None:
            return
        self.first_step_at = time.time()
        if not parallel.context().is_main:
            return
        found = self.folder.read_run().get("segments") or []
        previous = found[-2] if len(found) > 1 else {}
        recovery = recovery_s(previous, self.first_step_at)
        update_segment(self.folder, {"first_step_at": iso(self.first_step_at),
                                     "recovery_s": recovery})  # fmt: skip
        if recovery is None:
            return
        saved = seconds(previous.get("stop_saved_at"))
        stopped = seconds(previous.get("stop_signal_at")) or 0.0
        save = f", its checkpoint saved in {saved - stopped:.1f} s" if saved else ""
        print(
            f"resume: training again {recovery:.1f} s after the stop "
            f"({previous.get('stop_signal')} at {previous['stop_signal_at']}{save})"
        )

    def on_fit_end(self, loop: Loop) -> None:
        if not parallel.context().is_main:
            return
        fields: dict[str, Any] = {"ended_at": iso(time.time()), "end": loop.outcome.reason}
        if loop.outcome.interrupted and self.stop.received:
            fields |= {
                "stop_signal": self.stop.received,
                "stop_signal_at": iso(self.stop.received_at),
                "stop_saved_at": iso(self.stop.saved_at),
            }
        update_segment(self.folder, fields)
