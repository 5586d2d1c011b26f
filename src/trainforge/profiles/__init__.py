"""Built-in hardware profiles: one YAML file per platform, shipped inside the package.

A profile says *how* to train on a platform (precision, the largest micro-batch, loader
workers, memory budget, telemetry, launcher); it never changes the run config's effective
batch or learning rate. Its `settings` use the run-config schema, but
only the "how" sections below; `trainforge.config.load` layers them under the run config.

Each shipped file is an entry of `trainforge.registry.PROFILES` (a `ProfileEntry`, read on
first use) and carries its own `detect:` rules: which detected platforms `profile: auto`
maps to it, and the one-line reason given (`DetectRule`; `hardware.detect.profile_for`
applies them). Adding a profile is one YAML file here, or, outside the package,
`PROFILES.register(name, ProfileEntry.from_file(path))`.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from trainforge import yamltext
from trainforge.errors import UserError
from trainforge.registry import PROFILES

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
class DetectRule:
    """One `detect:` rule of a profile: every condition given must hold for the platform.

    Rules of all profiles are tried by ascending `rank`; the first that holds picks its
    profile. `reason` is formatted with the platform's facts: {gpus} ("2x NVIDIA ..."),
    {smallest_gpu_gib}, {arch}, {memory_gib}, {slurm_job_id}, {jetson_model}, {release}
    ("JetPack 6.0 (L4T 36.3.0)").
    """

    rank: int
    reason: str
    platform: tuple[str, ...] = ()  # platform kinds (jetson, dgx-spark, cuda, mps, cpu)
    jetson_orin: bool | None = None  # a Jetson board of the Orin family (or not)
    gpu_name_any: tuple[str, ...] = ()  # a GPU's name contains one of these
    slurm: bool | None = None  # inside a Slurm allocation (or not)
    min_gpu_memory_gib: float | None = None  # the smallest GPU has at least this much


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    notes: str
    settings: dict[str, Any] = field(default_factory=dict)
    guide: str | None = None
    path: Path | None = None  # a profile file of the user's; None: a built-in one
    detect: tuple[DetectRule, ...] = ()

    def source_text(self) -> str:
        if self.path is not None:
            return self.path.read_text(encoding="utf-8")
        return (resources.files(__package__) / f"{self.name}.yaml").read_text(encoding="utf-8")


class ProfileEntry:
    """A registered profile: its YAML is read and checked on first use."""

    def __init__(self, name: str, read: Callable[[], Profile]) -> None:
        self.name = name
        self._read = read

    @classmethod
    def from_file(cls, path: Path) -> ProfileEntry:
        return cls(str(path), lambda: _load_profile_file(Path(path)))

    @cached_property
    def profile(self) -> Profile:
        return self._read()

    @property
    def description(self) -> str:
        return self.profile.description


def list_profiles() -> list[str]:
    return sorted(PROFILES.names())


def is_profile_path(name: str) -> bool:
    """A profile given as a file (`--profile my_profile.yaml`) rather than a built-in name."""
    return name.endswith((".yaml", ".yml")) or "/" in name or os.sep in name


def load_profile(name: str) -> Profile:
    """A registered profile by name, or a profile file (e.g. `trainforge profiles show cpu >
    mine.yaml`, edited) by its path; the file's path is then the profile's name."""
    if is_profile_path(name):
        return _load_profile_file(Path(name))
    entry = PROFILES.find(name)
    if entry is None:
        names = list_profiles()
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise UserError(
            f"unknown profile {name!r}",
            f"{hint}Known profiles: {', '.join(names)} (or auto); see `trainforge profiles`",
        )
    return entry.profile


def _load_builtin(name: str) -> Profile:
    raw = yaml.safe_load((resources.files(__package__) / f"{name}.yaml").read_text("utf-8"))
    _check_shape(name, raw)
    return Profile(
        name=name,
        description=raw["description"],
        notes=raw.get("notes", ""),
        settings=raw.get("settings") or {},
        guide=raw.get("guide"),
        detect=_rules(name, raw.get("detect")),
    )


def _load_profile_file(path: Path) -> Profile:
    if not path.is_file():
        raise UserError(
            f"profile file {path} not found",
            "check the path, or name a built-in profile (see `trainforge profiles`)",
        )
    try:
        raw = yamltext.load(path.read_text(encoding="utf-8"))
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
        detect=_rules(str(path), raw.get("detect")),
    )


def _check_shape(name: str, raw: Any) -> None:
    # Shipped files are tested; this guards edits by hand with a clear line.
    if not isinstance(raw, dict) or "description" not in raw:
        raise UserError(
            f"profile {name}: file must be a mapping with a description",
            "start from `trainforge profiles show cpu` (a run config is not a profile)",
        )
    unknown = set(raw) - {"description", "notes", "settings", "guide", "detect"}
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


RULE_KEYS = {f.name for f in fields(DetectRule)}


def _rules(name: str, raw: Any) -> tuple[DetectRule, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(rule, dict) for rule in raw):
        raise UserError(f"profile {name}: detect must be a list of rules", "see profiles/cpu.yaml")
    rules = []
    for rule in raw:
        unknown = set(rule) - RULE_KEYS
        if unknown or not {"rank", "reason"} <= set(rule):
            raise UserError(
                f"profile {name}: detect rule {rule} has unknown keys {sorted(unknown)} or "
                "lacks rank/reason",
                f"a rule has rank, reason and some of {', '.join(sorted(RULE_KEYS))}",
            )
        values = dict(rule)
        for key in ("platform", "gpu_name_any"):
            if isinstance(values.get(key), str):
                values[key] = (values[key],)
            values[key] = tuple(str(v) for v in values.get(key) or ())
        rules.append(DetectRule(**values))
    return tuple(rules)


for _file in sorted(resources.files(__package__).iterdir(), key=lambda f: f.name):
    if _file.name.endswith(".yaml"):
        _name = _file.name.removesuffix(".yaml")
        PROFILES.register(_name, ProfileEntry(_name, lambda n=_name: _load_builtin(n)))
