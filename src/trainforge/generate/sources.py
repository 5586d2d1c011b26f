"""Which model a name means for `trainforge generate` (the package doc lists the cases), found
before anything loads, and the generation settings asked for. A Hub id goes through
`models.hub` (huggingface_hub's cache, as a base model does).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trainforge.errors import UserError
from trainforge.runfolder import RunFolder

PLAIN_TEMPLATE = "{prompt}\n"
DEFAULT_MAX_NEW_TOKENS = 128
BASE = "base"  # --compare base: the base model the first model records
HOW = "pass a model folder (models/NAME), a LoRA adapter folder or a causal-lm run (runs/NAME)"


@dataclass
class Settings:
    """How to generate: None keeps the run's or the model's own value."""

    max_new_tokens: int | None = None
    temperature: float | None = None  # None or 0: greedy
    top_p: float | None = None
    seed: int | None = None
    device: str = "cpu"


@dataclass
class Source:
    """Where a model's weights and its prompt layout come from (nothing loaded yet)."""

    label: str  # as the user named it
    model_dir: Path  # a Hugging Face model folder (the base, for an adapter)
    adapter_dir: Path | None = None
    checkpoint: Path | None = None  # an unfinished run's weights, read onto model_dir
    run_config: dict[str, Any] = field(default_factory=dict)  # the run's resolved config
    base_model: Path | None = None  # what the model records as its base

    def line(self) -> str:
        parts = [str(self.model_dir)]
        if self.adapter_dir is not None:
            parts.append(f"+ adapter {self.adapter_dir}")
        if self.checkpoint is not None:
            parts.append(f"+ checkpoint {self.checkpoint}")
        return " ".join(parts)


# ------------------------------------------------------------------ which model


def locate(name: str, models_dir: str | Path = "models") -> Source:
    """The model `name` means (module doc); one line with the fix when it means none."""
    from trainforge.models import hf

    path = hf.resolve_model_dir(name, models_dir)
    if not path.exists():
        hub = _hub_source(name, models_dir)
        if hub is not None:
            return hub
        raise UserError(f"{name}: no such model folder or run folder", HOW)
    if (path / "adapter_config.json").is_file():
        return _adapter_source(name, path, {})
    if (path / "config.json").is_file():
        config = _config_of(_writer_of(path))
        return Source(name, path, run_config=config, base_model=_recorded_base(path))
    if not path.is_dir() or not RunFolder(path).resolved_config.is_file():
        raise UserError(f"{name}: not a model folder, adapter folder or run folder", HOW)
    return _run_source(name, path)


def _run_source(name: str, run: Path) -> Source:
    from trainforge.models import hf
    from trainforge.registry import TASKS

    config = _config_of(run)
    kind = (config.get("task") or {}).get("kind")
    # The kinds that fine-tune a Hugging Face base model are the ones that generate text.
    if kind not in TASKS or not TASKS.get(kind).base_model:
        raise UserError(f"{name}: a {kind} run; generate answers with language-model runs", HOW)
    model, adapter = hf.init_from_folders(str(run), lora=False)
    if model is not None:
        return Source(name, model, run_config=config, base_model=_recorded_base(model))
    if adapter is not None:
        return _adapter_source(name, adapter, config)
    from trainforge.run.weights import run_weights

    found = run_weights(run)  # an unfinished run: its best, else newest checkpoint
    assert found is not None  # a run folder always means some weights, or refuses
    base = _base_of_config(config, run)
    return Source(name, base, checkpoint=found.file, run_config=config, base_model=base)


def _adapter_source(name: str, adapter: Path, config: dict[str, Any]) -> Source:
    recorded = _recorded_base(adapter)
    if recorded is None:
        raise UserError(f"{name}: the adapter {adapter} names no base model", HOW)
    run_config = config or _config_of(_writer_of(adapter))
    return Source(name, recorded, adapter, run_config=run_config, base_model=recorded)


def _recorded_base(folder: Path) -> Path | None:
    """The base model a folder records: trainforge.json's `base_model_path`, else peft's
    `base_model_name_or_path`; None when neither names an existing folder."""
    for file, key in (("trainforge.json", "base_model_path"),
                      ("adapter_config.json", "base_model_name_or_path")):  # fmt: skip
        found = _existing((_read_json(folder / file) or {}).get(key), _writer_of(folder))
        if found is not None:
            return found
    return None


def _existing(value: Any, run: Path | None) -> Path | None:
    """The model folder `value` names, as given or where `run` started (its relative paths
    mean that folder, `run.resume.enter_start_dir`); None when neither holds a model."""
    if not value:
        return None
    started = (_read_json(RunFolder(run).run_json) or {}).get("cwd") if run else None
    for candidate in (Path(str(value)), Path(str(started or ".")) / str(value)):
        if (candidate / "config.json").is_file():
            return candidate
    return None


def _base_of_config(config: dict[str, Any], run: Path) -> Path:
    value = (config.get("model") or {}).get("model_name_or_path")
    found = _existing(value, run)
    hub = _hub_source(str(value), "models") if value and found is None else None
    if found is not None or hub is not None:
        return found if found is not None else hub.model_dir
    raise UserError(
        f"{run}: its base model {value} is not here",
        "run generate where the run started, or pass its model folder",
    )


def _hub_source(name: str, models_dir: str | Path) -> Source | None:
    """A Hub id (`org/name[@rev]`) through huggingface_hub's cache (`models.hub`, as a base
    model is resolved: downloaded when online); None when `name` is no id."""
    from trainforge.models import hub

    if not hub.is_hub_id(name, models_dir):
        return None
    return Source(name, hub.resolve_hub_model(name).path)


def _writer_of(folder: Path) -> Path | None:
    run = (_read_json(folder / "trainforge.json") or {}).get("run_dir")
    return Path(run) if run else None


def _config_of(run: Path | None) -> dict[str, Any]:
    """A run's resolved config as plain data (read for its prompt layout, not validated)."""
    if run is None:
        return {}
    try:
        data = yaml.safe_load(RunFolder(run).resolved_config.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
