"""Loading and layering: built-in profile < run config file < CLI flags => a frozen RunConfig.

Every resolved leaf value remembers where it came from ("default", "profile cpu",
"file config/x.yaml", "flag --batch_size"), which `trainforge config show` prints.
Nothing here imports torch: `trainforge validate` must answer in well under a second.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trainforge.config.environment import environment_layer
from trainforge.config.errors import ConfigError, format_validation_error, suggest_path
from trainforge.config.guide_profile import from_guide_profile
from trainforge.config.schema import RunConfig
from trainforge.errors import UserError
from trainforge.profiles import Profile, load_profile

# The ViT guide's command-line flags and the config field each one sets.
GUIDE_FLAGS: dict[str, str] = {
    "batch_size": "training.per_device_train_batch_size",
    "learning_rate": "optimizer.learning_rate",
    "max_epochs": "training.num_train_epochs",
    "max_training_hours": "training.max_training_hours",
    "embedding_dim": "model.embedding_dim",
    "num_layers": "model.num_layers",
    "num_heads": "model.num_heads",
    "mlp_size": "model.mlp_size",
}


@dataclass(frozen=True)
class ResolvedConfig:
    config: RunConfig
    sources: dict[str, str]
    profile: Profile
    profile_reason: str
    path: Path | None = None
    raw: dict[str, Any] = field(default_factory=dict)


def read_config_file(path: Path) -> dict[str, Any]:
    """Read a YAML or JSON run config into a dict, or raise one clear UserError."""
    if not path.exists():
        raise UserError(f"config file {path} not found", "check the path")
    if path.is_dir():
        raise UserError(f"config path {path} is a folder", "pass a .yaml or .json file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read config file {path}: {err}", "check the file") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as err:
        raise UserError(
            f"{path}: invalid JSON at line {err.lineno} column {err.colno}: {err.msg}",
            "fix the syntax",
        ) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "syntax error"
        raise UserError(f"{path}: invalid YAML{where}: {problem}", "fix the syntax") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(
            f"{path}: a run config must be a mapping of sections, got {type(data).__name__}",
            "start the file with keys such as `model:` and `training:`",
        )
    return data


def parse_set_flag(item: str) -> tuple[str, Any]:
    """`a.b=value` -> ("a.b", value); value parsed as YAML so 3, 1e-4, true, [1,2] work."""
    key, sep, value = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UserError(f"--set {item!r} is not KEY=VALUE", "write e.g. --set training.seed=1")
    try:
        parsed = yaml.safe_load(value) if value.strip() else None
    except yaml.YAMLError:
        parsed = value
    return key, parsed


def load(
    path: Path | None,
    *,
    profile: str | None = None,
    overrides: Sequence[str] = (),
    flags: Mapping[str, Any] | None = None,
    pick_auto_profile: Callable[[], tuple[str, str]] | None = None,
) -> ResolvedConfig:
    """Resolve a run config. `flags` are guide flags (GUIDE_FLAGS keys) given on the CLI."""
    label = str(path) if path else "<defaults>"
    file_data = from_guide_profile(read_config_file(path), label) if path else {}
    cli_layer: dict[str, Any] = {}
    cli_sources: dict[str, str] = {}
    for name, value in (flags or {}).items():
        if value is not None:
            _set_dotted(cli_layer, GUIDE_FLAGS[name], value)
            cli_sources[GUIDE_FLAGS[name]] = f"flag --{name}"
    for item in overrides:
        key, value = parse_set_flag(item)
        _check_known_path(key, "--set")
        _set_dotted(cli_layer, key, value)
        cli_sources[key] = f"flag --set {key}"

    profile_name = profile or cli_layer.get("profile") or file_data.get("profile") or "auto"
    if not isinstance(profile_name, str):
        raise UserError(f"{label}: profile = {profile_name!r} must be a name", "e.g. profile: auto")
    reason = "named in the run config" if profile is None else "named by --profile"
    if profile_name == "auto":
        if pick_auto_profile is None:
            pick_auto_profile = _detect_profile
        profile_name, reason = pick_auto_profile()
        reason = f"auto: {reason}"
    try:
        prof = load_profile(profile_name)
    except UserError as err:
        raise UserError(f"{label}: profile = {profile_name!r}: {err.message}", err.fix) from None

    # The trackers' own variables (WANDB_PROJECT, ...) sit over the profile and under the
    # file and the flags: an explicit setting wins, as in the trackers' documentation.
    env_data, env_sources = environment_layer(os.environ)
    layers: list[tuple[str, dict[str, Any]]] = [
        (f"profile {prof.name}", copy.deepcopy(prof.settings)),
        ("environment", env_data),
        (f"file {label}", file_data),
        ("flags", cli_layer),
    ]
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for source, layer in layers:
        _merge(merged, layer, source, sources, "")
    for key, source in env_sources.items():
        if sources.get(key) == "environment":
            sources[key] = source
    for key, source in cli_sources.items():
        for leaf in [k for k in sources if k == key or k.startswith(key + ".")]:
            sources[leaf] = source
    merged["profile"] = prof.name

    try:
        config = RunConfig.model_validate(merged)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, label, merged)) from None
    return ResolvedConfig(
        config=config,
        sources=_complete_sources(config, sources),
        profile=prof,
        profile_reason=reason,
        path=path,
        raw=merged,
    )


def _detect_profile() -> tuple[str, str]:
    from trainforge.hardware import detect, pick_profile

    return pick_profile(detect())


def _check_known_path(key: str, origin: str) -> None:
    fields = leaf_paths(RunConfig)
    sections = {k.split(".")[0] for k in fields}
    if key in fields or key in sections:
        return
    hint = suggest_path(key, sorted(fields))
    raise UserError(
        f"{origin} {key}: unknown config field",
        f"did you mean {hint}?" if hint else "see `trainforge config show` for the fields",
    )


def leaf_paths(model: type, prefix: str = "") -> list[str]:
    """Dotted paths of every leaf field of a pydantic model class."""
    out: list[str] = []
    for name, info in model.model_fields.items():  # type: ignore[attr-defined]
        ann = info.annotation
        if isinstance(ann, type) and hasattr(ann, "model_fields"):
            out.extend(leaf_paths(ann, f"{prefix}{name}."))
        else:
            out.append(f"{prefix}{name}")
    return out


def _set_dotted(target: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = target
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise UserError(f"cannot set {key}: {part} is not a section")
    node[parts[-1]] = value


def _merge(
    dst: dict[str, Any], src: Mapping[str, Any], source: str, sources: dict[str, str], prefix: str
) -> None:
    for key, value in src.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and isinstance(dst.get(key), dict):
            _merge(dst[key], value, source, sources, path + ".")
        elif isinstance(value, Mapping):
            dst[key] = {}
            _merge(dst[key], value, source, sources, path + ".")
        else:
            dst[key] = copy.deepcopy(value)
            sources[path] = source


def _complete_sources(config: RunConfig, sources: dict[str, str]) -> dict[str, str]:
    return {path: sources.get(path, "default") for path in leaf_paths(type(config))}


def get_dotted(config: RunConfig, path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        node = getattr(node, part)
    return node


def with_overrides(resolved: ResolvedConfig, values: Mapping[str, Any]) -> RunConfig:
    """A copy of the config with some dotted fields replaced (validated again)."""
    data = resolved.config.model_dump()
    for key, value in values.items():
        _set_dotted(data, key, value)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        label = str(resolved.path) if resolved.path else "<defaults>"
        raise ConfigError(format_validation_error(err, label, data)) from None
