"""The pipeline diagram (`docs/diagrams/pipeline.drawio` and `pipeline.svg`) is kept true:
both files are what `scripts/render_diagrams.py` writes from its one table, each package box
names a package folder of trainforge, and every package folder has its box."""

from __future__ import annotations

import importlib.util
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "trainforge"
SVG = "{http://www.w3.org/2000/svg}"


def _renderer():
    spec = importlib.util.spec_from_file_location(
        "render_diagrams", REPO / "scripts" / "render_diagrams.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def _packages() -> set[str]:
    """Folders of the package that hold code or data a run uses (profiles are YAML)."""
    return {
        p.name
        for p in PACKAGE.iterdir()
        if p.is_dir() and not p.name.startswith(("_", ".")) and any(p.glob("*.*"))
    }


def test_the_committed_files_are_what_the_table_draws():
    render = _renderer()
    for path, text in render.files().items():
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.name} is stale: run python3 scripts/render_diagrams.py"
        )
    assert render.main(["--check"]) == 0


def test_every_package_has_its_box_and_every_box_its_package():
    render = _renderer()
    shown = {box.key for box in render.BOXES if box.package}
    assert shown == _packages()
    for box in render.BOXES:
        if not box.package:
            assert (PACKAGE / f"{box.key}.py").is_file() or box.key == "runfolder"


def test_both_files_show_the_same_boxes_and_arrows():
    render = _renderer()
    keys = {box.key for box in render.BOXES}
    drawio = ET.parse(REPO / "docs" / "diagrams" / "pipeline.drawio").getroot()
    cells = drawio.iter("mxCell")
    vertices, edges = set(), set()
    for cell in cells:
        if cell.get("vertex") == "1":
            vertices.add(cell.get("id"))
        elif cell.get("edge") == "1":
            edges.add((cell.get("source"), cell.get("target")))
    svg = ET.parse(REPO / "docs" / "diagrams" / "pipeline.svg").getroot()
    boxes = {g.get("data-key") for g in svg.iter(f"{SVG}g") if g.get("class") == "box"}
    arrows = {
        (p.get("data-from"), p.get("data-to"))
        for p in svg.iter(f"{SVG}path")
        if p.get("class") == "arrow"
    }
    assert vertices == boxes == keys
    assert edges == arrows == {(a, b) for a, b, _ in render.ARROWS}
    assert all(a in keys and b in keys for a, b in edges)
