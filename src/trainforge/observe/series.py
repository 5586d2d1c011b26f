"""Metric series at any run length: min/max/last buckets over the step axis, kept in a
sidecar beside metrics.jsonl, and seeks into metrics.jsonl by step.

A run at `logging_steps=1` writes a record a step: 10^6 records are about 150 MB of JSON.
Nothing that serves a chart, draws the report or resumes a run may read all of it. This
module owns the three ways around that:

- `Buckets`: every `split/metric` series as cells of a power-of-two step width on one grid
  (cell k covers steps [k*width, (k+1)*width)), each cell its point count, min, max, last
  value, and the step and time of its last point. The grid keeps at most 2 x MAX_BUCKETS
  cells; a longer run doubles the width and merges pairs. What is served is at most
  MAX_BUCKETS cells a series, whatever the run's length. This is W&B's scheme (1,000
  buckets of min, max and last over the x axis): a spike survives as its bucket's max,
  where TensorBoard's reservoir of 1,000 random samples would most likely lose it.
- the sidecar (`RunFolder.metric_buckets`), written by the run as it logs and rebuilt from the
  jsonl when it is missing. It records the byte offset of metrics.jsonl it covers and a
  checksum of the bytes before that offset; a reader folds in the records after the offset
  and rebuilds when the checksum no longer matches, so the sidecar is never trusted over
  the jsonl.
- `offset_after(path, step)`: the byte offset of the first record past a step, found by
  bisection over the file (records are in step order: every resume truncates what it
  redoes). A resume truncates there; a zoomed chart reads its window from there.

The records' own keys (time, split, step, epoch) are not series. A non-finite value is
stored as null by the writer; here it is a point without a value (the bucket's last value
is null, a gap in a chart), and min, max and the mean leave it out. No torch, no numpy:
the web app imports this.
"""

from __future__ import annotations

import json
import math
import os
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainforge.runfolder import RunFolder

MAX_BUCKETS = 1000
FORMAT = 1
RECORD_KEYS = frozenset({"time", "split", "step", "epoch"})
CELL = "_cell"  # the key of a cell's summary in `Buckets.split_records`
# The sidecar is rewritten after this many records (and when the logger closes): a reader
# folds in at most this many records from the jsonl itself.
SAVE_EVERY = 500
_CHECK_BYTES = 256
# A zoomed window reads at most this much of metrics.jsonl (about 3 x 10^5 records).
_MAX_WINDOW_BYTES = 48 * 1024 * 1024

# cell fields: count, min, max, last, step of the last point, time of the last point,
# step of the min, step of the max, sum (the report's mean).
N, MIN, MAX, LAST, STEP, TIME, MIN_STEP, MAX_STEP, SUM = range(9)


def sidecar_path(metrics: Path) -> Path:
    return RunFolder(metrics.parent).metric_buckets


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _round(value: float | None) -> float | None:
    # Six significant digits: what a chart or the report can show; a third of the bytes.
    return None if value is None else float(f"{value:.6g}")


@dataclass
class Buckets:
    """Every series of a metrics file on one step grid; see the module docstring."""

    width: int = 1
    origin: int = 0  # a zoomed window's first step; 0 for a whole run
    cells: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    last_step: dict[str, int] = field(default_factory=dict)  # per split, for rewinds
    offset: int = 0  # bytes of metrics.jsonl folded in
    records: int = 0
    bad_lines: int = 0

    # ------------------------------------------------------------------ building
    def add(self, record: dict[str, Any]) -> None:
        split = str(record.get("split", "train"))
        step = record.get("step")
        if isinstance(step, bool) or not isinstance(step, int | float):
            self.bad_lines += 1
            return
        step = int(step)
        self.records += 1
        last = self.last_step.get(split)
        # A resume that redid steps without truncating the log (an older folder, a copy):
        # the newer records win, as in the report. Telemetry samples may share a step.
        if last is not None and (step < last or (step == last and split != "telemetry")):
            self._drop_after(split, step)
        self.last_step[split] = step
        while (step - self.origin) // self.width >= 2 * MAX_BUCKETS:
            self._double()
        index = (step - self.origin) // self.width
        time = _number(record.get("time"))
        for key, raw in record.items():
            value = _number(raw)
            if key in RECORD_KEYS or (value is None and raw is not None):
                continue  # text, a flag: no series
            series = self.cells.setdefault(f"{split}/{key}", {})
            cell = series.get(index)
            if cell is None:
                cell = series[index] = [0, None, None, None, step, time, step, step, 0.0]
            # A null (the writer's non-finite value) is a point without a value: it ends
            # the bucket as a gap, as the report shows it, and leaves min and max alone.
            cell[LAST], cell[STEP], cell[TIME] = value, step, time
            if value is None:
                continue
            cell[N] += 1
            cell[SUM] += value
            if cell[MIN] is None or value < cell[MIN]:
                cell[MIN], cell[MIN_STEP] = value, step
            if cell[MAX] is None or value > cell[MAX]:
                cell[MAX], cell[MAX_STEP] = value, step

    def _drop_after(self, split: str, step: int) -> None:
        """Forget `split`'s points at or after `step` (the cell holding it is cleared whole:
        its earlier points are not kept apart, an approximation only a log that was never
        truncated reaches)."""
        start = (step - self.origin) // self.width
        for name, series in self.cells.items():
            if name.split("/", 1)[0] == split:
                for index in [i for i in series if i >= start]:
                    del series[index]

    def _double(self) -> None:
        self.width *= 2
        for name, series in self.cells.items():
            merged: dict[int, list[float]] = {}
            for index in sorted(series):
                cell, into = series[index], merged.get(index // 2)
                merged[index // 2] = cell if into is None else _merge(into, cell)
            self.cells[name] = merged

    def fold(self, records: Iterable[dict[str, Any]]) -> None:
        for record in records:
            self.add(record)

    # ------------------------------------------------------------------ serving
    def view(self, max_buckets: int = MAX_BUCKETS) -> dict[str, Any]:
        """At most `max_buckets` cells a series, as columns (what the web API answers)."""
        top = max((max(s) for s in self.cells.values() if s), default=0)
        factor = 1
        while top // factor + 1 > max_buckets:
            factor *= 2
        series = {}
        for name, cells in sorted(self.cells.items()):
            if any(cell[N] for cell in cells.values()):  # a series of nulls only: none
                series[name] = columns(coarsen(cells, factor))
        return {"width": self.width * factor, "series": series}

    def latest(self) -> dict[str, dict[str, Any]]:
        """The newest record of each split, as far as the buckets know it: each series'
        last value at the split's newest step (what the page's tiles show)."""
        out: dict[str, dict[str, Any]] = {}
        for name, cells in self.cells.items():
            if not cells:
                continue
            split, key = name.split("/", 1)
            cell = cells[max(cells)]
            record = out.get(split)
            if record is None or cell[STEP] > record["step"]:
                record = out[split] = {"split": split, "step": int(cell[STEP])}
                if cell[TIME] is not None:
                    record["time"] = cell[TIME]
            if cell[STEP] == record["step"]:
                record[key] = cell[LAST]
        return out

    def split_records(self) -> dict[str, list[dict[str, Any]]]:
        """Each split's cells as records in step order, the form the report reads: a record
        per cell holding each series' last value (so a short run's records are its own),
        and, for a cell of several points, `CELL` with each key's (count, min, step of the
        min, max, step of the max, mean)."""
        by_split: dict[str, dict[int, dict[str, Any]]] = {}
        for name, cells in self.cells.items():
            split, key = name.split("/", 1)
            rows = by_split.setdefault(split, {})
            for index, cell in cells.items():
                record = rows.get(index)
                if record is None:
                    record = rows[index] = {"split": split, "step": int(cell[STEP])}
                if cell[STEP] >= record["step"]:
                    record["step"] = int(cell[STEP])
                    if cell[TIME] is not None:
                        record["time"] = cell[TIME]
                record[key] = cell[LAST]
                if cell[N] > 1 or (cell[N] == 1 and cell[LAST] is None):
                    record.setdefault(CELL, {})[key] = (
                        int(cell[N]), cell[MIN], int(cell[MIN_STEP]), cell[MAX],
                        int(cell[MAX_STEP]), cell[SUM] / cell[N],
                    )  # fmt: skip
        return {split: [rows[i] for i in sorted(rows)] for split, rows in by_split.items()}

    # ------------------------------------------------------------------ sidecar
    def to_json(self, check: str) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "offset": self.offset,
            "check": check,
            "width": self.width,
            "records": self.records,
            "bad_lines": self.bad_lines,
            "last_step": self.last_step,
            "cells": {
                name: [[index, *cell] for index, cell in sorted(series.items())]
                for name, series in self.cells.items()
            },
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Buckets:
        cells = {
            str(name): {int(row[0]): list(row[1:]) for row in rows}
            for name, rows in raw["cells"].items()
        }
        return cls(
            width=int(raw["width"]),
            cells=cells,
            last_step={str(k): int(v) for k, v in raw["last_step"].items()},
            offset=int(raw["offset"]),
            records=int(raw.get("records", 0)),
            bad_lines=int(raw.get("bad_lines", 0)),
        )


def _merge(a: list[Any], b: list[Any]) -> list[Any]:
    """Two cells of one series, `b` the later."""
    low = a if b[MIN] is None or (a[MIN] is not None and a[MIN] <= b[MIN]) else b
    high = a if b[MAX] is None or (a[MAX] is not None and a[MAX] >= b[MAX]) else b
    return [
        a[N] + b[N], low[MIN], high[MAX], b[LAST], b[STEP], b[TIME],
        low[MIN_STEP], high[MAX_STEP], a[SUM] + b[SUM],
    ]  # fmt: skip


def coarsen(cells: dict[int, list[float]], factor: int) -> dict[int, list[float]]:
    if factor == 1:
        return cells
    merged: dict[int, list[float]] = {}
    for index in sorted(cells):
        into = merged.get(index // factor)
        merged[index // factor] = cells[index] if into is None else _merge(into, cells[index])
    return merged


def columns(cells: dict[int, list[float]]) -> dict[str, list[Any]]:
    order = sorted(cells)
    rows = [cells[i] for i in order]
    return {
        "step": [int(c[STEP]) for c in rows],
        "time": [c[TIME] for c in rows],
        "min": [_round(c[MIN]) for c in rows],
        "max": [_round(c[MAX]) for c in rows],
        "last": [_round(c[LAST]) for c in rows],
        "n": [int(c[N]) for c in rows],
    }


# ---------------------------------------------------------------------- the jsonl itself
def read_lines(path: Path, start: int, end: int | None = None) -> Iterator[tuple[int, dict]]:
    """(offset after the line, record) for each complete JSON line in [start, end)."""
    with path.open("rb") as fh:
        fh.seek(start)
        position = start
        for line in fh:
            if not line.endswith(b"\n") or (end is not None and position >= end):
                return  # a line still being written (or cut by a kill) waits
            position += len(line)
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            yield position, record if isinstance(record, dict) else {}


def _step_of(line: bytes) -> int | None:
    try:
        step = json.loads(line).get("step")
    except (ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _line_from(fh: Any, position: int) -> tuple[int, int, int | None]:
    """From the first line that starts at or after `position`: (its start, the end of the
    first line there with a step, that step). Damaged lines are read past; the step is None
    when no complete record follows (the end, or a torn last line)."""
    if position > 0:
        fh.seek(position - 1)
        fh.readline()  # the rest of the line `position` falls in
    else:
        fh.seek(0)
    start = end = fh.tell()
    for line in iter(fh.readline, b""):
        if not line.endswith(b"\n"):
            break
        end += len(line)
        step = _step_of(line)
        if step is not None:
            return start, end, step
    return start, end, None


def offset_after(path: Path, step: int) -> int:
    """Byte offset just after the last record whose step is not past `step`, by bisection:
    O(log n) lines read, whatever the file's length. Damaged lines and a torn last line
    after that record are cut with what follows; damaged lines before it are kept."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        low, high = 0, size
        while low < high:  # `low` is always a line start
            middle = (low + high) // 2
            _start, end, found = _line_from(fh, middle)
            if found is None or found > step:
                high = middle
            else:
                low = end
    return low


def _check(path: Path, offset: int) -> str:
    """A checksum of the bytes just before `offset`: a sidecar whose jsonl was replaced or
    truncated below its offset no longer matches."""
    if offset == 0:
        return "0"
    with path.open("rb") as fh:
        fh.seek(max(0, offset - _CHECK_BYTES))
        data = fh.read(min(offset, _CHECK_BYTES))
    return f"{zlib.crc32(data):08x}" if len(data) == min(offset, _CHECK_BYTES) else "x"


# ---------------------------------------------------------------------- the sidecar
def still_valid(metrics: Path, buckets: Buckets, check: str) -> bool:
    """Whether `metrics` still holds, unchanged, the bytes `buckets` was folded from."""
    try:
        size = metrics.stat().st_size
    except OSError:
        return False
    return buckets.offset <= size and _check(metrics, buckets.offset) == check


class Cache:
    """Buckets of the last few metrics files read, caught up from their offset at each
    call: a page polled during a long run folds in only the records since its last poll."""

    def __init__(self, size: int = 8) -> None:
        import threading

        self._lock = threading.Lock()
        self._size = size
        self._kept: dict[Path, tuple[Buckets, str]] = {}

    def get(self, metrics: Path) -> Buckets:
        with self._lock:
            kept = self._kept.pop(metrics, None)
            if kept is None or not still_valid(metrics, *kept):
                buckets = load(metrics) if metrics.is_file() else Buckets()
            else:
                buckets = catch_up(metrics, kept[0])
            self._kept[metrics] = (buckets, _check(metrics, buckets.offset))
            while len(self._kept) > self._size:
                self._kept.pop(next(iter(self._kept)))
            return buckets


def _read_sidecar(metrics: Path) -> Buckets | None:
    path = sidecar_path(metrics)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if raw.get("format") != FORMAT:
            return None
        buckets = Buckets.from_json(raw)
        size = metrics.stat().st_size
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError):
        return None
    if buckets.offset > size or _check(metrics, buckets.offset) != raw.get("check"):
        return None  # the jsonl was replaced or cut below what the sidecar covers
    return buckets


def catch_up(metrics: Path, buckets: Buckets) -> Buckets:
    """Fold in the complete records written after `buckets.offset`."""
    for end, record in read_lines(metrics, buckets.offset):
        buckets.add(record) if record else _bad(buckets)
        buckets.offset = end
    return buckets


def _bad(buckets: Buckets) -> None:
    buckets.bad_lines += 1


def load(metrics: Path, save: bool = True) -> Buckets:
    """The buckets of `metrics` up to its last complete record: the sidecar plus what was
    written after it, or a rebuild from the jsonl (saved, so the next reader is cheap)."""
    buckets = _read_sidecar(metrics)
    rebuilt = buckets is None
    buckets = buckets or Buckets()
    before = buckets.records
    catch_up(metrics, buckets)
    if save and (rebuilt or buckets.records - before >= SAVE_EVERY):
        write(metrics, buckets)
    return buckets


def write(metrics: Path, buckets: Buckets) -> None:
    """Save the sidecar atomically; a folder that refuses it (read-only, full) only makes
    the next reader fold in more of the jsonl."""
    path = sidecar_path(metrics)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(buckets.to_json(_check(metrics, buckets.offset))), "utf-8")
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)


def truncate(metrics: Path, last_step: int) -> int:
    """Drop the records after `last_step` (a resume redoes them) by truncating the file at
    the bisected offset, and bring the sidecar to the same point without a rebuild: cells
    past the step go, the cell holding it is recomputed from the records it keeps.
    Returns the number of bytes dropped."""
    if not metrics.is_file():
        return 0
    buckets = _read_sidecar(metrics)
    cut = offset_after(metrics, last_step)
    size = metrics.stat().st_size
    if cut >= size:
        return 0
    os.truncate(metrics, cut)
    if buckets is not None and buckets.offset > cut:
        buckets = _rewind(metrics, buckets, last_step, cut)
        write(metrics, buckets)
    return size - cut


def _rewind(metrics: Path, buckets: Buckets, last_step: int, cut: int) -> Buckets:
    start = (last_step // buckets.width) * buckets.width  # the cell holding last_step
    for series in buckets.cells.values():
        for index in [i for i in series if i * buckets.width >= start]:
            del series[index]
    buckets.last_step = {s: min(v, start - 1) for s, v in buckets.last_step.items()}
    begin = offset_after(metrics, start - 1) if start > 0 else 0
    partial = Buckets(width=buckets.width)
    for _end, record in read_lines(metrics, begin, cut):
        partial.add(record)
    for name, series in partial.cells.items():
        buckets.cells.setdefault(name, {}).update(series)
    for split, step in partial.last_step.items():
        buckets.last_step[split] = step
    buckets.offset = cut
    return buckets


def window(metrics: Path, low: int, high: int, max_points: int = MAX_BUCKETS) -> dict[str, Any]:
    """The steps [low, high] read from the jsonl itself: raw points (width 1) when no series
    has more than `max_points` of them, else at most that many buckets over the window
    (cell k then covers steps [low + k*width, low + (k+1)*width))."""
    begin = offset_after(metrics, low - 1) if low > 0 else 0
    stop = min(metrics.stat().st_size, begin + _MAX_WINDOW_BYTES)
    span = max(1, high - low + 1)
    width = 1
    while math.ceil(span / width) > max_points:
        width *= 2
    raw: dict[str, dict[int, list[float]]] | None = {}
    part = Buckets(width=width, origin=low)
    for _end, record in read_lines(metrics, begin, stop):
        step = record.get("step")
        if isinstance(step, int) and not isinstance(step, bool) and step > high:
            break
        if not record:
            continue
        part.add(record)
        if raw is not None:  # the raw points, until a series has more than max_points
            one = Buckets(origin=low)
            one.add(record)
            for name, cells in one.cells.items():
                kept = raw.setdefault(name, {})
                kept.update({len(kept): cell for cell in cells.values()})
                if len(kept) > max_points:
                    raw = None
                    break
    if raw is not None:
        series = {name: columns(cells) for name, cells in sorted(raw.items()) if _any(cells)}
        return {"width": 1, "origin": low, "raw": True, "series": series}
    series = {name: columns(cells) for name, cells in sorted(part.cells.items()) if _any(cells)}
    return {"width": part.width, "origin": low, "raw": False, "series": series}


def _any(cells: dict[int, list[Any]]) -> bool:
    return any(cell[N] for cell in cells.values())
