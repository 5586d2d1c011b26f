"""Run-config templates for a profile: the training-pipeline assets README's workflow (copy the
HPC or embedded template, customise it, validate it, launch it).

`render_template(profile)` writes every run-config field with its schema description as a
comment, so the file documents itself. Fields the profile sets (precision, micro-batch,
workers, ...) are written commented out with the profile's value: the profile stays in
charge of *how* to train until a line is uncommented. Fields that the trackers' environment
variables set (WANDB_PROJECT, MLFLOW_EXPERIMENT_NAME, ...) are commented out too, so those
variables still apply. The result validates as written.

It lives in `config` (not `profiles`) because it reads the run-config schema and the
environment's fields: profiles are data below config.

ruamel.yaml was considered for writing comments; the file is a flat two-level mapping, so a
few lines of text with PyYAML-dumped values are simpler and keep the dependency list short.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any, get_args, get_origin

import yaml

from trainforge.profiles import Profile, load_profile

# The run config's sections in the order a reader meets them (hardware is the profile's).
SECTIONS = (
    "task", "model", "data", "optimizer", "schedule", "training", "evaluation", "checkpoint",
    "logging", "output", "lora",
)  # fmt: skip
WIDTH = 96


def render_value(value: Any) -> str:
    """A YAML scalar or flow list for one value."""
    if isinstance(value, str):
        return json.dumps(value)  # a double-quoted YAML string, escapes included
    return (
        yaml.safe_dump(value, default_flow_style=True, width=1000)
        .strip()
        .removesuffix("...")
        .strip()
    )


def _comment(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, WIDTH - len(indent) - 2, initial_indent=f"{indent}# ",
                         subsequent_indent=f"{indent}# ", break_on_hyphens=False)  # fmt: skip


def _choices(annotation: Any) -> str:
    from typing import Literal

    args = [a for a in get_args(annotation) if a is not type(None)]
    literals = [a for a in args if get_origin(a) is Literal] or (
        [annotation] if get_origin(annotation) is Literal else []
    )
    values = [v for lit in literals for v in get_args(lit)]
    return f" One of: {', '.join(map(str, values))}." if len(values) > 1 else ""


def _field_lines(section: str, name: str, info: Any, profile: Profile) -> list[str]:
    from trainforge.config.environment import ENV_FIELDS

    env = {path: var for var, (path, _) in ENV_FIELDS.items()}
    text = (info.description or "").strip() + _choices(info.annotation)
    lines = _comment(text, "  ") if text else []
    profile_value = (profile.settings.get(section) or {}).get(name, _MISSING)
    if profile_value is not _MISSING:
        lines.append(f"  # {name}: {render_value(profile_value)}   # set by profile {profile.name}")
    elif f"{section}.{name}" in env:
        var = env[f"{section}.{name}"]
        default = render_value(info.get_default(call_default_factory=True))
        lines.append(f"  # {name}: {default}   # or the environment: {var}")
    else:
        lines.append(f"  {name}: {render_value(info.get_default(call_default_factory=True))}")
    return lines


_MISSING = object()


def render_template(profile_name: str) -> str:
    """The commented run-config template for a profile (a name or a profile file)."""
    from trainforge.config.schema import RunConfig

    profile = load_profile(profile_name)
    top = RunConfig.model_fields
    lines = [
        f"# Run config for the {profile.name} profile: {profile.description}",
        "# Written by `trainforge profiles template`. Customise the recipe below, check it with",
        "# `trainforge validate FILE`, then run `trainforge train FILE` (on a Slurm cluster:",
        "# `sbatch scripts/train_hpc.sh FILE`). Lines marked `set by profile` show the profile's",
        "# value; uncomment one to override it for this run. The profile's own file:",
        f"# `trainforge profiles show {profile.name}`.",
        "",
        *_comment(top["profile"].description or "", ""),
        f"profile: {render_value(profile.name)}",
        *_comment(top["name"].description or "", ""),
        "name: null",
        *_comment(top["notes"].description or "", ""),
        "notes: null",
    ]
    for section in SECTIONS:
        model = top[section].annotation
        lines += ["", f"{section}:"]
        for name, info in model.model_fields.items():
            lines += _field_lines(section, name, info, profile)
    hardware = profile.settings.get("hardware") or {}
    if hardware:
        lines += ["", f"# hardware: set by profile {profile.name}"]
        lines += [f"#   {k}: {render_value(v)}" for k, v in hardware.items()]
    return "\n".join(lines) + "\n"
