"""The jobs this machine started on targets: one JSON file, read and written under a lock so
the command line and the web app can share it.

A record says where the run is (target, Slurm job id, the run folder on the cluster, the log)
and what was last seen of it (state, Slurm's reason, step, metric); `watch` refreshes it. The
file lives in `$XDG_DATA_HOME/trainforge/jobs.json` (`~/.local/share/...`), or
`$TRAINFORGE_JOBS`; each job's local mirror (run.json, metrics.jsonl, summary.json, the log
tail) sits beside it in `mirror/TARGET/NAME/`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from trainforge.errors import UserError

ENV = "TRAINFORGE_JOBS"
# queued: submitted, not yet seen by Slurm; pending: waiting (with squeue's reason); the rest
# as Slurm and the run say. The last three are final.
STATES = ("queued", "pending", "running", "requeued", "stopping", "stopped", "completed", "failed")
FINAL = ("stopped", "completed", "failed")


@dataclass
class JobRecord:
    name: str  # the run's name: the run folder's, and what `jobs NAME` commands take
    target: str
    job_id: str
    config: str
    run_dir: str  # the run folder on the cluster, relative to the target's project folder
    log: str  # the job's log there, same base
    submitted_at: str
    state: str = "queued"
    reason: str = ""  # squeue's reason for a pending job, or why a job failed
    step: int | None = None
    metric: dict[str, float] = field(default_factory=dict)
    updated_at: str = ""
    unreachable: str = ""  # the last poll's connection problem (a badge, not a state)
    options: dict[str, Any] = field(default_factory=dict)  # what `jobs resume` submits again

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def data_dir(env: dict[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get(ENV):
        return Path(env[ENV]).expanduser().parent
    base = Path(env["XDG_DATA_HOME"]) if env.get("XDG_DATA_HOME") else Path.home() / ".local/share"
    return base / "trainforge"


def jobs_file() -> Path:
    return Path(os.environ[ENV]).expanduser() if os.environ.get(ENV) else data_dir() / "jobs.json"


def mirror_dir(record: JobRecord) -> Path:
    return mirror_path(record.target, record.name)


def mirror_path(target: str, name: str) -> Path:
    """Where the local mirror of run `name` on `target` is kept."""
    return data_dir() / "mirror" / target / name


@contextlib.contextmanager
def _locked() -> Iterator[Path]:
    path = jobs_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield path


def _read(path: Path) -> dict[str, JobRecord]:
    if not path.is_file():
        return {}
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UserError(f"jobs file {path} is not readable ({err})", "move it aside") from None
    return {row["name"]: JobRecord.from_dict(row) for row in rows if isinstance(row, dict)}


def _write(path: Path, records: dict[str, JobRecord]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".jobs-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump([asdict(r) for r in records.values()], handle, indent=1)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def all_jobs() -> list[JobRecord]:
    with _locked() as path:
        return list(_read(path).values())


def get_job(name: str) -> JobRecord:
    with _locked() as path:
        records = _read(path)
    if name not in records:
        known = ", ".join(records) or "none yet"
        raise UserError(f"no job named {name!r} (known: {known})", "list them: trainforge jobs")
    return records[name]


def ensure_free(name: str) -> None:
    """One line when a job of this name is still waiting or running: a second one would
    write into the same run folder."""
    with _locked() as path:
        old = _read(path).get(name)
    if old is not None and old.state not in FINAL:
        raise UserError(
            f"a job named {name} is {old.state} on {old.target} (Slurm job {old.job_id})",
            f"stop it first (trainforge jobs stop {name}) or name the run otherwise",
        )


def save_job(record: JobRecord) -> None:
    with _locked() as path:
        records = _read(path)
        records[record.name] = record
        _write(path, records)


def update_jobs(changed: list[JobRecord]) -> None:
    """Store what a poll saw, keeping records the poll did not cover as they are."""
    with _locked() as path:
        records = _read(path)
        for record in changed:
            records[record.name] = record
        _write(path, records)
