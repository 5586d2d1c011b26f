"""`runs/NAME/report.html`: parallel coordinates of the params, the metric against the trial,
and the trials' validation curves overlaid; and `curves()`, a run folder's loss and metric
curves, which the web app's Compare runs view reads too.

One self-contained page (inline SVG, no script, no download): it opens from a cluster's
shared file system as well as from the web app. Plotly (what Optuna's own `optuna.
visualization` draws with) was considered: it adds a 3 MB script to every page or a network
fetch, for three plots.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from trainforge.observe import series
from trainforge.runfolder import RunFolder
from trainforge.sweep.study import SweepFolder

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")  # fmt: skip
W, H, PAD = 560, 260, 40


def curves(run: RunFolder) -> dict[str, list[list[float]]]:
    """{"train_loss", "val_loss", "val_<metric>"...: [[step, value], ...]} from the run's
    chart buckets (`observe.series`: the points themselves up to 2,000 steps, each bucket's
    last value beyond), so a long trial costs what a short one does; a step logged again
    after a resume keeps its newest value."""
    if not run.metrics.is_file():
        return {}
    try:
        found = series.load(run.metrics).view(2 * series.MAX_BUCKETS)["series"]
    except OSError:
        return {}
    out = {}
    for split in ("train", "val"):
        for key in ("loss", "accuracy", "perplexity", "per", "wer"):
            column = found.get(f"{split}/{key}")
            if column:
                out[f"{split}_{key}"] = [
                    [step, value]
                    for step, value in zip(column["step"], column["last"], strict=True)
                    if value is not None
                ]
    return out


def _scale(values: list[float], low: float, high: float) -> Any:
    lo, hi = min(values), max(values)
    if hi == lo:
        hi = lo + 1.0
    return lambda v: high - (v - lo) / (hi - lo) * (high - low)


def _svg(body: list[str], title: str) -> str:
    return (
        f"<figure><figcaption>{html.escape(title)}</figcaption>"
        f'<svg width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" '
        f'aria-label="{html.escape(title)}">{"".join(body)}</svg></figure>'
    )


def _poly(points: list[tuple[float, float]], color: str, label: str) -> str:
    text = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    return (
        f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{text}">'
        f"<title>{html.escape(label)}</title></polyline>"
    )


def overlay(series: dict[str, list[list[float]]], title: str) -> str:
    """Curves of several runs on one plot (x: step)."""
    points = [p for s in series.values() for p in s]
    if not points:
        return _svg(['<text x="40" y="130">no validation yet</text>'], title)
    fx = _scale([p[0] for p in points], PAD, W - 10)
    fy = _scale([p[1] for p in points], 10, H - PAD)
    body = []
    for i, (name, line) in enumerate(series.items()):
        xy = [(W - 10 + PAD - fx(x), fy(y)) for x, y in line]
        body.append(_poly(xy, COLORS[i % len(COLORS)], name))
    lo, hi = min(p[1] for p in points), max(p[1] for p in points)
    body.append(f'<text x="2" y="14" font-size="11">{hi:.4g}</text>')
    body.append(f'<text x="2" y="{H - PAD}" font-size="11">{lo:.4g}</text>')
    return _svg(body, title)


def parallel_coordinates(rows: list[Any], metric: str) -> str:
    """One axis per param and one for the metric; one line per trial that has a value."""
    names = sorted({k for r in rows for k in r.params})
    axes = [*names, metric]
    done = [r for r in rows if r.value is not None]
    if not done or not names:
        return _svg(['<text x="40" y="130">no finished trial yet</text>'], "Parallel coordinates")
    step = (W - 2 * PAD) / max(1, len(axes) - 1)
    body = []
    scales = {}
    for i, axis in enumerate(axes):
        x = PAD + i * step
        body.append(f'<line x1="{x}" y1="20" x2="{x}" y2="{H - PAD}" stroke="#999"/>')
        body.append(f'<text x="{x - 30}" y="{H - 12}" font-size="10">{html.escape(axis)}</text>')
        values = [
            _number(r.value if axis == metric else r.params.get(axis), axis, rows) for r in done
        ]
        scales[axis] = _scale(values, 20, H - PAD)
    for j, r in enumerate(done):
        xy = [
            (
                PAD + i * step,
                scales[a](_number(r.value if a == metric else r.params.get(a), a, rows)),
            )
            for i, a in enumerate(axes)
        ]
        body.append(_poly(xy, COLORS[j % len(COLORS)], f"{r.trial}: {r.state} {r.value:.4g}"))
    return _svg(body, "Parallel coordinates")


def _number(value: Any, axis: str, rows: list[Any]) -> float:
    """A param's value on its axis: numbers as they are (log10 for small positive ones), a
    choice of text by its index."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        choices = sorted({str(r.params.get(axis)) for r in rows})
        return float(choices.index(str(value)))
    return math.log10(value) if 0 < value < 0.1 else float(value)


def metric_by_trial(rows: list[Any], metric: str) -> str:
    done = [(r.number, r.value) for r in rows if r.value is not None]
    if not done:
        return _svg(['<text x="40" y="130">no finished trial yet</text>'], f"{metric} by trial")
    fx = _scale([float(n) for n, _ in done], PAD, W - 10)
    fy = _scale([v for _, v in done], 10, H - PAD)
    body = [
        f'<circle cx="{W - 10 + PAD - fx(float(n)):.1f}" cy="{fy(v):.1f}" r="4" fill="#1f77b4">'
        f"<title>trial {n}: {v:.6g}</title></circle>"
        for n, v in done
    ]
    return _svg(body, f"{metric} by trial")


def pareto(rows: list[Any], request: dict[str, Any]) -> str:
    """An edge sweep's trials by latency (x) and metric (y): the Pareto front filled and
    joined, the latency budget as a dashed line; then the front as a table."""
    metric, budget = request["metric"], request.get("latency_budget_ms")
    done = [r for r in rows if r.value is not None and r.latency_ms is not None]
    if not done:
        return _svg(['<text x="40" y="130">no timed trial yet</text>'], "Pareto front")
    xs = [r.latency_ms for r in done] + ([budget] if budget is not None else [])
    fx = _scale(xs, PAD, W - 10)
    fy = _scale([r.value for r in done], 10, H - PAD)

    def x(v: float) -> float:
        return W - 10 + PAD - fx(v)

    body = []
    if budget is not None:
        body.append(f'<line x1="{x(budget):.1f}" y1="10" x2="{x(budget):.1f}" y2="{H - PAD}" '
                    f'stroke="#2ca02c" stroke-dasharray="4 3"><title>latency budget '
                    f"{budget:g} ms</title></line>")  # fmt: skip
    front = sorted((r for r in done if r.pareto), key=lambda r: r.latency_ms)
    body.append(_poly([(x(r.latency_ms), fy(r.value)) for r in front], "#d62728", "Pareto front"))
    for r in done:
        fill = "#d62728" if r.pareto else "none"
        body.append(
            f'<circle cx="{x(r.latency_ms):.1f}" cy="{fy(r.value):.1f}" r="4" fill="{fill}" '
            f'stroke="#d62728"><title>{html.escape(r.trial)}: {metric} {r.value:.4g}, '
            f"{r.latency_ms:.4g} ms</title></circle>"
        )
    body.append(f'<text x="{PAD}" y="{H - 12}" font-size="10">latency_ms (batch 1, one thread)'
                f"</text>")  # fmt: skip
    cells = "".join(
        f"<tr><td>{html.escape(r.trial)}</td><td>{r.value:.4g}</td><td>{r.latency_ms:.4g}</td>"
        f"<td>{'yes' if r.within_budget else 'no'}</td></tr>"
        for r in front
    )
    shown = f"{budget:g} ms" if budget is not None else "none"
    table = (
        f"<table class=pareto><caption>Pareto front ({len(front)} trials)</caption><tr>"
        f"<th>trial</th><th>{html.escape(metric)}</th><th>latency_ms</th>"
        f"<th>within {shown}</th></tr>{cells}</table>"
    )
    return _svg(body, f"Pareto front: {metric} against latency_ms") + table


def write_report(folder: SweepFolder, rows: list[Any], request: dict[str, Any]) -> Path:
    metric = request["metric"]
    val = {r.trial: curves(RunFolder(folder.path / r.trial)).get(f"val_{metric}", []) for r in rows}
    legend = "".join(
        f'<li style="color:{COLORS[i % len(COLORS)]}">{html.escape(r.trial)} {r.state}'
        f"{' (best)' if r.best else ''}</li>"
        for i, r in enumerate(rows)
    )
    page = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>Sweep {html.escape(folder.name)}</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:2em}figure{display:inline-block;"
        "margin:0 1em 1em 0}svg{border:1px solid #ddd}</style></head><body>"
        f"<h1>Sweep {html.escape(folder.name)}</h1><p>{len(rows)} of {request['trials']} "
        f"trials, {html.escape(metric)} ({request['direction']}), pruner {request['pruner']}."
        "</p>"
        + (pareto(rows, request) if request.get("latency_budget_ms") is not None else "")
        + parallel_coordinates(rows, metric)
        + metric_by_trial(rows, metric)
        + overlay(val, f"validation {metric} of every trial")
        + f"<ul>{legend}</ul></body></html>"
    )
    folder.report.write_text(page, encoding="utf-8")
    return folder.report
