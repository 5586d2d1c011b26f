"""`trainforge verify RUN|CHECKPOINT`: every checkpoint of a run checked against its manifest
(each file's XXH3-128 checksum), printed as a table; exit 1 when any is damaged.

Flipped bits (a failing disk, a bad copy) show up here before a resume needs the checkpoint;
a resume itself skips a damaged checkpoint in one line and starts from the newest good one.
The checking is `engine.checkpoint.verify`, the same code a resume runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from trainforge.engine import checkpoint as ckpt
from trainforge.errors import UserError
from trainforge.runfolder import find_run


def _folders(target: str) -> list[Path]:
    found = find_run(target)
    if found is None:
        raise UserError(
            f"verify {target}: no run folder or checkpoint there",
            "pass a run folder (runs/NAME) or one of its checkpoints (runs/NAME/checkpoints/X)",
        )
    folder, checkpoint = found
    if checkpoint is not None:
        return [checkpoint]
    root = folder.checkpoints
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def _row(folder: Path) -> tuple[str, str, str, str]:
    problem = ckpt.verify(folder)
    try:
        step = str(ckpt.read_meta(folder).get("global_step", "?"))
    except (OSError, ValueError):
        step = "?"
    try:
        num_files = str(len(json.loads((folder / ckpt.MANIFEST).read_text(encoding="utf-8"))))
    except (OSError, ValueError, TypeError):
        num_files = "-"
    return folder.name, step, num_files, "ok" if problem is None else f"DAMAGED: {problem}"


def verify_main(target: str) -> int:
    """Print the table; 0 when every checkpoint verifies, 1 when one does not."""
    folders = _folders(target)
    if not folders:
        print(f"{target}: no checkpoints")
        return 0
    rows = [("checkpoint", "step", "files", "status"), *(_row(f) for f in folders)]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for row in rows:
        print("  ".join([*(row[i].ljust(widths[i]) for i in range(3)), row[3]]))
    damaged = sum(1 for row in rows[1:] if row[3] != "ok")
    count = len(rows) - 1
    print(f"{count} checkpoint{'' if count == 1 else 's'}, {damaged} damaged")
    return 1 if damaged else 0
