"""A run's recipe as data: the config dump every output holds (secrets masked), its hash,
the line naming where the recipe's numbers came from, and the changes a resumed run brings
to the config its checkpoint was trained with.

The hash and the dump are plain JSON and SHA-256: a config-hashing library (e.g. `deepdiff`'s
`DeepHash`) would add a dependency for one `json.dumps(sort_keys=True)`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml

from trainforge.config import ResolvedConfig, RunConfig


def config_dump(config: RunConfig) -> dict[str, Any]:
    """The config as plain data with every secret value from the environment masked: what
    config.resolved.yaml, checkpoints and the report hold."""
    from trainforge.observe.secrets import scrub_mapping

    return scrub_mapping(config.model_dump(mode="json"))


def config_yaml(config: RunConfig) -> str:
    return yaml.safe_dump(config_dump(config), sort_keys=False)


def config_hash(config: RunConfig) -> str:
    # The output section names where a run goes, not what it trains: not part of the hash.
    data = config.model_dump(mode="json", exclude={"output"})
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def config_changes(saved_yaml: str, config: RunConfig) -> list[str]:
    """`key: old -> new` for every leaf that differs from the checkpoint's config."""
    try:
        saved = yaml.safe_load(saved_yaml) or {}
    except yaml.YAMLError:
        return ["(the checkpoint's config.yaml is unreadable)"]
    current = config_dump(config)  # compared as saved: masked the same way
    changes: list[str] = []

    def walk(old: Any, new: Any, prefix: str) -> None:
        if isinstance(old, dict) and isinstance(new, dict):
            for key in sorted(set(old) | set(new)):
                walk(old.get(key), new.get(key), f"{prefix}{key}.")
        elif old != new:
            changes.append(f"{prefix.rstrip('.')}: {old!r} -> {new!r}")

    walk(saved, current, "")
    return [c for c in changes if not c.startswith("output.")]


def recipe_line(resolved: ResolvedConfig) -> str:
    """The recipe's numbers and where each came from (the run config, a flag, a default)."""

    def origin(path: str) -> str:
        source = resolved.sources.get(path, "default")
        while source.startswith(("plan (", "batch fit (")):
            source = source.split(" (", 1)[1][:-1]
        return source

    c = resolved.config
    batch_from = origin("training.global_batch_size")
    if batch_from == "default":
        batch_from = origin("training.per_device_train_batch_size")
    return (
        f"recipe: effective batch {c.training.global_batch_size} ({batch_from})   "
        f"learning rate {c.optimizer.learning_rate:g} ({origin('optimizer.learning_rate')})   "
        f"precision {c.training.precision} ({origin('training.precision')})"
    )
