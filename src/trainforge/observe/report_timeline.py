"""The run report's scheduling timeline: run.json's segments drawn as one inline SVG.

One lane per node (host and node rank); each segment is a bar on the lanes of its nodes,
from its process start (a light part: start-up and loading the checkpoint) through its first
step to its end, labelled with its process count. A stop signal is a red line, with the
save that followed it; the gap from a stop signal to the next segment's first step is the
recovery, drawn and labelled with its seconds on the job's own lane above the nodes, with
what brought the run back (a Slurm requeue, a torchrun restart or new rendezvous, a resume).

Hand-written SVG text rather than matplotlib: the report's plots are PNGs that need the
optional plotting extra, while the timeline is a handful of rectangles and lines that must
render wherever the report does, stay sharp at any zoom, and carry the segments' numbers as
attributes a test or a script can read. `python -m trainforge.observe.report_timeline RUN
OUT.svg` writes one run's timeline on its own (the docs' diagram is made that way).
"""

from __future__ import annotations

import html
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

LABEL_W, PLOT_W, RIGHT = 170, 720, 30
TOP, LANE_H, BAR_H = 58, 40, 24
COLOURS = ("#4b7bd1", "#2f9e6a", "#c7771f", "#8a5cc2", "#c24f6a", "#3a9aa8")


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _at(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text)).timestamp() if text else None
    except ValueError:
        return None


def _nodes(segment: dict[str, Any]) -> list[dict[str, Any]]:
    found = segment.get("nodes")
    if isinstance(found, list) and found:
        return found
    processes = segment.get("world_size") or 1  # a segment from before nodes were recorded
    return [{"host": segment.get("host") or "?", "node": 0, "processes": processes}]


def _lane(node: dict[str, Any]) -> tuple[str, int]:
    return str(node.get("host")), int(node.get("node") or 0)


def spans(segments: list[dict[str, Any]], last_time: float | None) -> list[dict[str, float]]:
    """Each segment's (start, first step, end) in epoch seconds: the end is its recorded end,
    else its save after a stop, else the next segment's start, else the last logged time."""
    out = []
    for index, seg in enumerate(segments):
        start = _at(seg.get("process_started_at")) or _at(seg.get("started")) or 0.0
        first = _at(seg.get("first_step_at")) or start
        following = segments[index + 1] if index + 1 < len(segments) else {}
        end = (
            _at(seg.get("ended_at"))
            or _at(seg.get("stop_saved_at"))
            or _at(following.get("process_started_at"))
            or _at(following.get("started"))
            or last_time
            or first
        )
        out.append({"start": start, "first": first, "end": max(end, first)})
    return out


def transition(previous: dict[str, Any], segment: dict[str, Any]) -> str:
    """What brought the run back for `segment` after `previous`."""
    job = segment.get("launcher_job") or ""
    same_job = bool(job) and job == previous.get("launcher_job")
    if segment.get("restart_count"):  # torchrun's agent, also inside a Slurm job
        return f"torchrun restart {segment['restart_count']}"
    if same_job and job.startswith("slurm"):
        return f"requeued ({job})"
    if same_job and job.startswith("torchrun"):
        return "new rendezvous (nodes changed)"
    return "resumed"


def timeline_svg(segments: list[dict[str, Any]], last_time: float | None = None) -> str:
    """The SVG text of a run's segments ("" without segments)."""
    if not segments:
        return ""
    times = spans(segments, last_time)
    lanes = sorted({_lane(n) for seg in segments for n in _nodes(seg)})
    t0 = min(t["start"] for t in times)
    t1 = max(max(t["end"] for t in times), t0 + 1.0)

    def x(t: float) -> float:
        return round(LABEL_W + (t - t0) / (t1 - t0) * PLOT_W, 1)

    height = TOP + LANE_H * (len(lanes) + 1) + 46
    width = LABEL_W + PLOT_W + RIGHT
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" '
        'font-size="11">',
        "<title>Scheduling timeline: the run's segments per node</title>",
        *_axis(t0, t1, x, height),
        f'<text x="8" y="{TOP + BAR_H / 2 + 4}" font-weight="bold">job</text>',
    ]
    for number, (host, node) in enumerate(lanes, start=1):
        y = TOP + LANE_H * number
        parts.append(f'<text x="8" y="{y + BAR_H / 2 + 4}">{_e(host)} · node {node}</text>')
    for index, (seg, span) in enumerate(zip(segments, times, strict=True)):
        parts += _segment(index, seg, span, lanes, x)
        if index:
            parts += _between(segments[index - 1], seg, span, x)
        if seg.get("stop_signal_at"):
            parts += _stop(seg, x, len(lanes))
    parts.append(
        f'<text x="8" y="{height - 8}" fill="#5b6475">light: start-up and checkpoint load · '
        "solid: training · red: stop signal (dashed: its checkpoint saved) · yellow: recovery, "
        "stop signal to first step · green: resume</text>"
    )
    parts.append("</svg>")
    return "\n".join(parts)


def _axis(t0: float, t1: float, x, height: int) -> list[str]:
    total = t1 - t0
    step = next((s for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200)
                 if total / s <= 8), 14400)  # fmt: skip
    out = [f'<line x1="{LABEL_W}" y1="{TOP - 14}" x2="{LABEL_W + PLOT_W}" y2="{TOP - 14}" '
           'stroke="#999"/>']  # fmt: skip
    mark = 0.0
    while mark <= total + 1e-9:
        label = f"{mark / 60:g} min" if step >= 60 else f"{mark:g} s"
        px = x(t0 + mark)
        out.append(
            f'<line x1="{px}" y1="{TOP - 18}" x2="{px}" y2="{height - 24}" stroke="#e3e6ee"/>'
            f'<text x="{px}" y="{TOP - 22}" text-anchor="middle" fill="#5b6475">+{label}</text>'
        )
        mark += step
    start = datetime.fromtimestamp(t0, UTC).strftime("%Y-%m-%d %H:%M:%S")
    out.append(f'<text x="8" y="16" fill="#5b6475">from {_e(start)} UTC</text>')
    return out


def _segment(index: int, seg: dict[str, Any], span, lanes, x) -> list[str]:
    colour = COLOURS[index % len(COLOURS)]
    world = seg.get("world_size") or sum(int(n.get("processes") or 1) for n in _nodes(seg))
    end_text = seg.get("end") or seg.get("stop_signal") or "no end recorded"
    out = []
    for node in _nodes(seg):
        y = TOP + LANE_H * (lanes.index(_lane(node)) + 1)
        processes = int(node.get("processes") or 1)
        tip = (
            f"segment {index + 1}: {processes} of {world} processes on {node.get('host')}, "
            f"from step {seg.get('from_step', 0)} ({seg.get('resume', 'start')}); {end_text}"
        )
        out.append(
            f'<rect class="startup" x="{x(span["start"])}" y="{y}" '
            f'width="{max(x(span["first"]) - x(span["start"]), 0.5)}" height="{BAR_H}" '
            f'fill="{colour}" opacity="0.3"><title>{_e(tip)} · start-up</title></rect>'
        )
        width = max(x(span["end"]) - x(span["first"]), 1.0)
        out.append(
            f'<rect class="segment" data-segment="{index}" data-host="{_e(node.get("host"))}" '
            f'data-processes="{processes}" data-world-size="{world}" '
            f'data-from-step="{_e(seg.get("from_step", 0))}" x="{x(span["first"])}" y="{y}" '
            f'width="{width}" height="{BAR_H}" fill="{colour}"><title>{_e(tip)}</title></rect>'
        )
        if width > 60:
            out.append(
                f'<text x="{x(span["first"]) + 5}" y="{y + BAR_H / 2 + 4}" fill="white">'
                f"{processes} proc · step {_e(seg.get('from_step', 0))}+</text>"
            )
    return out


def _between(previous: dict[str, Any], seg: dict[str, Any], span, x) -> list[str]:
    """The job lane at a restart: the recovery gap, and what brought the run back."""
    how = transition(previous, seg)
    out = []
    stopped = _at(previous.get("stop_signal_at"))
    if stopped is not None and seg.get("recovery_s") is not None:
        width = max(x(span["first"]) - x(stopped), 1.0)
        out.append(
            f'<rect class="recovery" data-recovery-s="{seg["recovery_s"]}" x="{x(stopped)}" '
            f'y="{TOP}" width="{width}" height="{BAR_H}" fill="#f2c14e">'
            f"<title>recovery: {seg['recovery_s']} s from the stop signal to the first step"
            "</title></rect>"
        )
        how = f"{how} · recovery {float(seg['recovery_s']):.1f} s"
    resume = f"resume from step {seg.get('from_step', 0)} ({seg.get('resume', '')})"
    # Right of the resume line where the text fits (about 6 px a character), else left of it.
    fits = x(span["first"]) + 6 * len(how) < LABEL_W + PLOT_W
    at = x(span["first"])
    anchor = f'x="{at + 4}"' if fits else f'x="{at - 4}" text-anchor="end"'
    out.append(
        f'<text class="restart" {anchor} y="{TOP + BAR_H / 2 + 4}">{_e(how)}</text>'
        f'<line x1="{x(span["first"])}" y1="{TOP - 4}" x2="{x(span["first"])}" '
        f'y2="{TOP + BAR_H + 4}" stroke="#176b2c" stroke-width="2"><title>{_e(resume)}'
        "</title></line>"
    )
    return out


def _stop(seg: dict[str, Any], x, num_lanes: int) -> list[str]:
    signal_x = x(_at(seg["stop_signal_at"]) or 0.0)
    bottom = TOP + LANE_H * (num_lanes + 1)
    out = [
        f'<line class="stop" x1="{signal_x}" y1="{TOP - 4}" x2="{signal_x}" y2="{bottom}" '
        f'stroke="#c0392b" stroke-width="2"><title>{_e(seg.get("stop_signal"))} at '
        f"{_e(seg['stop_signal_at'])}</title></line>",
        f'<text x="{signal_x - 3}" y="{bottom + 12}" text-anchor="end" fill="#c0392b">'
        f"{_e(seg.get('stop_signal'))}</text>",
    ]
    saved = _at(seg.get("stop_saved_at"))
    if saved is not None:
        out.append(
            f'<line class="saved" x1="{x(saved)}" y1="{TOP + LANE_H}" x2="{x(saved)}" '
            f'y2="{bottom}" stroke="#c0392b" stroke-dasharray="3 2"><title>checkpoint saved at '
            f"{_e(seg['stop_saved_at'])}</title></line>"
        )
    return out


def main(argv: list[str]) -> int:
    """`python -m trainforge.observe.report_timeline RUN OUT.svg`."""
    from trainforge.errors import UserError
    from trainforge.observe.report_data import load_run

    if len(argv) != 2:
        print("usage: python -m trainforge.observe.report_timeline RUN OUT.svg", file=sys.stderr)
        return 2
    try:
        data = load_run(Path(argv[0]))
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    svg = timeline_svg(data.segments, data.last_time)
    if not svg:
        print(f"error: {argv[0]} records no segments in run.json", file=sys.stderr)
        return 2
    Path(argv[1]).write_text(svg + "\n", encoding="utf-8")
    print(f"timeline: {argv[1]} ({len(data.segments)} segments)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
