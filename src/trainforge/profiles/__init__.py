"""Built-in hardware profiles: one YAML file per platform, shipped inside the package.

A profile says *how* to train on a platform (precision, the largest micro-batch, loader
workers, memory budget, telemetry, launcher); it never changes the run config's effective
batch or learning rate. Its `settings` use the run-config schema, but
only the "how" sections below; `trainforge.config.load` layers them under the run config.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from trainforge.errors import UserError

# Sections a profile may set: everything about *how*, nothing about *what* is trained.
HOW_SECTIONS = ("training", "data", "evaluation", "checkpoint", "logging", "hardware")
# Fields inside those sections that describe *what* is trained, which a profile must not set.
WHAT_FIELDS = {
    ("data", "dataset"),
    ("data", "root"),
    ("training", "num_train_epochs"),
    ("training", "max_steps"),
    ("training", "per_device_train_batch_size"),
    ("training", "gradient_accumulation_steps"),
    ("training", "global_batch_size"),
    ("evaluation", "metric_for_best_model"),
}


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    notes: str
    settings: dict[str, Any] = field(default_factory=dict)
    guide: str | None = None
    path: Path | None = None  # a profile file of the user's; None: a built-in one

    def source_text(self) -> str:
        if self.path is not None:
            return self.path.read_text(encoding="utf-8")
        return (resources.files(__package__) / f"{self.name}.yaml").read_text(encoding="utf-8")


def list_profiles() -> list[str]:
    return sorted(
        p.name.removesuffix(".yaml")
        for p in resources.files(__package__).iterdir()
        if p.name.endswith(".yaml")
    )


def is_profile_path(name: str) -> bool:
    """A profile given as a file (`--profile my_profile.yaml`) rather than a built-in name."""
    return name.endswith((".yaml", ".yml")) or "/" in name or os.sep in name


def load_profile(name: str) -> Profile:
    """A built-in profile by name, or a profile file (e.g. `trainforge profiles show cpu >
    mine.yaml`, edited) by its path; the file's path is then the profile's name."""
    if is_profile_path(name):
        return _load_profile_file(Path(name))
    names = list_profiles()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise UserError(
            f"unknown profile {name!r}",
            f"{hint}Known profiles: {', '.join(names)} (or auto); see `trainforge profiles`",
        )
    raw = yaml.safe_load((resources.files(__package__) / f"{name}.yaml").read_text("utf-8"))
    _check_shape(name, raw)
    return Profile(
        name=name,
        description=raw["description"],
        notes=raw.get("notes", ""),
        settings=raw.get("settings") or {},
        guide=raw.get("guide"),
    )


def _load_profile_file(path: Path) -> Profile:
    if not path.is_file():
        raise UserError(
            f"profile file {path} not found",
            "check the path, or name a built-in profile (see `trainforge profiles`)",
        )
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"profile file {path}: cannot read it ({first})", "fix the file") from None
    _check_shape(str(path), raw)
    return Profile(
        name=str(path),
        description=raw["description"],
        notes=raw.get("notes", ""),
        settings=raw.get("settings") or {},
        guide=raw.get("guide"),
        path=path,
    )


def _check_shape(name: str, raw: Any) -> None:
    # Shipped files are tested; this guards edits by hand with a clear line.
    if not isinstance(raw, dict) or "description" not in raw:
        raise UserError(
            f"profile {name}: file must be a mapping with a description",
            "start from `trainforge profiles show cpu` (a run config is not a profile)",
        )
    unknown = set(raw) - {"description", "notes", "settings", "guide"}
    if unknown:
        raise UserError(f"profile {name}: unknown top-level keys {sorted(unknown)}")
    for section, values in (raw.get("settings") or {}).items():
        if section not in HOW_SECTIONS:
            raise UserError(
                f"profile {name}: section {section!r} describes what to train, not how",
                f"profiles may set only {', '.join(HOW_SECTIONS)}",
            )
        for key in values or {}:
            if (section, key) in WHAT_FIELDS:
                raise UserError(
                    f"profile {name}: {section}.{key} belongs in the run config",
                    "a profile sets hardware.micro_batch_size; the run config sets the batch",
                )
