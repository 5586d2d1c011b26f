"""Run configuration: schema, loading with layering and sources, validation messages.

`load()` resolves profile < file < flags into a frozen `RunConfig`; `validate()` adds the
cross-field rules and raises a `ConfigError` listing every problem.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainforge.config.checks import check, image_shape
from trainforge.config.errors import ConfigError
from trainforge.config.loading import GUIDE_FLAGS, ResolvedConfig, get_dotted, leaf_paths, load
from trainforge.config.schema import RunConfig

if TYPE_CHECKING:
    from trainforge.hardware import Platform

__all__ = [
    "GUIDE_FLAGS",
    "ConfigError",
    "ResolvedConfig",
    "RunConfig",
    "get_dotted",
    "image_shape",
    "leaf_paths",
    "load",
    "validate",
]


def validate(
    path: Path | None,
    *,
    platform: Platform | None = None,
    **load_args: Any,
) -> ResolvedConfig:
    """Load and check a config; raise ConfigError with every problem found."""
    if platform is None:
        from trainforge.hardware import detect

        platform = detect()
    if "pick_auto_profile" not in load_args:
        from trainforge.hardware import pick_profile

        load_args["pick_auto_profile"] = lambda: pick_profile(platform)
    resolved = load(path, **load_args)
    problems = check(resolved.config, platform)
    if problems:
        label = str(path) if path else "<defaults>"
        raise ConfigError([f"{label}: {p}" for p in problems])
    return resolved
