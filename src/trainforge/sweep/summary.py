"""What a sweep found: one row per counted trial, the best marked; printed, summary.csv,
summary.md (and report.html, `sweep.report`).

Read from the journal (Optuna's own record of params, states and values) and from each
trial's run folder (steps trained and training time from its summary.json, or, for a trial
still training, from its run record). A stale attempt that was queued again is not a row:
its retry, in the same folder, is.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from typing import Any

from trainforge.runfolder import RunFolder
from trainforge.sweep import study as studies
from trainforge.sweep.study import REASON_ATTR, SweepFolder

FIELDS = ("trial", "number", "state", "value", "steps", "time_s", "best", "params", "reason")


@dataclass(frozen=True)
class Row:
    trial: str
    number: int
    state: str
    value: float | None
    steps: int | None
    time_s: float | None
    best: bool
    params: dict[str, Any]
    reason: str


def rows(folder: SweepFolder) -> tuple[list[Row], dict[str, Any]]:
    """The counted trials, in folder order, and the sweep's request."""
    request = folder.read_request()
    study = studies.open_study(folder, request)
    trials = studies.counted(study.get_trials(deepcopy=False))
    best = _best_number(trials, request["direction"])
    out = []
    for t in trials:
        number = studies.root_number(t)
        steps, time_s = _progress(RunFolder(folder.trial_dir(number)))
        out.append(
            Row(
                trial=folder.trial_name(number), number=t.number, state=t.state.name,
                value=t.value if t.value is not None else _last_reported(t),
                steps=steps, time_s=time_s, best=t.number == best, params=dict(t.params),
                reason=str(t.user_attrs.get(REASON_ATTR, "")),
            )
        )  # fmt: skip
    out.sort(key=lambda r: r.trial)
    return out, request


def _best_number(trials: list[Any], direction: str) -> int | None:
    done = [t for t in trials if t.state.name == "COMPLETE" and t.value is not None]
    if not done:
        return None
    pick = max if direction == "maximize" else min
    return pick(done, key=lambda t: t.value).number


def _last_reported(trial: Any) -> float | None:
    values = trial.intermediate_values
    return values[max(values)] if values else None


def _progress(run: RunFolder) -> tuple[int | None, float | None]:
    """(steps trained, training time in s): from summary.json once the trial ended."""
    try:
        data = json.loads(run.summary.read_text(encoding="utf-8"))
        return data.get("global_step"), data.get("train_time_s")
    except (OSError, json.JSONDecodeError):
        return _progress_from_metrics(run)


def _progress_from_metrics(run: RunFolder) -> tuple[int | None, float | None]:
    try:
        lines = run.metrics.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None, None
    step = None
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record.get("step"), int):
            step = record["step"]
    return step, None


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _params_text(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={_fmt(v)}" for k, v in params.items())


def table(found: list[Row], metric: str) -> list[str]:
    """The printed table: trial, params, state, metric, steps, time, best marked with *."""
    head = ["trial", "state", metric, "steps", "time_s", "params"]
    body = [
        [
            ("* " if r.best else "  ") + r.trial, r.state, _fmt(r.value), _fmt(r.steps),
            _fmt(round(r.time_s, 1) if r.time_s is not None else None),
            _params_text(r.params) + (f"  ({r.reason})" if r.reason else ""),
        ]
        for r in found
    ]  # fmt: skip
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=False)]
    widths[0] = max(widths[0], len(head[0]) + 2)
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(["  " + head[0], *head[1:]], widths, strict=False))
    ]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in body
    ]
    return lines


def write(folder: SweepFolder, found: list[Row], request: dict[str, Any]) -> None:
    """summary.csv (one column per param) and summary.md."""
    names = sorted({k for r in found for k in r.params})
    cols = [f for f in FIELDS if f != "params"] + names
    with folder.summary_csv.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(cols)
        for r in found:
            row = [getattr(r, f) for f in FIELDS if f != "params"] + [
                r.params.get(n) for n in names
            ]
            writer.writerow(
                ["" if v is None else repr(v) if isinstance(v, float) else v for v in row]
            )
    metric = request["metric"]
    md = [
        f"# Sweep {folder.name}",
        "",
        f"{len(found)} of {request['trials']} trials; {metric} ({request['direction']}); "
        f"pruner {request['pruner']}. Best marked with *.",
        "",
        "| trial | state | " + metric + " | steps | time (s) | " + " | ".join(names) + " |",
        "|" + "---|" * (5 + len(names)),
    ]
    for r in found:
        cells = [("*" if r.best else "") + r.trial, r.state, _fmt(r.value), _fmt(r.steps)]
        cells.append(_fmt(round(r.time_s, 1) if r.time_s is not None else None))
        cells += [_fmt(r.params.get(n)) for n in names]
        md.append("| " + " | ".join(cells) + " |")
    folder.summary_md.write_text("\n".join(md) + "\n", encoding="utf-8")


def status(folder: SweepFolder) -> list[str]:
    """`trainforge sweep status`: the table (written to summary.csv and summary.md too, and
    the plots to report.html)."""
    from trainforge.sweep.report import write_report

    found, request = rows(folder)
    write(folder, found, request)
    write_report(folder, found, request)
    done = sum(r.state in ("COMPLETE", "PRUNED", "FAIL") for r in found)
    lines = table(found, request["metric"])
    lines.append(
        f"{done} of {request['trials']} trials finished; "
        f"summary: {folder.summary_csv}, {folder.summary_md}, {folder.report}"
    )
    return lines
