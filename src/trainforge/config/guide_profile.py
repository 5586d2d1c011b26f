"""The Jetson guide's training-profile JSON, read as a run config.

The guide (docs/jetson_training.md) describes `config/jetson_training.json` with flat keys:
`dataset`, `epochs`, `batch_size`, `learning_rate`, `device_preference`, `swap_directory`,
`notes` and a `training_arguments` mapping of Hugging Face `TrainingArguments` names. This
module turns that shape into the sectioned run config, one key to one field, before
validation; a file without any guide key passes through unchanged. Run-config sections
(`model`, `data`, `lora`, ...) may sit beside the guide keys and win over them.
Nothing here imports torch.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from trainforge.config.schema import RunConfig, flat_alias_paths, leaf_paths, owned_path
from trainforge.errors import UserError
from trainforge.registry import TASKS

# Flat guide key -> run config field.
GUIDE_KEYS: dict[str, str] = {
    "dataset": "data.options.train_file",
    "epochs": "training.num_train_epochs",
    "batch_size": "training.per_device_train_batch_size",
    "learning_rate": "optimizer.learning_rate",
    "device_preference": "training.device",
    "swap_directory": "hardware.swap_directory",
    "base_model": "model.model_name_or_path",
    "output_name": "output.model_name",
}


def guide_defaults() -> dict[str, Any]:
    """What a guide profile trains: the first registered task kind that fine-tunes a base
    model (the built-in causal LM on text records), with the settings that kind needs."""
    kind, entry = next((n, e) for n, e in TASKS.items() if e.base_model)
    return {"task.kind": kind, **dict(s.split("=", 1) for s in entry.settings)}


# TrainingArguments switches that map onto one field with a value.
PRECISION_SWITCHES = {"bf16": "bf16", "fp16": "fp16"}


def is_guide_profile(data: Mapping[str, Any]) -> bool:
    return "training_arguments" in data or any(key in data for key in GUIDE_KEYS)


def guide_names(data: Mapping[str, Any]) -> dict[str, str]:
    """Run config field -> the guide key a guide-shaped file set it with (for messages)."""
    if not is_guide_profile(data):
        return {}
    return {path: key for key, path in GUIDE_KEYS.items() if key in data}


def training_argument_fields() -> dict[str, str]:
    """TrainingArguments-style name -> dotted field, for every unambiguous leaf name."""

    by_name: dict[str, list[str]] = {}
    for path in leaf_paths(RunConfig) + flat_alias_paths():
        if "." in path:
            by_name.setdefault(path.rsplit(".", 1)[1], []).append(path)
    return {name: paths[0] for name, paths in by_name.items() if len(paths) == 1}


def from_guide_profile(data: dict[str, Any], label: str) -> dict[str, Any]:
    """The run-config dict for a guide-shaped file (unchanged if the file is not one)."""
    if not is_guide_profile(data):
        return data
    flat: dict[str, Any] = guide_defaults()
    sections: dict[str, Any] = {}
    top_level = set(RunConfig.model_fields)
    for key, value in data.items():
        if key in GUIDE_KEYS:
            flat[GUIDE_KEYS[key]] = value
        elif key == "training_arguments":
            flat.update(_training_arguments(value, label))
        elif key in top_level:
            sections[key] = value
        else:
            hint = difflib.get_close_matches(key, [*GUIDE_KEYS, *top_level], n=1)
            raise UserError(
                f"{label}: {key}: unknown key in a training profile",
                f"did you mean {hint[0]}?"
                if hint
                else f"use {', '.join(GUIDE_KEYS)}, training_arguments or a run config section",
            )
    out: dict[str, Any] = {}
    for path, value in flat.items():
        node = out
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    _deep_update(out, sections)
    return out


def _training_arguments(args: Any, label: str) -> dict[str, Any]:
    if not isinstance(args, Mapping):
        raise UserError(
            f"{label}: training_arguments must be a mapping, got {type(args).__name__}",
            'write e.g. "training_arguments": {"gradient_accumulation_steps": 4}',
        )
    fields = training_argument_fields()
    out: dict[str, Any] = {}
    for name, value in args.items():
        if name in PRECISION_SWITCHES:
            if value:
                out["training.precision"] = PRECISION_SWITCHES[name]
            continue
        if name not in fields:
            hint = difflib.get_close_matches(name, [*fields, *PRECISION_SWITCHES], n=1, cutoff=0.5)
            raise UserError(
                f"{label}: training_arguments.{name}: unknown training argument",
                f"did you mean {hint[0]}?"
                if hint
                else "see docs/configuration.md for the field names",
            )
        path = fields[name]
        # the text dataset's options (`max_seq_length`) in their current spelling
        out[owned_path(path) if path.startswith("data.") else path] = value
    return out


def _deep_update(dst: dict[str, Any], src: Mapping[str, Any]) -> None:
    for key, value in src.items():
        if isinstance(value, Mapping) and isinstance(dst.get(key), dict):
            _deep_update(dst[key], value)
        else:
            dst[key] = value
