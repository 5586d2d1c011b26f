"""What a run folder says about a run: metrics records, checkpoints, summary, telemetry.

Every path comes from `trainforge.runfolder.RunFolder`, the one owner of a run folder's
layout. The trainer appends one JSON line per logging point to the metrics file (split
`train` or `val`, plus `telemetry` records when sampled) and flushes each line, so the
file is read incrementally from a byte offset; a line without its newline is still being
written and waits for the next read. `MetricsCache` keeps the latest record per split for
the status endpoint, reading only the bytes added since the last call.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trainforge.runfolder import RunFolder

_MAX_READ = 4 * 1024 * 1024


def read_records(path: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Complete JSON lines after byte `offset`, and the offset after the last one.

    A file shorter than `offset` was replaced (a run started again with overwrite): it is
    read from the start.
    """
    try:
        size = path.stat().st_size
    except OSError:
        return [], 0
    if size < offset:
        offset = 0
    if size == offset:
        return [], offset
    with path.open("rb") as fh:
        fh.seek(offset)
        data = fh.read(min(size - offset, _MAX_READ))
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    records = []
    for line in data[: end + 1].splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a damaged line (e.g. a crash mid-write long ago): skip it
        if isinstance(record, dict):
            records.append(record)
    return records, offset + end + 1


@dataclass
class Latest:
    offset: int = 0
    count: int = 0
    by_split: dict[str, dict[str, Any]] = field(default_factory=dict)


class MetricsCache:
    """Latest record per split for every run, updated from the bytes added since last time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[Path, Latest] = {}

    def latest(self, folder: RunFolder) -> Latest:
        path = folder.metrics
        with self._lock:
            state = self._runs.setdefault(path, Latest())
            records, offset = read_records(path, state.offset)
            if offset < state.offset:  # the file was replaced
                state = self._runs[path] = Latest()
            for record in records:
                state.by_split[str(record.get("split", "train"))] = record
            state.count += len(records)
            state.offset = offset
            return Latest(state.offset, state.count, dict(state.by_split))


class TelemetrySetting:
    """`hardware.telemetry` of each run, from its config.resolved.yaml (None until the run
    has written it), read again only when the file changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[Path, tuple[int, bool | None]] = {}

    def get(self, folder: RunFolder) -> bool | None:
        path = folder.resolved_config
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            return None
        with self._lock:
            cached = self._runs.get(path)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        try:
            value = yaml.safe_load(path.read_text(encoding="utf-8"))["hardware"]["telemetry"]
        except (OSError, yaml.YAMLError, KeyError, TypeError):
            value = None
        setting = value if isinstance(value, bool) else None
        with self._lock:
            self._runs[path] = (mtime, setting)
        return setting


def telemetry_note(status: str, telemetry: bool | None) -> str:
    """What the run page's Telemetry table says while the run has no telemetry record."""
    if telemetry is False:
        return "This run records no telemetry (set hardware.telemetry=true)."
    if status == "queued":
        return "Waiting for the run to start."
    if status in ("running", "stopping"):
        return "Waiting for the first telemetry sample."
    if status == "failed":
        return "The run failed before it recorded telemetry."
    if status == "cancelled":
        return "The run was cancelled before it started."
    return "The run ended before its first telemetry sample."


def readable_files(folder: RunFolder) -> dict[str, Path]:
    """The run folder's text records a page may link to, by file name (`/runs/ID/files/NAME`)."""
    paths = (folder.run_json, folder.resolved_config, folder.metrics, folder.summary)
    return {p.name: p for p in paths}


def checkpoints(folder: RunFolder) -> list[str]:
    root = folder.checkpoints
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def read_summary(folder: RunFolder) -> dict[str, Any] | None:
    try:
        data = json.loads(folder.summary.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def summary_since(folder: RunFolder, since: float | None) -> dict[str, Any] | None:
    """The run's summary when it was written after `since` (this attempt), else None."""
    path = folder.summary
    try:
        if since is not None and path.stat().st_mtime < since - 1.0:
            return None
    except OSError:
        return None
    return read_summary(folder)


_TAILS: dict[Path, tuple[tuple[int, int], list[str]]] = {}
_TAIL_BYTES = 64 * 1024


def log_tail(log_path: Path, max_lines: int = 40) -> list[str]:
    """The last lines of a run's output, progress-bar redraws removed. The lines of the
    log's last 64 KiB are kept per (size, modification time): the run page asks every few
    seconds, and a log that did not change is not read again."""
    try:
        info = os.stat(log_path)
        stamp = (info.st_size, info.st_mtime_ns)
        cached = _TAILS.get(log_path)
        if cached is not None and cached[0] == stamp:
            return cached[1][-max_lines:]
        with log_path.open("rb") as fh:
            fh.seek(max(0, info.st_size - _TAIL_BYTES))
            data = fh.read(_TAIL_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return []
    lines = [line.rsplit("\r", 1)[-1].rstrip() for line in data.split("\n")]
    lines = [line for line in lines if line]
    _TAILS[log_path] = (stamp, lines)
    return lines[-max_lines:]
