"""What the run report reads, and the numbers it derives: a run folder into `RunData`.

Inputs, every one optional except metrics.jsonl: `metrics.jsonl` (one record per logging
point: train, val, val_fast, telemetry), `summary.json`, `config.resolved.yaml`,
`eval/confusion.json` and `checkpoints/checkpoint_meta.json`. Anything unreadable becomes a
note in the report, never an exception: only a missing run folder or metrics.jsonl is a
`UserError`.

The records come from the chart buckets (`observe.series`), so the report costs the same at
10^6 records as at 10^3: a run of up to 2,000 steps reads as its own records, a longer one
as a record per bucket whose best value, mean and peak are the bucket's own.

A resumed run appends to metrics.jsonl. After a resume from an older checkpoint (a crash
between saves) the log holds records the resumed run redid; the later record wins: a train,
val or val_fast record whose step is not past the last kept one drops the kept records of
that split at or after its step; a telemetry record whose step goes backwards does the same
(several telemetry samples may share a step). Nothing here imports torch or matplotlib.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trainforge import yamltext
from trainforge.engine import checkpoint as ckpt
from trainforge.errors import UserError
from trainforge.observe import series
from trainforge.runfolder import RunFolder

SPLITS = ("train", "val", "val_fast", "telemetry", "test")
_RECORD_KEYS = {"time", "split", "step", "epoch", series.CELL}
_LOWER_IS_BETTER = {"loss", "perplexity", "per", "wer", "cer"}
# Keys with these endings are measurements (time, memory, rates), not task metrics.
_UNIT_SUFFIXES = ("_s", "_ms", "_mib", "_gib", "_pct", "_per_s", "_w", "_mw", "_c", "_mhz")
FLAG_POINTS = 10.0  # classes this many points below the mean per-class accuracy are flagged


def number(value: Any) -> float | None:
    """A finite float, or None (null, non-finite, bool, text)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def lower_is_better(key: str) -> bool:
    return key in _LOWER_IS_BETTER or key.endswith(("_loss", "_error"))


def is_task_metric(key: str) -> bool:
    return key not in _RECORD_KEYS and not key.endswith(_UNIT_SUFFIXES) and key != "samples"


@dataclass
class Confusion:
    class_names: list[str]
    matrix: list[list[int]]  # rows: true class, columns: predicted class


@dataclass
class RunData:
    run_dir: Path
    records: dict[str, list[dict[str, Any]]]  # split -> records in log order, resumes resolved
    summary: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    checkpoint_meta: dict[str, Any] = field(default_factory=dict)
    confusion: Confusion | None = None
    notes: list[str] = field(default_factory=list)
    segments: list[dict[str, Any]] = field(default_factory=list)  # run.json's, oldest first

    @property
    def last_time(self) -> float | None:
        """The time of the newest logged record (epoch seconds), None without one."""
        times = [r["time"] for rs in self.records.values() for r in rs[-1:] if "time" in r]
        return max(times, default=None)

    def split(self, name: str) -> list[dict[str, Any]]:
        return self.records.get(name, [])

    def config_value(self, dotted: str) -> Any:
        node: Any = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict):
                return None
            node = node.get(part)
        return node


def load_run(run_dir: Path) -> RunData:
    """Read a run folder; raises UserError when the folder or its metrics.jsonl is missing."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(
            f"{run_dir} is a file, not a run folder",
            "pass the folder of a training run, such as runs/vit_digits",
        )
    if not run_dir.is_dir():
        raise UserError(
            f"run folder {run_dir} not found",
            "pass the folder of a training run, such as runs/vit_digits",
        )
    folder = RunFolder(run_dir)
    metrics = folder.metrics
    if not metrics.is_file():
        raise UserError(
            f"{metrics} not found: nothing to report",
            "pass the folder of a run trained with logging.jsonl=true (the default)",
        )
    notes: list[str] = []
    data = RunData(run_dir=run_dir, records=_read_metrics(metrics, notes), notes=notes)
    data.summary = _read_mapping(folder.summary, notes)
    data.config = _read_mapping(folder.resolved_config, notes)
    data.checkpoint_meta = _read_mapping(ckpt.run_meta_file(folder.checkpoints), notes)
    if folder.confusion.is_file():
        data.confusion = _read_confusion(folder.confusion, notes)
    data.segments = _read_segments(folder, notes)
    if not data.summary:
        notes.append("no summary.json: the run has not finished (still running, or it crashed)")
    if not any(data.records.values()):
        notes.append("metrics.jsonl holds no records yet")
    return data


def _read_segments(folder: RunFolder, notes: list[str]) -> list[dict[str, Any]]:
    """run.json's segments (the scheduling timeline); a note when run.json is unreadable."""
    if not folder.is_run():
        return []
    try:
        found = folder.read_run().get("segments") or []
    except UserError as err:
        notes.append(f"run.json not read, no scheduling timeline: {str(err).splitlines()[0]}")
        return []
    return [s for s in found if isinstance(s, dict)]


def _read_metrics(path: Path, notes: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each split's records from the chart buckets (`observe.series`): the records
    themselves for a run of up to 2,000 steps, a record per bucket for a longer one, so a
    10^6-record run is read from its sidecar and the records written after it."""
    buckets = series.load(path)
    found = buckets.split_records()
    bad = buckets.bad_lines + (path.stat().st_size > buckets.offset)  # a torn last line
    if bad:
        notes.append(
            f"{bad} unreadable line(s) in metrics.jsonl skipped (a crash can tear the last line)"
        )
    return {name: found.get(name, []) for name in SPLITS}


def cell_of(record: dict[str, Any], key: str) -> tuple | None:
    """(count, min, min step, max, max step, mean) of `key` in a record that stands for a
    bucket of several points, else None."""
    return record.get(series.CELL, {}).get(key)


def _read_mapping(path: Path, notes: list[str]) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        text = path.read_text(encoding="utf-8")
        value = json.loads(text) if path.suffix == ".json" else yamltext.load(text)
    except (OSError, ValueError, yaml.YAMLError) as error:
        notes.append(f"{path.name} unreadable ({type(error).__name__}); left out")
        return {}
    if not isinstance(value, dict):
        notes.append(f"{path.name} is not a mapping; left out")
        return {}
    return value


def _read_confusion(path: Path, notes: list[str]) -> Confusion | None:
    raw = _read_mapping(path, notes)
    matrix = raw.get("matrix")
    ok = (
        isinstance(matrix, list)
        and matrix
        and all(isinstance(row, list) and len(row) == len(matrix) for row in matrix)
        and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for row in matrix for v in row
        )
    )
    if not ok:
        notes.append("eval/confusion.json: matrix is not a square table of counts; left out")
        return None
    names = raw.get("class_names")
    if not isinstance(names, list) or len(names) != len(matrix):
        if names is not None:
            notes.append("eval/confusion.json: class_names do not match the matrix; using indices")
        names = list(range(len(matrix)))
    return Confusion(class_names=[str(n) for n in names], matrix=matrix)


# ------------------------------------------------------------------- derived numbers
@dataclass
class MetricStat:
    split: str
    key: str
    final: float | None  # None: the last value was non-finite
    final_step: int
    best: float | None
    best_step: int | None
    lower_is_better: bool


def metric_stats(records: list[dict[str, Any]], split: str) -> list[MetricStat]:
    """Final and best of every task metric in `records` (loss first, then as logged)."""
    keys: list[str] = []
    for record in records:
        keys += [k for k in record if is_task_metric(k) and k not in keys]
    keys.sort(key=lambda k: (k != "loss", k != "accuracy"))
    stats = []
    for key in keys:
        having = [r for r in records if key in r]
        last = having[-1]
        finite = []
        for r in having:
            cell = cell_of(r, key)
            if cell is not None:  # a bucket: its own min and max, at their steps
                finite += [(cell[1], cell[2]), (cell[3], cell[4])]
            elif number(r[key]) is not None:
                finite.append((number(r[key]), r["step"]))
        lower = lower_is_better(key)
        best = (min if lower else max)(finite, key=lambda p: p[0], default=(None, None))
        stats.append(
            MetricStat(split, key, number(last[key]), last["step"], best[0], best[1], lower)
        )
    return stats


@dataclass
class Throughput:
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    data_wait_share: float | None = None
    mfu: float | None = None
    step_time_s: float | None = None
    measured_s: float = 0.0  # training time the logging windows cover


def throughput(train: list[dict[str, Any]]) -> Throughput:
    """Time-weighted means over the logging windows: total samples / total time, not a mean
    of per-window rates (a short fast window must not count as much as a long slow one)."""
    sums: dict[str, float] = {}
    weights: dict[str, float] = {}
    previous = 0
    total_s = 0.0
    steps = 0
    for record in train:
        window = max(1, record["step"] - previous)
        previous = record["step"]
        step_time = _mean(record, "step_time_s")
        if step_time is None:
            continue
        seconds = step_time * window
        total_s += seconds
        steps += window
        for key in ("samples_per_s", "tokens_per_s", "data_wait_share", "mfu"):
            value = _mean(record, key)
            if value is not None:
                sums[key] = sums.get(key, 0.0) + value * seconds
                weights[key] = weights.get(key, 0.0) + seconds
    out = Throughput(measured_s=total_s, step_time_s=total_s / steps if steps else None)
    for key, total in sums.items():
        if weights[key] > 0:
            setattr(out, key, total / weights[key])
    return out


def _mean(record: dict[str, Any], key: str) -> float | None:
    cell = cell_of(record, key)
    return cell[5] if cell is not None else number(record.get(key))


@dataclass
class Reading:
    key: str
    mean: float
    max: float
    last: float | None


def telemetry_stats(data: RunData) -> list[Reading]:
    """Mean and max of every telemetry key: from the records, else from summary.json."""
    records = data.split("telemetry")
    keys: list[str] = []
    for record in records:
        keys += [k for k in record if k not in _RECORD_KEYS and k not in keys]
    readings = []
    for key in keys:
        total = count = 0.0
        peak = last = None
        for record in records:
            cell, value = cell_of(record, key), number(record.get(key))
            if value is None:
                continue
            n, high = (cell[0], cell[3]) if cell else (1, value)
            total += (cell[5] if cell else value) * n
            count += n
            peak = high if peak is None else max(peak, high)
            last = value
        if count and peak is not None:
            readings.append(Reading(key, total / count, peak, last))
    if readings:
        return readings
    summary = data.summary.get("telemetry")
    if not isinstance(summary, dict):
        return []
    for name in summary:
        if name.endswith("_max"):
            key = name[: -len("_max")]
            peak, mean = number(summary[name]), number(summary.get(f"{key}_mean"))
            if peak is not None and mean is not None:
                readings.append(Reading(key, mean, peak, None))
    return readings


@dataclass
class ClassRow:
    name: str
    support: int
    correct: int
    accuracy: float | None  # None: no samples of this class
    below_mean_points: float | None = None  # set when flagged


@dataclass
class ClassTable:
    rows: list[ClassRow]
    mean_accuracy: float | None  # macro mean over classes with samples
    overall_accuracy: float | None

    @property
    def flagged(self) -> list[ClassRow]:
        return [r for r in self.rows if r.below_mean_points is not None]


def class_table(confusion: Confusion) -> ClassTable:
    """Per-class accuracy (recall) from the confusion matrix; flags classes more than
    FLAG_POINTS below the mean per-class accuracy (the ViT guide expects it balanced)."""
    rows = []
    for index, (name, counts) in enumerate(
        zip(confusion.class_names, confusion.matrix, strict=True)
    ):
        support = sum(counts)
        correct = counts[index]
        rows.append(ClassRow(name, support, correct, correct / support if support else None))
    accuracies = [r.accuracy for r in rows if r.accuracy is not None]
    mean = sum(accuracies) / len(accuracies) if accuracies else None
    total = sum(r.support for r in rows)
    overall = sum(r.correct for r in rows) / total if total else None
    if mean is not None:
        for row in rows:
            if row.accuracy is not None and (mean - row.accuracy) * 100 > FLAG_POINTS:
                row.below_mean_points = (mean - row.accuracy) * 100
    return ClassTable(rows, mean, overall)
