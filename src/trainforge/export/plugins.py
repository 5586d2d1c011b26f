"""The plugins a run records, imported again before its export: the run's `extensions`.

A run or checkpoint folder keeps its config (`config.resolved.yaml`, or a checkpoint's own
config); its `extensions` are imported before `--format` is checked, so a format, task or
model a plugin registers is known to `trainforge export`. A relative plugin file is also
looked up where the run started (its run.json's `cwd`). No torch import here, so the option
checks stay quick.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from trainforge.engine import checkpoint as ckpt
from trainforge.runfolder import RunFolder


def run_of(checkpoint: Path) -> Path:
    """The run folder whose checkpoints/ holds `checkpoint`, else the checkpoint itself."""
    run = RunFolder(checkpoint.parent.parent)
    return run.path if run.checkpoints == checkpoint.parent else checkpoint


def load_run_plugins(path: Path) -> None:
    """Import the plugins a run or checkpoint folder records (its config's `extensions`), so
    that its export formats are known before `--format` is checked; quiet when unreadable
    (`export.source.resolve_source` names the problem later)."""
    if not path.is_dir():
        return
    is_checkpoint = (path / ckpt.MANIFEST).is_file()
    config_file = ckpt.config_file(path) if is_checkpoint else RunFolder(path).resolved_config
    try:
        raw = yaml.safe_load(config_file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return
    if isinstance(raw, dict) and raw.get("extensions"):
        load_plugins(raw, run_of(path) if is_checkpoint else path)


def load_plugins(raw: dict[str, Any], run_dir: Path) -> None:
    """The run's plugins (`extensions`), imported before its names are checked; a relative
    file is looked up where the run started too."""
    from trainforge.extensions import listed, load_extensions

    run = RunFolder(run_dir)
    started = run.read_run().get("cwd") if run.is_run() else None
    load_extensions(listed(raw.get("extensions")), base=Path(started) if started else None)
