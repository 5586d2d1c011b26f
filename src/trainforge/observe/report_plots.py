"""The run report's plots: what to draw from a `RunData`, and drawing it to PNG bytes.

`plot_specs()` decides the plots from the keys that exist (every key is optional: a CPU run
has no GPU memory, a Jetson's temperatures come from tegrastats, NVML's from `gpu<i>_temp_c`).
`render()` draws them with matplotlib's object API on the Agg canvas (no pyplot, so no global
backend switch and no window), and returns None when matplotlib is not installed.
Series longer than `MAX_POINTS` are reduced in equal bins (mean, or max for memory,
temperature and power so peaks survive); a null (non-finite) value leaves a gap.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainforge.observe.report_data import Confusion, RunData, is_task_metric, number

MAX_POINTS = 1500
_MARKERS_UP_TO = 60  # points per line; denser lines are drawn without markers
_GPU_KEY = re.compile(r"^gpu(\d+)_(.+)$")
_INPUT_RAILS = ("vdd_in", "pom_5v_in")  # tegrastats: power_total_mw repeats this rail
_TITLES = {"accuracy": "Accuracy", "per": "PER", "wer": "WER", "cer": "CER"}


@dataclass
class Line:
    label: str
    x: np.ndarray
    y: np.ndarray
    marker: bool = False
    dashed: bool = False
    faint: bool = False


@dataclass
class PlotSpec:
    name: str  # file stem in RUN/report/
    title: str
    ylabel: str
    lines: list[Line] = field(default_factory=list)
    percent: bool = False  # values are shares (0..1), shown as %
    log_y: bool = False
    reduce: str = "mean"  # how a long series is binned: mean or max


@dataclass
class Plot:
    name: str
    title: str
    png: bytes


def _line(records: list[dict[str, Any]], key: str, label: str, scale: float = 1.0, **style):
    having = [r for r in records if key in r]
    y = np.array([np.nan if number(r[key]) is None else number(r[key]) for r in having], float)
    if not np.isfinite(y).any():
        return None
    x = np.array([r["step"] for r in having], float)
    return Line(label, x, y * scale, **style)


def _spec(name: str, title: str, ylabel: str, lines: list[Line | None], **kw) -> PlotSpec | None:
    present = [line for line in lines if line is not None]
    return PlotSpec(name, title, ylabel, present, **kw) if present else None


def plot_specs(data: RunData) -> list[PlotSpec]:
    train, val, fast = data.split("train"), data.split("val"), data.split("val_fast")
    specs = [
        _spec(
            "loss",
            "Loss",
            "loss",
            [
                _line(train, "loss", "train"),
                _line(val, "loss", "validation", marker=True),
                _line(fast, "loss", "fast validation", marker=True, dashed=True),
            ],
        )
    ]
    metric_keys: list[str] = []
    for record in val + fast:
        metric_keys += [k for k in record if is_task_metric(k) and k not in metric_keys]
    for key in sorted((k for k in metric_keys if k != "loss"), key=lambda k: k != "accuracy"):
        values = [number(r.get(key)) for r in val + fast]
        finite = [v for v in values if v is not None and v > 0]
        share = key in ("accuracy", "per", "wer", "cer")
        spread = bool(finite) and max(finite) / min(finite) > 100
        specs.append(
            _spec(
                key,
                _TITLES.get(key, key.replace("_", " ").capitalize()),
                key,
                [
                    _line(val, key, "validation", marker=True),
                    _line(fast, key, "fast validation", marker=True, dashed=True),
                    _line(train, key, "train (window)", faint=True),
                ],
                percent=share,
                log_y=key == "perplexity" and spread,
            )
        )
    specs += [
        _spec("lr", "Learning rate", "learning rate", [_line(train, "lr", "lr")]),
        _spec("samples_per_s", "Throughput", "samples/s", [_line(train, "samples_per_s", "train")]),
        _spec("tokens_per_s", "Token throughput", "tokens/s", [_line(train, "tokens_per_s", "")]),
        _spec(
            "data_wait",
            "Data wait (share of step time)",
            "data wait",
            [_line(train, "data_wait_share", "data wait")],
            percent=True,
        ),
        _spec("grad_norm", "Gradient norm", "norm", [_line(train, "grad_norm", "grad norm")]),
        _spec("mfu", "Model FLOPs utilisation", "MFU", [_line(train, "mfu", "MFU")], percent=True),
    ]
    specs += _telemetry_specs(data.split("telemetry"))
    return [spec for spec in specs if spec is not None]


def _telemetry_specs(records: list[dict[str, Any]]) -> list[PlotSpec | None]:
    keys: list[str] = []
    for record in records:
        keys += [k for k in record if k not in keys]
    gpus = sorted({m.group(1) for m in map(_GPU_KEY.match, keys) if m}, key=int)
    gib = 1 / 1024

    def line(key: str, label: str, scale: float = 1.0, **style) -> Line | None:
        return _line(records, key, label, scale, **style) if key in keys else None

    memory = [
        line("process_rss_mib", "process RSS", gib),
        line("ram_used_mib", "RAM used", gib),
        line("ram_total_mib", "RAM total", gib, dashed=True),
        line("swap_used_mib", "swap used", gib),
    ]
    util = [line("cpu_util_pct", "CPU"), line("gpu_util_pct", "GPU (GR3D)")]
    util.append(line("emc_util_pct", "memory controller (EMC)"))
    temps: list[Line | None] = []
    power: list[Line | None] = []
    for gpu in gpus:
        memory += [
            line(f"gpu{gpu}_mem_used_mib", f"GPU{gpu} memory used", gib),
            line(f"gpu{gpu}_mem_total_mib", f"GPU{gpu} memory total", gib, dashed=True),
        ]
        util.append(line(f"gpu{gpu}_util_pct", f"GPU{gpu}"))
        temps.append(line(f"gpu{gpu}_temp_c", f"GPU{gpu}"))
        power.append(line(f"gpu{gpu}_power_w", f"GPU{gpu}"))
    for key in keys:
        if key.startswith("temp_") and key.endswith("_c"):
            temps.append(line(key, key[len("temp_") : -len("_c")].upper()))
        elif key.startswith("power_") and key.endswith("_mw"):
            rail = key[len("power_") : -len("_mw")]
            if rail == "total":
                power.insert(0, line(key, "board total", 1e-3))
            elif rail not in _INPUT_RAILS:
                power.append(line(key, rail.upper(), 1e-3))
    return [
        _spec("memory", "Memory", "GiB", memory, reduce="max"),
        _spec("utilisation", "Utilisation", "%", util),
        _spec("temperature", "Temperature", "°C", temps, reduce="max"),
        _spec("power", "Power", "W", power, reduce="max"),
    ]


def downsample(x: np.ndarray, y: np.ndarray, max_points: int, reduce: str = "mean"):
    """At most `max_points` points: equal bins of consecutive points, their x mean and their
    y mean (or max); a bin whose values are all null stays a gap."""
    n = len(x)
    if n <= max_points:
        return x, y
    size = -(-n // max_points)
    pad = size * (-(-n // size)) - n
    xs = np.concatenate([x, np.full(pad, np.nan)]).reshape(-1, size)
    ys = np.concatenate([y, np.full(pad, np.nan)]).reshape(-1, size)
    x_ok, y_ok = np.isfinite(xs), np.isfinite(ys)
    x_out = np.where(x_ok, xs, 0).sum(1) / np.maximum(x_ok.sum(1), 1)
    counts = y_ok.sum(1)
    if reduce == "max":
        y_out = np.where(y_ok, ys, -np.inf).max(1)
    else:
        y_out = np.where(y_ok, ys, 0).sum(1) / np.maximum(counts, 1)
    return x_out, np.where(counts > 0, y_out, np.nan)


def _matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import PercentFormatter
    except ImportError:
        return None
    return Figure, FigureCanvasAgg, PercentFormatter


def render(specs: list[PlotSpec], confusion: Confusion | None) -> list[Plot] | None:
    """PNG bytes per plot (the confusion matrix last); None when matplotlib is missing."""
    mpl = _matplotlib()
    if mpl is None:
        return None
    plots = [Plot(spec.name, spec.title, _draw(spec, *mpl)) for spec in specs]
    if confusion is not None:
        plots.append(Plot("confusion", "Confusion matrix", _draw_confusion(confusion, *mpl)))
    return plots


def _png(fig, canvas_type) -> bytes:
    canvas_type(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def _draw(spec: PlotSpec, figure_type, canvas_type, percent_formatter) -> bytes:
    fig = figure_type(figsize=(7.0, 3.0), dpi=100)
    ax = fig.add_subplot()
    for line in spec.lines:
        x, y = downsample(line.x, line.y, MAX_POINTS, spec.reduce)
        ax.plot(
            x,
            y,
            label=line.label,
            linestyle="--" if line.dashed else "-",
            marker="o" if (line.marker and len(x) <= _MARKERS_UP_TO) or len(x) == 1 else None,
            markersize=3,
            linewidth=1.3,
            alpha=0.45 if line.faint else 1.0,
        )
    # A fixed title position and few ticks: matplotlib's automatic title placement and tick
    # layout are most of the drawing time.
    ax.set_title(spec.title, fontsize=10, y=1.0, pad=5)
    ax.locator_params(nbins=6)
    ax.set_xlabel("step", fontsize=9)
    ax.set_ylabel(spec.ylabel, fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.3)
    if spec.percent:
        ax.yaxis.set_major_formatter(percent_formatter(xmax=1.0))
    if spec.log_y:
        ax.set_yscale("log")
    right = 0.98
    if len(spec.lines) > 4:  # many rails or sensors: beside the plot, not over the lines
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        right = 0.78
    elif len(spec.lines) > 1:
        ax.legend(fontsize=8, loc="best")
    fig.subplots_adjust(left=0.1, right=right, top=0.9, bottom=0.16)
    return _png(fig, canvas_type)


def _draw_confusion(confusion: Confusion, figure_type, canvas_type, _percent) -> bytes:
    counts = np.array(confusion.matrix, float)
    totals = counts.sum(axis=1, keepdims=True)
    shares = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
    n = len(counts)
    side = min(2.5 + 0.35 * n, 11.0)
    fig = figure_type(figsize=(side + 1.4, side), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0)
    fig.colorbar(image, ax=ax, label="share of the true class", shrink=0.8)
    if n <= 40:
        names = [name if len(name) <= 14 else name[:13] + "…" for name in confusion.class_names]
        ax.set_xticks(range(n), names, rotation=45 if max(map(len, names)) > 2 else 0, fontsize=8)
        ax.set_yticks(range(n), names, fontsize=8)
    if n <= 15:
        for (row, col), value in np.ndenumerate(counts):
            colour = "white" if shares[row, col] > 0.5 else "black"
            ax.text(col, row, f"{int(value)}", ha="center", va="center", fontsize=7, color=colour)
    ax.set_xlabel("predicted class", fontsize=9)
    ax.set_ylabel("true class", fontsize=9)
    ax.set_title(
        "Confusion matrix (counts; colour: share of the true class)", fontsize=10, y=1.0, pad=5
    )
    return _png(fig, canvas_type)
