"""Runs started from the command line: what `trainforge train` recorded in runs/*/run.json,
listed on the Runs page beside the runs the app started itself.

The app's database holds only the runs it started. A folder under runs/ with a run.json that
the database does not know was started from a terminal, a script or a Slurm job; its status
is read from the folder, as the CLI leaves it:

- its lock is held (`RunFolder.holder`): running;
- summary.json written since the last start (run.json's newest segment): completed, or
  stopped when the summary records an interruption;
- else the interrupted checkpoint (`RunFolder.interrupted_checkpoint`) saved since that
  start: stopped;
- else the process ended without finishing: failed (with the OOM killer named when its
  process file says so, `hardware.oom`).

Each call reads the folder afresh (a stat per file, one lock probe); the parsed run.json and
the task kind from config.resolved.yaml are cached per file modification time. Resuming such
a run from the app records it in the database first, and from then on it is one of the
app's runs.
"""

from __future__ import annotations

import json
import os
import re
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from trainforge.hardware.oom import previous_end
from trainforge.runfolder import RunFolder
from trainforge.web.db import RunRecord
from trainforge.web.run_files import read_summary
from trainforge.web.settings import WebSettings, is_plain_name, is_run_id, is_trial_id

ORIGIN = "command line"
TRIAL_ORIGIN = "sweep trial"
_MESSAGE = {
    "running": "started from the command line",
    "completed": "finished (started from the command line)",
}


class CliRuns:
    """The run folders under runs/ that the app's database does not hold."""

    def __init__(self, settings: WebSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._cache: dict[Path, tuple[int, int, dict[str, Any]]] = {}

    def list(self, known: set[str]) -> list[RunRecord]:
        root = self.settings.runs_path
        try:
            names = sorted(p.name for p in root.iterdir() if p.is_dir())
        except OSError:
            return []
        found = (self.get(name) for name in names if name not in known and is_plain_name(name))
        return [record for record in found if record is not None]

    def unlisted(self) -> list[str]:
        """Run folders (with a run.json) whose names the app cannot open: not plain names
        (`settings.NAME_RULE`). The Runs page names them, escaped, with the fix."""
        try:
            found = [p for p in self.settings.runs_path.iterdir() if p.is_dir()]
        except OSError:
            return []
        return sorted(
            p.name for p in found if not is_plain_name(p.name) and RunFolder(p).run_json.is_file()
        )

    def get(self, run_id: str) -> RunRecord | None:
        """The command-line run in runs/`run_id` (or a sweep's trial, `SWEEP/trial-NNN`), or
        None when that folder holds no run.json."""
        if not is_run_id(run_id):
            return None
        folder = self.settings.run_folder(run_id)
        facts = self._facts(folder)
        if facts is None:
            return None
        status, message, finished_at = _status(folder, facts["last_start"])
        if is_trial_id(run_id):
            sweep = run_id.partition("/")[0]
            message = message.replace("started from the command line", f"a trial of {sweep}")
        return RunRecord(
            id=run_id,
            task=facts["task"],
            config=facts["config"],
            profile=facts["profile"],
            argv=facts["command"],
            form={"origin": TRIAL_ORIGIN if is_trial_id(run_id) else ORIGIN},
            status=status,
            message=message,
            pid=holder_pid(folder) if status == "running" else None,
            attempts=facts["attempts"],
            created_at=facts["created"] or facts["last_start"] or 0.0,
            started_at=facts["last_start"],
            finished_at=finished_at,
        )

    def total_steps(self, run_id: str, since: float | None = None) -> int | None:
        """The optimizer steps run.json records for the run (None: not known yet, or the
        run.json was written before `since`, by an earlier run of that name)."""
        facts = self._facts(self.settings.run_folder(run_id)) if is_run_id(run_id) else None
        if facts is None or (since is not None and facts["written"] < since - 1.0):
            return None
        steps = facts.get("total_steps")
        return int(steps) if isinstance(steps, int) else None

    def _facts(self, folder: RunFolder) -> dict[str, Any] | None:
        """run.json and the task kind, parsed again only when either file changed."""
        try:
            run_mtime = folder.run_json.stat().st_mtime_ns
        except OSError:
            return None
        try:
            config_mtime = folder.resolved_config.stat().st_mtime_ns
        except OSError:
            config_mtime = 0
        with self._lock:
            cached = self._cache.get(folder.path)
        if cached is not None and cached[:2] == (run_mtime, config_mtime):
            return cached[2]
        facts = _read_facts(folder)
        if facts is not None:
            facts["written"] = run_mtime / 1e9
            with self._lock:
                self._cache[folder.path] = (run_mtime, config_mtime, facts)
        return facts


def _read_facts(folder: RunFolder) -> dict[str, Any] | None:
    try:
        run = json.loads(folder.run_json.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(run, dict):
        return None
    segments = [s for s in run.get("segments") or [] if isinstance(s, dict)]
    starts = [_epoch(s.get("started")) for s in segments]
    command = [str(word) for word in run.get("command") or []]
    return {
        "task": _task(folder),
        "config": str(run.get("config_file") or ""),
        "profile": str(run.get("profile_used") or run.get("profile") or ""),
        "command": command[1:] if command[:1] == ["train"] else command,
        "attempts": max(1, len(segments)),
        "created": _epoch(run.get("created")),
        "last_start": next((t for t in reversed(starts) if t is not None), None),
        "total_steps": run.get("total_steps"),
    }


def _task(folder: RunFolder) -> str:
    try:
        config = yaml.safe_load(folder.resolved_config.read_text(encoding="utf-8"))
        return str(config["task"]["kind"])
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return "?"


def holder_pid(folder: RunFolder) -> int | None:
    """The process id the folder's holder wrote (`RunFolder.mark_holder`), or None."""
    holder = folder.holder()
    found = re.fullmatch(r"process (\d+)\b.*", holder or "")
    return int(found[1]) if found else None


def signalable(folder: RunFolder, pid: int) -> bool:
    """Whether this server may signal `pid` as the run's process: it runs as this server's
    user and holds the run folder open (the lock), so a reused process id or a process on
    another machine sharing the folder is never signalled. Linux: read from /proc."""
    proc = Path("/proc") / str(pid)
    try:
        if proc.stat().st_uid != os.getuid():
            return False
        target = str(folder.path.resolve())
        return any(os.readlink(fd) == target for fd in (proc / "fd").iterdir())
    except OSError:
        return False


def stop_hint(record: RunRecord) -> str:
    """How a user stops a command-line run (empty when it is not running)."""
    if record.status != "running":
        return ""
    if record.pid is None:
        return "Stop it where it runs: press Ctrl+C in its terminal (it saves a checkpoint)."
    return (
        f"It runs as process {record.pid}: press Ctrl+C in its terminal, or run "
        f"`kill -INT {record.pid}` on this machine; it saves a checkpoint and stops."
    )


def _status(folder: RunFolder, last_start: float | None) -> tuple[str, str, float | None]:
    """(status, message, finished_at) of a command-line run, from its lock and files."""
    holder = folder.holder()
    if holder is not None:
        return "running", f"{_MESSAGE['running']} ({holder})", None
    since = (last_start or 0.0) - 1.0  # file times may be rounded down
    summary_at = _mtime(folder.summary)
    if summary_at is not None and summary_at >= since:
        summary = read_summary(folder) or {}
        if summary.get("interrupted"):
            signal = summary.get("signal") or "a signal"
            return "stopped", f"stopped by {signal} (started from the command line)", summary_at
        return "completed", _MESSAGE["completed"], summary_at
    saved = folder.interrupted_checkpoint
    saved_at = _mtime(saved)
    if saved_at is not None and saved_at >= since:
        return "stopped", f"stopped; {saved.name} saved", saved_at
    killed = previous_end(folder.process_file)
    ended = "the training process ended without finishing (started from the command line)"
    return "failed", killed or ended, _mtime(folder.metrics)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _epoch(text: Any) -> float | None:
    """Seconds since the epoch of an ISO time run.json records, or None."""
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except (TypeError, ValueError):
        return None
