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
from pathlib import Path
from typing import Any

from trainforge.runfolder import RunFolder
from trainforge.sweep import study as studies
from trainforge.sweep.latency import LATENCY, read_latency
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
    latency_ms: float | None = None  # an edge-aware sweep's measured batch-1 latency
    pareto: bool = False  # on the Pareto front of a study with several objectives
    within_budget: bool | None = None  # latency under the sweep's budget (edge sweeps)


def rows(folder: SweepFolder) -> tuple[list[Row], dict[str, Any]]:
    """The counted trials, in folder order, and the sweep's request. In a study of several
    objectives `value` is the training metric's and `best` marks the Pareto front."""
    request = folder.read_request()
    study = studies.open_study(folder, request)
    trials = studies.counted(study.get_trials(deepcopy=False))
    goals = studies.objectives(request)
    at = [m for m, _ in goals].index(request["metric"])
    front = _front(study) if len(goals) > 1 else set()
    best = _best_number(trials, request["direction"]) if len(goals) == 1 else None
    budget = request.get("latency_budget_ms")
    out = []
    for t in trials:
        number = studies.root_number(t)
        steps, time_s = _progress(RunFolder(folder.trial_dir(number)))
        latency = t.user_attrs.get(LATENCY)
        out.append(
            Row(
                trial=folder.trial_name(number), number=t.number, state=t.state.name,
                value=t.values[at] if t.values else _last_reported(t),
                steps=steps, time_s=time_s, best=t.number == best or t.number in front,
                params=dict(t.params), reason=str(t.user_attrs.get(REASON_ATTR, "")),
                latency_ms=latency, pareto=t.number in front,
                within_budget=None if latency is None or budget is None else latency < budget,
            )
        )  # fmt: skip
    out.sort(key=lambda r: r.trial)
    return out, request


def _front(study: Any) -> set[int]:
    return {t.number for t in study.best_trials}


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
    latency = any(r.latency_ms is not None for r in found)
    head = ["trial", "state", metric, *(["latency_ms"] if latency else []), "steps", "time_s",
            "params"]  # fmt: skip
    body = [
        [
            ("* " if r.best else "  ") + r.trial, r.state, _fmt(r.value),
            *([_fmt(r.latency_ms)] if latency else []), _fmt(r.steps),
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


def counts(found: list[Row]) -> dict[str, int]:
    """Trials per outcome: completed, pruned, failed, running (and waiting), apart."""
    out = {"completed": 0, "pruned": 0, "failed": 0, "running": 0}
    names = {"COMPLETE": "completed", "PRUNED": "pruned", "FAIL": "failed"}
    for r in found:
        out[names.get(r.state, "running")] += 1
    return out


def counts_text(found: list[Row]) -> str:
    return ", ".join(f"{n} {k}" for k, n in counts(found).items() if n or k != "running")


def _csv_columns(found: list[Row]) -> tuple[list[str], list[str]]:
    names = sorted({k for r in found for k in r.params})
    fields = [f for f in FIELDS if f != "params"]
    if any(r.latency_ms is not None for r in found):
        fields += ["latency_ms", "pareto", "within_budget"]
    return fields, names


def write(folder: SweepFolder, found: list[Row], request: dict[str, Any]) -> None:
    """summary.csv (one column per param) and summary.md."""
    fields, names = _csv_columns(found)
    with folder.summary_csv.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(fields + names)
        for r in found:
            row = [getattr(r, f) for f in fields] + [r.params.get(n) for n in names]
            writer.writerow(
                ["" if v is None else repr(v) if isinstance(v, float) else v for v in row]
            )
    metric = request["metric"]
    goals = studies.objectives(request)
    asked = ", ".join(f"{m} ({d})" for m, d in goals)
    md = [
        f"# Sweep {folder.name}",
        "",
        f"{len(found)} of {request['trials']} trials: {counts_text(found)}; {asked}; "
        f"pruner {request['pruner']}. "
        + ("Pareto front marked with *." if len(goals) > 1 else "Best marked with *."),
        "",
        "| trial | state | " + metric + " | steps | time (s) | " + " | ".join(names) + " |",
        "|" + "---|" * (5 + len(names)),
    ]
    for r in found:
        cells = [("*" if r.best else "") + r.trial, r.state, _fmt(r.value), _fmt(r.steps)]
        cells.append(_fmt(round(r.time_s, 1) if r.time_s is not None else None))
        cells += [_fmt(r.params.get(n)) for n in names]
        md.append("| " + " | ".join(cells) + " |")
    if len(goals) > 1:
        md += pareto_md(found, request, names)
    folder.summary_md.write_text("\n".join(md) + "\n", encoding="utf-8")


def pareto_md(found: list[Row], request: dict[str, Any], names: list[str]) -> list[str]:
    """The Pareto front's table: each trial's objectives, the latency budget met or not."""
    metric, budget = request["metric"], request.get("latency_budget_ms")
    front = sorted((r for r in found if r.pareto), key=lambda r: r.latency_ms or 0.0)
    shown = f"{budget:g} ms" if budget is not None else "none"
    md = [
        "",
        f"## Pareto front: {metric} against latency_ms",
        "",
        f"{len(front)} trials no other trial beats on both. Latency: batch-1 median on one CPU "
        f"thread of the trial's exported {request.get('export_format') or 'onnx'} model. "
        f"Latency budget {shown}: trials under it marked yes.",
        "",
        f"| trial | {metric} | latency_ms | within {shown} | " + " | ".join(names) + " |",
        "|" + "---|" * (4 + len(names)),
    ]
    for r in front:
        within = "yes" if r.within_budget else "no"
        cells = [r.trial, _fmt(r.value), _fmt(r.latency_ms), within]
        md.append("| " + " | ".join(cells + [_fmt(r.params.get(n)) for n in names]) + " |")
    return md


def best_lines(folder: SweepFolder, found: list[Row], request: dict[str, Any]) -> list[str]:
    """Where the best trial (or the Pareto front) is, and the command that exports it."""
    metric = request["metric"]
    if any(r.pareto for r in found):
        lines = ["Pareto front:"]
        for r in sorted((r for r in found if r.pareto), key=lambda r: r.latency_ms or 0.0):
            budget = "" if r.within_budget is None else (
                ", within budget" if r.within_budget else ", over budget")  # fmt: skip
            lines.append(
                f"  {r.trial}: {metric} {_fmt(r.value)}, latency {_fmt(r.latency_ms)} ms"
                f"{budget}; {folder.path / r.trial}{_exported(folder.path / r.trial)}"
            )
        return lines
    best = next((r for r in found if r.best), None)
    if best is None:
        return []
    run = folder.path / best.trial
    return [
        f"best: {best.trial} ({metric} {_fmt(best.value)}): {run}",
        f"export it: trainforge export {run} --format onnx",
    ]


def _exported(run_dir: Path) -> str:
    """ ", exported to FOLDER": the artifact an edge sweep timed (from its latency.json)."""
    try:
        return f", exported to {read_latency(run_dir)[1]}"
    except (OSError, ValueError, KeyError, IndexError):
        return ""


def status(folder: SweepFolder) -> list[str]:
    """`trainforge sweep status`: the table (written to summary.csv and summary.md too, and
    the plots to report.html), the outcomes counted apart and where the best trial is."""
    from trainforge.sweep.report import write_report

    found, request = rows(folder)
    write(folder, found, request)
    write_report(folder, found, request)
    done = sum(r.state in ("COMPLETE", "PRUNED", "FAIL") for r in found)
    lines = table(found, request["metric"])
    lines.append(f"{done} of {request['trials']} trials finished: {counts_text(found)}")
    lines += best_lines(folder, found, request)
    lines.append(f"summary: {folder.summary_csv}, {folder.summary_md}, {folder.report}")
    return lines
