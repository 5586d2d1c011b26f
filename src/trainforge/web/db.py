"""The run registry: one SQLite table of runs, so the history survives a server restart.

A run's id is its folder name under runs/. SQLite ships with Python and needs no server;
each thread keeps its own connection (WAL mode: readers never wait for the writer), so
request threads, the watcher threads of running processes and a restarted server share the
file safely. A connection per call would be simpler, but opening one costs about 1 ms, the
largest part of a status request that 50 clients poll. `version` counts changes made by
this process, which the pages' event stream watches.

What a user says about a run (a display name, tags, a note) is in a second table, `run_meta`,
keyed by the run id, so a command-line run (which has no row in `runs`, and whose run.json
the app never edits) can carry it too. A database from before it gains the table on open.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# A queued run waits for a free training slot (no process yet); running and stopping ones
# have a process. Active means "not finished": queued, running or stopping.
RUNNING = ("running", "stopping")
ACTIVE = ("queued", *RUNNING)
STATUSES = ("queued", "running", "stopping", "stopped", "completed", "failed", "cancelled")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    config TEXT NOT NULL,
    profile TEXT NOT NULL,
    argv TEXT NOT NULL,
    form TEXT NOT NULL,
    output_model TEXT,
    status TEXT NOT NULL,
    pid INTEGER,
    pid_started REAL,
    exit_code INTEGER,
    message TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    queued_at REAL,
    target TEXT
)
"""
_META_SCHEMA = """
CREATE TABLE IF NOT EXISTS run_meta (
    id TEXT PRIMARY KEY,
    display_name TEXT NOT NULL DEFAULT '',
    tags TEXT NOT NULL DEFAULT '[]',
    note TEXT NOT NULL DEFAULT ''
)
"""


@dataclass(frozen=True)
class RunMeta:
    """A run's display name (empty: its id), tags and note."""

    display_name: str = ""
    tags: tuple[str, ...] = ()
    note: str = ""


@dataclass
class RunRecord:
    id: str
    task: str
    config: str
    profile: str
    argv: list[str]
    form: dict[str, Any]
    output_model: str | None = None
    status: str = "running"
    pid: int | None = None
    pid_started: float | None = None
    exit_code: int | None = None
    message: str | None = None
    attempts: int = 0
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    queued_at: float | None = None
    target: str | None = None  # a cluster target's name (web/targets.py); None: this machine

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    def to_dict(self) -> dict[str, Any]:
        # Shallow: dataclasses.asdict deep-copies argv and form, half a status request's time.
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


class RunRegistry:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._local = threading.local()  # this thread's connection, closed when it ends
        self.version = 0
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(_SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
            if "queued_at" not in columns:  # a database from before the queue
                db.execute("ALTER TABLE runs ADD COLUMN queued_at REAL")
            if "target" not in columns:  # a database from before cluster targets
                db.execute("ALTER TABLE runs ADD COLUMN target TEXT")
            db.execute(_META_SCHEMA)  # a database from before run names, tags and notes
            rows = db.execute("SELECT * FROM run_meta").fetchall()
        # Read on every status request: kept in memory, written through by set_meta.
        self._meta = {r["id"]: _meta(r) for r in rows}

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection, in a transaction committed (or rolled back) on exit."""
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = sqlite3.connect(self.path, timeout=30)
            db.row_factory = sqlite3.Row
        with db:
            yield db

    def _changed(self) -> None:
        with self._lock:
            self.version += 1

    def get(self, run_id: str) -> RunRecord | None:
        with self._connect() as db:
            row = db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return _record(row) if row else None

    def list(self) -> list[RunRecord]:
        with self._connect() as db:
            rows = db.execute("SELECT * FROM runs ORDER BY created_at DESC").fetchall()
        return [_record(r) for r in rows]

    def active(self) -> list[RunRecord]:
        with self._connect() as db:
            rows = db.execute("SELECT * FROM runs WHERE status IN (?, ?, ?)", ACTIVE).fetchall()
        return [_record(r) for r in rows]

    def queued(self) -> list[RunRecord]:
        """Queued runs, first in first out."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT * FROM runs WHERE status = 'queued' ORDER BY queued_at, created_at"
            ).fetchall()
        return [_record(r) for r in rows]

    def save(self, record: RunRecord) -> None:
        """Insert or replace the whole record (a new run, or a finished one started again)."""
        data = record.to_dict()
        data["argv"] = json.dumps(record.argv)
        data["form"] = json.dumps(record.form)
        names = ", ".join(data)
        marks = ", ".join("?" for _ in data)
        with self._connect() as db:
            db.execute(
                f"INSERT OR REPLACE INTO runs ({names}) VALUES ({marks})", tuple(data.values())
            )
        self._changed()

    def update(self, run_id: str, **values: Any) -> None:
        unknown = set(values) - set(RunRecord.__dataclass_fields__)
        assert not unknown, f"unknown run fields {unknown}"
        sets = ", ".join(f"{k} = ?" for k in values)
        with self._connect() as db:
            db.execute(f"UPDATE runs SET {sets} WHERE id = ?", (*values.values(), run_id))
        self._changed()

    def finish_if_active(self, run_id: str, **values: Any) -> bool:
        """Record the end of a run unless something else already did (one writer wins)."""
        sets = ", ".join(f"{k} = ?" for k in values)
        with self._connect() as db:
            cursor = db.execute(
                f"UPDATE runs SET {sets} WHERE id = ? AND status IN (?, ?, ?)",
                (*values.values(), run_id, *ACTIVE),
            )
            changed = cursor.rowcount > 0
        if changed:
            self._changed()
        return changed

    def meta(self, run_id: str) -> RunMeta:
        return self._meta.get(run_id, RunMeta())

    def set_meta(self, run_id: str, meta: RunMeta) -> None:
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO run_meta (id, display_name, tags, note) "
                "VALUES (?, ?, ?, ?)",
                (run_id, meta.display_name, json.dumps(list(meta.tags)), meta.note),
            )
        self._meta[run_id] = meta
        self._changed()

    def delete(self, run_id: str) -> None:
        """Forget a run: its row and what the user said about it."""
        with self._connect() as db:
            db.execute("DELETE FROM runs WHERE id = ?", (run_id,))
            db.execute("DELETE FROM run_meta WHERE id = ?", (run_id,))
        self._meta.pop(run_id, None)
        self._changed()


def _meta(row: sqlite3.Row) -> RunMeta:
    return RunMeta(row["display_name"], tuple(json.loads(row["tags"])), row["note"])


def _record(row: sqlite3.Row) -> RunRecord:
    data = dict(row)
    data["argv"] = json.loads(data["argv"])
    data["form"] = json.loads(data["form"])
    return RunRecord(**data)
