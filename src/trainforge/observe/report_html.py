"""The run report's HTML: one page with inline CSS, plots as data URIs, no scripts.

Plain string formatting rather than Jinja2: Jinja2 belongs to the optional web extra, and
the report must render wherever training runs. Every value from the run folder is escaped.
Number cells carry their exact value in `data-value` (ids such as `val-accuracy-final`), so
a script or a test can read the report without parsing rounded text.
"""

from __future__ import annotations

import base64
import html
import time
from typing import Any

from trainforge.observe.report_data import (
    FLAG_POINTS,
    ClassTable,
    MetricStat,
    RunData,
    metric_stats,
    number,
    telemetry_stats,
    throughput,
)
from trainforge.observe.report_plots import Plot
from trainforge.observe.report_timeline import timeline_svg
from trainforge.registry import TASKS
from trainforge.runfolder import RunFolder

PLOTS_OFF = "plots off: matplotlib is not installed (pip install 'trainforge[track]')"
_SHARE_KEYS = ("accuracy", "per", "wer", "cer", "mfu")
_SPLIT_NAMES = {
    "val": "validation",
    "val_fast": "fast validation",
    "test": "test (final model)",
    "train": "train (last window)",
}
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:#1d2330;
 max-width:1180px;margin:24px auto;padding:0 16px}
h1{font-size:22px;margin-bottom:2px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #dde}
.meta,.note{color:#5b6475}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #d8dce6;padding:3px 9px;text-align:left;vertical-align:top}
th{background:#f3f5f9}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.flag td{background:#fdecec}.warn{color:#a11}.ok{color:#176b2c}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:12px}
figure{margin:0;border:1px solid #e3e6ee;padding:6px}figure img{width:100%;height:auto}
figcaption{font-size:12px;color:#5b6475}pre{background:#f6f7fa;padding:8px;overflow:auto}
"""


# ------------------------------------------------------------------- formatting
def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def fmt(key: str, value: float | None) -> str:
    """How the report shows a metric: shares as percent (2 decimals), loss to 4 decimals."""
    if value is None:
        return "non-finite"
    if key in _SHARE_KEYS or key.endswith("_share"):
        return f"{value * 100:.2f}%"
    if key == "loss" or key.endswith("_loss"):
        return f"{value:.4f}"
    return f"{value:.4g}"


def _head_row(*names: str) -> str:
    return "<tr>" + "".join(f"<th>{_e(name)}</th>" for name in names) + "</tr>"


def _cell(ident: str, key: str, value: float | None) -> str:
    exact = "" if value is None else f' data-value="{value!r}"'
    ident = "_".join(ident.split())  # an id holds no spaces (class names may)
    return f'<td class="num" id="{_e(ident)}"{exact}>{_e(fmt(key, value))}</td>'


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min {secs:02d} s"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_describe(v)}" for k, v in value.items() if v not in (None, ""))
    if isinstance(value, list | tuple):
        return ", ".join(_describe(v) for v in value)
    return str(value)


def _reading(key: str, value: float) -> str:
    if key.endswith("_mib"):
        return f"{value / 1024:.2f} GiB"
    if key.endswith("_mw"):
        return f"{value / 1000:.2f} W"
    units = {"_pct": "%", "_c": "°C", "_w": "W", "_mhz": "MHz"}
    for suffix, unit in units.items():
        if key.endswith(suffix):
            return f"{value:.1f} {unit}"
    return f"{value:.4g}"


# ------------------------------------------------------------------- sections
def render_html(data: RunData, plots: list[Plot] | None, classes: ClassTable | None) -> str:
    name = data.config.get("name") or data.run_dir.name
    parts = [
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">',
        f"<title>trainforge report: {_e(name)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Run report: {_e(name)}</h1>",
        f'<p class="meta">{_e(data.run_dir)} · generated {_e(time.strftime("%Y-%m-%d %H:%M"))}</p>',
        _summary_section(data),
        _timeline_section(data),
        _metrics_section(data),
        _plots_section(plots),
        _classes_section(data, plots, classes),
        _hardware_section(data),
        _notes_section(data),
        _config_section(data),
        "</body></html>\n",
    ]
    return "\n".join(part for part in parts if part)


def _summary_section(data: RunData) -> str:
    s = data.summary
    train = data.split("train")
    speed = throughput(train)
    rows: list[tuple[str, str]] = []
    cfg = data.config_value
    rows.append(("task", _e(cfg("task.kind") or "not recorded")))
    rows.append(("model", _e(_model_line(data))))
    rows.append(("data", _e(cfg("data.dataset") or cfg("data.train_file") or "not recorded")))
    stop = s.get("stop_reason") or "unknown (no summary.json)"
    if s.get("interrupted"):
        stop = f"{stop} (interrupted by {s.get('signal') or 'a signal'})"
    rows.append(("stop reason", _e(stop)))
    steps = s.get("global_step", train[-1]["step"] if train else None)
    epoch = number(train[-1].get("epoch")) if train else None
    rows.append(("steps", _e(f"{steps} (epoch {epoch:.2f})" if epoch is not None else steps)))
    train_s = number(s.get("train_time_s"))
    if train_s is not None:
        rows.append(("training time", _num_cell("summary-train_time_s", train_s, _duration)))
    elif speed.measured_s:
        rows.append(("training time", _e(f"{_duration(speed.measured_s)} (logged windows)")))
    samples = number(s.get("samples_per_s"))
    samples = samples if samples is not None else speed.samples_per_s
    if samples is not None:
        rows.append(("samples/s", _num_cell("summary-samples_per_s", samples, "{:,.1f}".format)))
    if speed.tokens_per_s is not None:
        rows.append(("tokens/s", _num_cell("summary-tokens_per_s", speed.tokens_per_s, "{:,.0f}")))
    if speed.step_time_s is not None:
        rows.append(("step time", _e(f"{speed.step_time_s * 1000:.1f} ms (mean)")))
    if speed.data_wait_share is not None:
        share = speed.data_wait_share
        rows.append(("data wait", _num_cell("summary-data_wait_share", share, "{:.1%}")))
    mfu = number(s.get("mfu"))
    mfu = mfu if mfu is not None else speed.mfu
    rows.append(
        ("MFU", _num_cell("summary-mfu", mfu, "{:.1%}") if mfu is not None else _e(_NO_MFU))
    )
    keys = ("platform", "device", "device_name")
    hardware = " · ".join(dict.fromkeys(_describe(s[k]) for k in keys if s.get(k)))
    rows.append(("hardware", _e(hardware or "not recorded")))
    if s.get("precision"):
        rows.append(("precision", _e(s["precision"])))
    rows.append(("profile", _e(s.get("profile") or cfg("profile") or "not recorded")))
    config_hash = s.get("config_hash") or data.checkpoint_meta.get("config_hash")
    rows.append(("config hash", f"<code>{_e(config_hash or 'not recorded')}</code>"))
    rows += _best_rows(data)
    body = "".join(f"<tr><th>{_e(label)}</th><td>{value}</td></tr>" for label, value in rows)
    return f'<section id="summary"><h2>Summary</h2><table>{body}</table></section>'


def _timeline_section(data: RunData) -> str:
    """The scheduling timeline of a run that stopped and came back (or moved) at least once;
    a run of one segment has nothing to schedule."""
    if len(data.segments) < 2:
        return ""
    svg = timeline_svg(data.segments, data.last_time)
    recovered = [s["recovery_s"] for s in data.segments if s.get("recovery_s") is not None]
    note = (
        f"recovery (stop signal to first step): {', '.join(f'{r:.1f} s' for r in recovered)}"
        if recovered
        else "no stop signal recorded: the recovery time is unknown"
    )
    return (
        '<section id="timeline"><h2>Scheduling timeline</h2>'
        f'<p class="note">{len(data.segments)} segments; {_e(note)}.</p>{svg}</section>'
    )


_NO_MFU = "unknown (needs the model's FLOPs per sample and the device's peak FLOP/s)"


def _num_cell(ident: str, value: float, style) -> str:
    text = style(value) if callable(style) else style.format(value)
    return f'<span id="{_e(ident)}" data-value="{value!r}">{_e(text)}</span>'


def _model_line(data: RunData) -> str:
    model = data.config.get("model")
    if not isinstance(model, dict):
        return "not recorded"
    if model.get("model_name_or_path"):
        return str(model["model_name_or_path"])
    dims = [
        label.format(model[key])
        for key, label in (
            ("embedding_dim", "embedding {}"),
            ("num_layers", "{} layers"),
            ("num_heads", "{} heads"),
            ("mlp_size", "MLP {}"),
            ("patch_size", "patch {}"),
        )
        if model.get(key) is not None
    ]
    arch = str(model.get("arch") or "model")
    return f"{arch}: " + ", ".join(dims) if dims else arch


def _best_rows(data: RunData) -> list[tuple[str, str]]:
    best = number(data.summary.get("best_metric"))
    if best is None:
        return []
    meta = data.checkpoint_meta
    key = meta.get("best_metric") or data.config_value("evaluation.metric_for_best_model") or ""
    where = f" at step {meta['best_step']}" if meta.get("best_step") is not None else ""
    text = f"{fmt(key, best)} {key}{where}"
    checkpoint = data.summary.get("checkpoint")
    line = f'<span id="summary-best_metric" data-value="{best!r}">{_e(text)}</span>'
    rows = [("best checkpoint", line + (f" · <code>{_e(checkpoint)}</code>" if checkpoint else ""))]
    return rows


def _metrics_section(data: RunData) -> str:
    rows: list[str] = []
    val_keys: set[str] = set()
    for split in ("val", "val_fast", "test", "train"):
        stats = metric_stats(data.split(split), split)
        if split == "train":  # train windows: only the metrics validation also reports
            stats = [st for st in stats if st.key in val_keys or not val_keys]
            stats = [st for st in stats if st.key not in ("grad_norm", "lr", "nonfinite_steps")]
        val_keys |= {st.key for st in stats}
        rows += [_metric_row(st) for st in stats]
    if not rows:
        return (
            '<section id="metrics"><h2>Metrics</h2><p class="note">No metrics logged.</p></section>'
        )
    _check_final(data)
    head = _head_row("split", "metric", "final", "step", "best", "step")
    return f'<section id="metrics"><h2>Metrics</h2><table>{head}{"".join(rows)}</table></section>'


def _metric_row(st: MetricStat) -> str:
    prefix = f"{st.split}-{st.key}"
    best = (
        _cell(f"{prefix}-best", st.key, st.best) + f'<td class="num">{st.best_step}</td>'
        if st.split != "train"
        else '<td class="num">—</td><td></td>'
    )
    direction = "lower is better" if st.lower_is_better else "higher is better"
    return (
        f"<tr><td>{_e(_SPLIT_NAMES.get(st.split, st.split))}</td>"
        f'<td title="{direction}">{_e(st.key)}</td>'
        f"{_cell(f'{prefix}-final', st.key, st.final)}"
        f'<td class="num">{st.final_step}</td>{best}</tr>'
    )


def _check_final(data: RunData) -> None:
    """A note when summary.json's final metrics disagree with the last validation record."""
    final = data.summary.get("final_metrics")
    val = data.split("val")
    if not isinstance(final, dict) or not val:
        return
    for key, value in final.items():
        logged, claimed = number(val[-1].get(key)), number(value)
        if logged is not None and claimed is not None and abs(logged - claimed) > 1e-9:
            data.notes.append(
                f"summary.json final {key} {claimed!r} differs from the last validation record "
                f"in metrics.jsonl ({logged!r})"
            )


def _plots_section(plots: list[Plot] | None) -> str:
    if plots is None:
        return f'<section id="plots"><h2>Plots</h2><p class="note">{_e(PLOTS_OFF)}.</p></section>'
    figures = "".join(_figure(p) for p in plots if p.name != "confusion")
    return f'<section id="plots"><h2>Plots</h2><div class="plots">{figures}</div></section>'


def _figure(plot: Plot) -> str:
    data = base64.b64encode(plot.png).decode("ascii")
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{_e(plot.title)}">'
        f"<figcaption>{_e(plot.title)} · report/{_e(plot.name)}.png</figcaption></figure>"
    )


def balance_line(classes: ClassTable) -> str:
    flagged = classes.flagged
    if not flagged:
        return f"balanced: every class within {FLAG_POINTS:g} points of the mean"
    names = ", ".join(f"{r.name} ({fmt('accuracy', r.accuracy)})" for r in flagged)
    return (
        f"{len(flagged)} class(es) more than {FLAG_POINTS:g} points below the mean per-class "
        f"accuracy ({fmt('accuracy', classes.mean_accuracy)}): {names}"
    )


def _classes_section(data: RunData, plots: list[Plot] | None, classes: ClassTable | None) -> str:
    if classes is None:
        # Only a kind that classifies images writes per-class accuracy; a run folder may
        # name a kind this install does not know (a plugin's), which writes none here.
        kind = data.config_value("task.kind")
        if kind in TASKS and TASKS.get(kind).images:
            data.notes.append(
                "no eval/confusion.json: per-class accuracy needs the end of a classification run"
            )
        return ""
    rows = []
    for row in classes.rows:
        gap = (
            f"{(row.accuracy - classes.mean_accuracy) * 100:+.1f}"
            if row.accuracy is not None and classes.mean_accuracy is not None
            else "—"
        )
        flag = ' class="flag"' if row.below_mean_points is not None else ""
        rows.append(
            f"<tr{flag}><td>{_e(row.name)}</td><td class='num'>{row.support}</td>"
            f"<td class='num'>{row.correct}</td>"
            f"{_cell(f'class-{row.name}-accuracy', 'accuracy', row.accuracy)}"
            f"<td class='num'>{gap}</td></tr>"
        )
    total = sum(r.support for r in classes.rows)
    css = "warn" if classes.flagged else "ok"
    intro = (
        f"<p>Overall accuracy {_overall(classes.overall_accuracy)} on {total} "
        f"samples; mean per-class accuracy {_e(fmt('accuracy', classes.mean_accuracy))}.</p>"
        f'<p class="{css}" id="class-balance">{_e(balance_line(classes))}</p>'
    )
    head = _head_row("class", "samples", "correct", "accuracy", "vs mean (points)")
    matrix = next((_figure(p) for p in plots or [] if p.name == "confusion"), "")
    return (
        f'<section id="classes"><h2>Per-class accuracy</h2>{intro}'
        f"<table>{head}{''.join(rows)}</table>{matrix}</section>"
    )


def _overall(value: float | None) -> str:
    exact = "" if value is None else f' data-value="{value!r}"'
    return f'<span id="class-overall"{exact}>{_e(fmt("accuracy", value))}</span>'


def _hardware_section(data: RunData) -> str:
    readings = telemetry_stats(data)
    if not readings:
        return ""
    body = "".join(
        f"<tr><td><code>{_e(r.key)}</code></td><td class='num'>{_e(_reading(r.key, r.mean))}</td>"
        f"<td class='num'>{_e(_reading(r.key, r.max))}</td></tr>"
        for r in readings
        if r.key != "samples" and not r.key.endswith("throttle_reasons")  # a bitmask: no mean
    )
    return (
        '<section id="hardware"><h2>Hardware readings</h2>'
        f"<table>{_head_row('reading', 'mean', 'max')}{body}</table></section>"
    )


def _notes_section(data: RunData) -> str:
    if not data.notes:
        return ""
    items = "".join(f"<li>{_e(note)}</li>" for note in data.notes)
    return f'<section id="notes"><h2>Notes</h2><ul>{items}</ul></section>'


def _config_section(data: RunData) -> str:
    path = RunFolder(data.run_dir).resolved_config
    if not data.config or not path.is_file():
        return ""
    text = path.read_text(encoding="utf-8", errors="replace")
    return f"<details><summary>Resolved config</summary><pre>{_e(text)}</pre></details>"
