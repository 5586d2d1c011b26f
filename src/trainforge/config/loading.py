"""Loading and layering: built-in profile < environment < run config file < CLI flags.

The result is a frozen RunConfig in which every leaf value remembers where it came from
("default", "profile cpu", "env WANDB_PROJECT", "file config/x.yaml", "flag --batch_size"),
which `trainforge config show` prints. The recipe layers (the file's data and the flags)
are kept beside it, so the run folder can record them and a resume can rebuild the same
run without the original file or command line. `trainforge.config.plan` then resolves the
recipe for a target. Nothing here imports torch: `trainforge validate` answers at once.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trainforge import recipes, yamltext
from trainforge.config.environment import environment_layer
from trainforge.config.errors import ConfigError, format_validation_error, suggest_path
from trainforge.config.flags import flag_fields
from trainforge.config.guide_profile import from_guide_profile, guide_names
from trainforge.config.schema import (
    FLAT_SPELLINGS_UNTIL,
    OWNED_OPTIONS,
    RunConfig,
    flat_alias_paths,
    leaf_paths,
    owned_path,
    value_paths,
)
from trainforge.errors import UserError
from trainforge.profiles import Profile, load_profile

# The ViT guide's command-line flags (and the rest of the schema's) live in config/flags.py.
GUIDE_FLAGS: dict[str, str] = {
    name: path
    for name, path in flag_fields().items()
    if name
    in (
        "batch_size",
        "learning_rate",
        "max_epochs",
        "max_training_hours",
        "embedding_dim",
        "num_layers",
        "num_heads",
        "mlp_size",
    )
}


@dataclass(frozen=True)
class ResolvedConfig:
    config: RunConfig
    sources: dict[str, str]
    profile: Profile
    profile_reason: str
    path: Path | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    # The recipe as given: {"file": the file's data, "flags": the command line's layer,
    # "flag_sources": dotted path -> "flag --name"}; what run.json records.
    layers: dict[str, Any] = field(default_factory=dict)
    profile_requested: str | None = None  # --profile as given (None: the file's or auto)
    file_names: dict[str, str] = field(default_factory=dict)  # field -> the file's own key
    notes: tuple[str, ...] = ()  # lines the run prints about how it was resolved
    rules: tuple[str, ...] = ()  # which rule decided the micro-batch and the rate (config show)
    recipe: str | None = None  # the packaged recipe named by its name (`train vit_digits`)


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
        data = json.loads(text) if path.suffix == ".json" else yamltext.load(text)
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
    return parse_key_value(item, "--set", "training.seed=1")


def parse_key_value(item: str, flag: str, example: str) -> tuple[str, Any]:
    """`KEY=VALUE` given to `flag` -> (key, value), the value read as YAML (text that is no
    YAML stays text); a missing key or `=` is one line showing `example`."""
    key, sep, value = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UserError(f"{flag} {item!r} is not KEY=VALUE", f"write e.g. {flag} {example}")
    return key, yamltext.value(value, f"{flag} {key}")


def load(
    path: Path | None,
    *,
    profile: str | None = None,
    overrides: Sequence[str] = (),
    flags: Mapping[str, Any] | None = None,
    flag_sources: Mapping[str, str] | None = None,
    pick_auto_profile: Callable[[], tuple[str, str]] | None = None,
    recorded: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> ResolvedConfig:
    """Resolve a run config.

    `flags` maps a flag name (`batch_size`, `max_steps`: see `trainforge.config.flags`) or a
    dotted field to its value; `flag_sources` names the flag as typed for a dotted field
    (`flag --max_steps`). `recorded` is a run folder's recorded recipe (`layers` of an
    earlier resolution): its file data stands in for the file and its flags come first,
    under the ones given now.
    """
    names: dict[str, str] = {}  # field -> the guide key the file set it with
    recipe = None  # the packaged recipe, when `path` named one by its name
    if recorded is not None and "file" in recorded:
        file_data = copy.deepcopy(recorded.get("file") or {})
    elif path is not None:
        path, recipe = recipes.locate(path)
        raw = read_config_file(path)
        names = guide_names(raw)
        file_data = recipes.anchor(from_guide_profile(raw, str(path)), path)
    else:
        file_data = {}
    label = str(path) if path else "<defaults>"
    cli_layer: dict[str, Any] = copy.deepcopy(dict((recorded or {}).get("flags") or {}))
    cli_sources: dict[str, str] = dict((recorded or {}).get("flag_sources") or {})
    fields = flag_fields()
    for name, value in (flags or {}).items():
        if name == "extensions" and value:  # --extension adds to the file's list
            from trainforge.extensions import listed

            given = [*listed(file_data.get("extensions")), *listed(cli_layer.get("extensions"))]
            cli_layer["extensions"] = list(dict.fromkeys([*given, *value]))
            cli_sources["extensions"] = "flag --extension"
        elif value is not None:
            key = name if "." in name else fields[name]
            _set_dotted(cli_layer, key, value)
            typed = (flag_sources or {}).get(key)
            cli_sources[key] = typed or (f"flag --{name}" if "." not in name else f"flag --{key}")
    for item in overrides:
        key, value = parse_set_flag(item)
        _check_known_path(key, "--set")
        _set_dotted(cli_layer, key, value)
        cli_sources[key] = f"flag --set {key}"
    resolved = _resolve(
        path, label, file_data, cli_layer, cli_sources, profile, pick_auto_profile, env, names,
        (recorded or {}).get("environment") or {},
    )  # fmt: skip
    return dataclasses.replace(resolved, recipe=recipe and recipe.name)


def _resolve(
    path: Path | None,
    label: str,
    file_data: dict[str, Any],
    cli_layer: dict[str, Any],
    cli_sources: dict[str, str],
    profile: str | None,
    pick_auto_profile: Callable[[], tuple[str, str]] | None,
    env: Mapping[str, str] | None,
    names: Mapping[str, str],
    recorded_env: Mapping[str, Any],
) -> ResolvedConfig:
    prof, reason = _pick_profile(label, profile, cli_layer, file_data, pick_auto_profile)
    env_data, env_sources_given, env_sources = _environment_layer(env, recorded_env)
    layers: list[tuple[str, dict[str, Any]]] = [
        (f"profile {prof.name}", copy.deepcopy(prof.settings)),
        ("environment", env_data),
        (f"file {label}", file_data),
        ("flags", cli_layer),
    ]
    merged, sources = _merged(layers, env_sources, cli_sources)
    merged["profile"] = prof.name
    if profile is not None:  # named now (--profile, or the run folder's record)
        sources["profile"] = "flag --profile"

    notice = flat_spelling_notice(sources)

    def resolved(config: RunConfig) -> ResolvedConfig:
        return ResolvedConfig(
            notes=(notice,) if notice else (),
            config=config,
            sources=_complete_sources(config, sources),
            profile=prof,
            profile_reason=reason,
            path=path,
            raw=merged,
            layers={
                "file": file_data,
                "flags": cli_layer,
                "flag_sources": cli_sources,
                "environment": {"values": env_data, "sources": env_sources_given},
            },
            profile_requested=profile,
            file_names=dict(names),
        )

    from trainforge.extensions import listed, load_extensions

    load_extensions(listed(merged.get("extensions")))  # before names are checked
    try:
        config = RunConfig.model_validate(merged)
    except ValidationError as err:
        lines = format_validation_error(err, label, merged, sources, names)
        salvaged = _salvage(merged, err)  # cross-field rules are judged on it in one pass
        raise ConfigError(lines, salvaged=salvaged and resolved(salvaged)) from None
    return resolved(config)


def _merged(
    layers: list[tuple[str, dict[str, Any]]],
    env_sources: Mapping[str, str],
    cli_sources: Mapping[str, str],
) -> tuple[dict[str, Any], dict[str, str]]:
    """The layers merged in order, and each leaf's source: an environment variable and a
    flag name themselves rather than their layer."""
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
    return merged, sources


def _environment_layer(
    env: Mapping[str, str] | None, recorded_env: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """The environment layer: (values, their sources as recorded, their sources as shown).

    A resume keeps the tracker variables the run started with (its W&B project, MLflow
    experiment): a shell without them must not move the run; one that sets them again wins."""
    now_data, now_sources = _environment(env)
    env_data = copy.deepcopy(dict(recorded_env.get("values") or {}))
    given = {**(recorded_env.get("sources") or {}), **now_sources}
    _merge(env_data, now_data, "environment", {}, "")
    shown = {
        key: source if key in now_sources else f"{source} (at the run's start)"
        for key, source in given.items()
    }
    return env_data, given, shown


def _pick_profile(
    label: str,
    profile: str | None,
    cli_layer: dict[str, Any],
    file_data: dict[str, Any],
    pick_auto_profile: Callable[[], tuple[str, str]] | None,
) -> tuple[Profile, str]:
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
        return load_profile(profile_name), reason
    except UserError as err:
        raise UserError(f"{label}: profile = {profile_name!r}: {err.message}", err.fix) from None


def _environment(env: Mapping[str, str] | None) -> tuple[dict[str, Any], dict[str, str]]:
    """The environment's layer: the trackers' own variables (WANDB_PROJECT, ...)."""
    return environment_layer(os.environ if env is None else env)


def _salvage(merged: dict[str, Any], err: ValidationError) -> RunConfig | None:
    """The config with every value the error names removed (so its default applies)."""
    data = copy.deepcopy(merged)
    for item in err.errors():
        loc = [p for p in item["loc"] if isinstance(p, str) and not p.startswith("function-")]
        node: Any = data
        for part in loc[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and loc:
            node.pop(loc[-1], None)
    try:
        return RunConfig.model_validate(data)
    except ValidationError:
        return None


def _detect_profile() -> tuple[str, str]:
    from trainforge.hardware import detect, pick_profile

    return pick_profile(detect())


def _check_known_path(key: str, origin: str) -> None:
    fields = leaf_paths(RunConfig) + flat_alias_paths()
    sections = {k.split(".")[0] for k in fields}
    owned = any(key.startswith(where + ".") for where in OWNED_OPTIONS)  # the entry checks it
    if key in fields or key in sections or owned:
        return
    hint = suggest_path(key, sorted(fields))
    raise UserError(
        f"{origin} {key}: unknown config field",
        f"did you mean {hint}?" if hint else "see `trainforge config show` for the fields",
    )


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
    _drop_options_of_another_entry(dst, src, prefix, sources)
    for key, value in src.items():
        path = f"{prefix}{key}"
        _replace_other_spelling(dst, key, value, path, sources)
        if isinstance(value, Mapping) and isinstance(dst.get(key), dict):
            _merge(dst[key], value, source, sources, path + ".")
        elif isinstance(value, Mapping):
            dst[key] = {}
            _merge(dst[key], value, source, sources, path + ".")
        else:
            dst[key] = copy.deepcopy(value)
            sources[path] = source


# Options mapping -> the key of its section that picks the entry owning them.
ENTRY_KEYS = {"data.options": "dataset", "optimizer.args": "name"}


def _drop_options_of_another_entry(
    dst: dict[str, Any], src: Mapping[str, Any], prefix: str, sources: dict[str, str]
) -> None:
    """A layer that picks another entry (`--set data.dataset=image-folder` over a file's
    digits) leaves out the options an earlier layer gave the entry it replaces: they were
    that entry's (`val_fraction` of digits), not the new one's."""
    for where, key in ENTRY_KEYS.items():
        section, _, mapping = where.partition(".")
        if prefix != f"{section}." or key not in src or dst.get(key, src[key]) == src[key]:
            continue
        dst.pop(mapping, None)
        for path in [p for p in sources if p.startswith(f"{where}.")]:
            del sources[path]


def _replace_other_spelling(
    dst: dict[str, Any], key: str, value: Any, path: str, sources: dict[str, str]
) -> None:
    """A later layer's spelling of an entry's option replaces an earlier layer's other
    spelling of it: the file's `data.options.train_file` gives way to `--train_file` (the
    flat `data.train_file`), a file's flat `data.download` to `--set
    data.options.download=false`. Without this the schema's fold would keep the mapping's
    value whichever layer gave it."""
    if path in OWNED_OPTIONS and isinstance(value, Mapping):
        section = path.rpartition(".")[0]
        for alias in OWNED_OPTIONS[path]:
            if alias in value and alias in dst:
                del dst[alias]
                sources.pop(f"{section}.{alias}", None)
        return
    owned = owned_path(path)
    if owned != path:
        mapping = dst.get(owned.rpartition(".")[0].rpartition(".")[2])  # options / args
        if isinstance(mapping, dict) and key in mapping:
            del mapping[key]
            sources.pop(owned, None)


def flat_spelling_notice(sources: Mapping[str, str]) -> str | None:
    """One line naming the old flat spellings a config file, the environment or `--set`
    used, with their current spelling; None when there are none. A flag (`--train_file`,
    `--val_fraction`) is no spelling of the file's: it says nothing."""
    old = sorted(
        path
        for path, source in sources.items()
        if owned_path(path) != path
        and not (source.startswith("flag --") and not source.startswith("flag --set "))
    )
    if not old:
        return None
    under = " and ".join(sorted({owned_path(path).rpartition(".")[0] for path in old}))
    spelling, it = ("spelling", "it") if len(old) == 1 else ("spellings", "them")
    return (
        f"old flat {spelling} {', '.join(old)}: write {it} under {under} (flat spellings load "
        f"until trainforge {FLAT_SPELLINGS_UNTIL}, which refuses them)"
    )


def _complete_sources(config: RunConfig, sources: dict[str, str]) -> dict[str, str]:
    """Every value's source; an entry's option set by its old flat spelling
    (`data.download` for `data.options.download`) has that spelling's source."""

    def source(path: str) -> str:
        where, _, option = path.rpartition(".")
        if where in OWNED_OPTIONS and path not in sources:
            flat = f"{where.rpartition('.')[0]}.{option}"
            return sources.get(flat, sources.get(where, "default"))
        return sources.get(path, "default")

    return {path: source(path) for path in value_paths(config)}


def get_dotted(config: RunConfig, path: str) -> Any:
    """The value at `path`; an old flat spelling (`data.download`) reads the entry's option
    (None where the entry has no such option)."""
    node: Any = config
    owned = owned_path(path)
    for part in owned.split("."):
        if isinstance(node, dict):
            node = node[part]
        elif owned != path and part == owned.rpartition(".")[2]:
            return getattr(node, part, None)
        else:
            node = getattr(node, part)
    return node
