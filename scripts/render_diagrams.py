#!/usr/bin/env python3
"""Write the pipeline diagram, `docs/diagrams/pipeline.drawio` and `pipeline.svg`, from one
table of boxes and arrows, so the editable source and the picture never disagree.

The training-pipeline asset README lists a draw.io source and SVG exports among its
diagrams. draw.io reads the uncompressed `mxfile` XML written here (File > Open); the SVG
is drawn directly, as draw.io's own export needs its desktop app. Graphviz was considered
for the layout and not used: the grid is small, and a fixed grid keeps both files stable
from run to run. The package boxes name the folders of the `trainforge` package; a test
keeps them equal to the folders that exist.

Usage: python3 scripts/render_diagrams.py [--check]   (--check: exit 1 when a file is stale)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from html import escape
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "docs" / "diagrams"
BOX_W, BOX_H, COL_W, ROW_H, MARGIN = 180, 62, 250, 96, 20


@dataclass(frozen=True)
class Box:
    key: str  # the package folder under src/trainforge/, or a module / folder name
    title: str
    detail: str
    col: int
    row: int
    package: bool = True  # a package of trainforge (the test checks these against the tree)


BOXES = (
    Box("web", "web app", "dialog, queue, pages", 0, 0),
    Box("sweep", "sweeps", "Optuna trials", 0, 1),
    Box("launch", "Slurm / torchrun", "sbatch script", 0, 2),
    Box("targets", "targets, jobs", "SSH to a login node", 0, 3),
    Box("cli", "trainforge CLI", "cli.py: thin subcommands", 1, 1, package=False),
    Box("recipes", "recipes", "packaged configs + data", 1, 2),
    Box("doctor", "doctor", "checks with their fix", 2, 0),
    Box("hardware", "hardware", "detect, telemetry", 2, 1),
    Box("config", "config", "load, validate, plan", 2, 2),
    Box("profiles", "hardware profiles", "one YAML each", 2, 3),
    Box("parallel", "parallel", "process group, DDP/FSDP", 3, 0),
    Box("train", "train entry", "train.py composes a run", 3, 1, package=False),
    Box("run", "run", "resume, header, outputs", 3, 2),
    Box("data", "data", "datasets, sample stream", 4, 0),
    Box("tasks", "tasks", "vision, causal LM", 4, 1),
    Box("models", "models", "ViT, Hugging Face", 4, 2),
    Box("engine", "engine", "Trainer, checkpointer", 5, 1),
    Box("observe", "observe", "meters, loggers, report", 5, 2),
    Box("runfolder", "runs/NAME/", "runfolder.py: the run", 6, 1, package=False),
    Box("export", "export", "ONNX, INT8, pruning", 6, 2),
    Box("generate", "generate", "answers from a model", 6, 3),
)

# (from, to, label): what flows along each arrow.
ARROWS = (
    ("web", "cli", "subprocess"),
    ("sweep", "cli", "a run a trial"),
    ("launch", "cli", "srun"),
    ("targets", "launch", "sbatch"),
    ("cli", "hardware", ""),
    ("hardware", "doctor", ""),
    ("hardware", "config", "Platform"),
    ("profiles", "config", ""),
    ("recipes", "config", "by name"),
    ("config", "train", "plan"),
    ("train", "parallel", ""),
    ("train", "run", ""),
    ("train", "tasks", ""),
    ("tasks", "data", ""),
    ("tasks", "models", ""),
    ("tasks", "engine", "loss"),
    ("engine", "observe", ""),
    ("engine", "runfolder", "saves"),
    ("observe", "runfolder", "metrics"),
    ("runfolder", "export", "weights"),
    ("runfolder", "generate", "weights"),
)


def _xy(box: Box) -> tuple[int, int]:
    return MARGIN + box.col * COL_W, MARGIN + box.row * ROW_H


def _size() -> tuple[int, int]:
    cols = max(b.col for b in BOXES) + 1
    rows = max(b.row for b in BOXES) + 1
    return 2 * MARGIN + (cols - 1) * COL_W + BOX_W, 2 * MARGIN + (rows - 1) * ROW_H + BOX_H


def _ends(a: Box, b: Box) -> tuple[float, float, float, float]:
    """Arrow end points: side to side between columns, top/bottom within one."""
    ax, ay = _xy(a)
    bx, by = _xy(b)
    if a.col == b.col:
        down = b.row > a.row
        return (
            ax + BOX_W / 2,
            ay + (BOX_H if down else 0),
            bx + BOX_W / 2,
            by + (0 if down else BOX_H),
        )
    right = b.col > a.col
    return (
        ax + (BOX_W if right else 0),
        ay + BOX_H / 2,
        bx + (0 if right else BOX_W),
        by + BOX_H / 2,
    )


def svg() -> str:
    by_key = {b.key: b for b in BOXES}
    width, height = _size()
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif">',
        "<title>trainforge pipeline</title>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker>'
        "</defs>",
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
    ]
    for source, target, label in ARROWS:
        x1, y1, x2, y2 = _ends(by_key[source], by_key[target])
        mx = (x1 + x2) / 2
        if by_key[source].col == by_key[target].col:
            path = f"M{x1:.0f},{y1:.0f} L{x2:.0f},{y2:.0f}"
        else:
            path = f"M{x1:.0f},{y1:.0f} C{mx:.0f},{y1:.0f} {mx:.0f},{y2:.0f} {x2:.0f},{y2:.0f}"
        out.append(
            f'<path class="arrow" data-from="{source}" data-to="{target}" d="{path}" '
            'fill="none" stroke="#555" stroke-width="1.4" marker-end="url(#arrow)"/>'
        )
        if label:
            # Beside a vertical arrow, above the middle of a sideways one.
            vertical = by_key[source].col == by_key[target].col
            lx, ly = (x1 + 6, (y1 + y2) / 2 + 4) if vertical else (mx, (y1 + y2) / 2 - 4)
            out.append(
                f'<text x="{lx:.0f}" y="{ly:.0f}" font-size="10" fill="#444" '
                f'text-anchor="{"start" if vertical else "middle"}">{escape(label)}</text>'
            )
    for box in BOXES:
        x, y = _xy(box)
        fill = "#e8f0fe" if box.package else "#fff4e0"
        out += [
            f'<g class="box" data-key="{box.key}">',
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="8" fill="{fill}" '
            'stroke="#3b5b92" stroke-width="1.2"/>',
            f'<text x="{x + BOX_W / 2:.0f}" y="{y + 26}" font-size="14" font-weight="bold" '
            f'text-anchor="middle">{escape(box.title)}</text>',
            f'<text x="{x + BOX_W / 2:.0f}" y="{y + 46}" font-size="11" fill="#333" '
            f'text-anchor="middle">{escape(box.detail)}</text>',
            "</g>",
        ]
    out.append("</svg>")
    return "\n".join(out) + "\n"


def drawio() -> str:
    width, height = _size()
    cells = ['<mxCell id="0"/>', '<mxCell id="1" parent="0"/>']
    for box in BOXES:
        x, y = _xy(box)
        fill = "#e8f0fe" if box.package else "#fff4e0"
        value = escape(f"<b>{escape(box.title)}</b><br>{escape(box.detail)}")
        cells.append(
            f'<mxCell id="{box.key}" value="{value}" style="rounded=1;whiteSpace=wrap;html=1;'
            f'fillColor={fill};strokeColor=#3b5b92;" vertex="1" parent="1">'
            f'<mxGeometry x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" as="geometry"/>'
            "</mxCell>"
        )
    for i, (source, target, label) in enumerate(ARROWS):
        cells.append(
            f'<mxCell id="arrow-{i}" value="{escape(label)}" style="edgeStyle=orthogonalEdgeStyle;'
            f'rounded=1;html=1;endArrow=block;fontSize=10;" edge="1" parent="1" '
            f'source="{source}" target="{target}"><mxGeometry relative="1" as="geometry"/>'
            "</mxCell>"
        )
    body = "\n        ".join(cells)
    return (
        '<mxfile host="trainforge" type="device">\n'
        '  <diagram id="pipeline" name="trainforge pipeline">\n'
        f'    <mxGraphModel dx="{width}" dy="{height}" grid="1" gridSize="10" guides="1" '
        f'page="1" pageWidth="{width}" pageHeight="{height}">\n'
        "      <root>\n"
        f"        {body}\n"
        "      </root>\n"
        "    </mxGraphModel>\n"
        "  </diagram>\n"
        "</mxfile>\n"
    )


def files() -> dict[Path, str]:
    return {OUT / "pipeline.drawio": drawio(), OUT / "pipeline.svg": svg()}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path, text in files().items():
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if check and stale:
        names = ", ".join(p.name for p in stale)
        print(f"stale: {names}. Fix: python3 scripts/render_diagrams.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
