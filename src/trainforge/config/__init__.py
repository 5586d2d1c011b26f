"""Run configuration: schema, loading with layering and sources, validation messages.

`load()` resolves profile < environment < file < flags into a frozen `RunConfig`;
`plan.finalize()` resolves that recipe for a target and a process count; `validate()` does
both and adds the cross-field rules, raising a `ConfigError` listing every problem.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainforge.config.checks import check, image_shape
from trainforge.config.errors import ConfigError, blame_problem
from trainforge.config.loading import GUIDE_FLAGS, ResolvedConfig, get_dotted, load
from trainforge.config.plan import Target, finalize, platform_target, profile_target
from trainforge.config.schema import RunConfig, leaf_paths

if TYPE_CHECKING:
    from trainforge.hardware import Platform

__all__ = [
    "GUIDE_FLAGS",
    "ConfigError",
    "ResolvedConfig",
    "RunConfig",
    "Target",
    "finalize",
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
    for_profile: bool = False,
    world_size: int = 1,
    **load_args: Any,
) -> ResolvedConfig:
    """Load, plan and check a config; raise ConfigError with every problem found, key
    errors and cross-field errors in one pass.

    Hardware rules judge the machine in hand (`platform`), or with `for_profile` the named
    profile's hardware, so a Jetson or cluster config checks fine on a laptop or login node.
    """
    if platform is None:
        from trainforge.hardware import detect

        platform = detect()
    if "pick_auto_profile" not in load_args:
        from trainforge.hardware import pick_profile

        load_args["pick_auto_profile"] = lambda: pick_profile(platform)
    label = str(path) if path else "<defaults>"
    try:
        resolved = load(path, **load_args)
    except ConfigError as err:
        extra = []
        if err.salvaged is not None:  # the rest, planned as the run would be: one pass
            try:
                salvaged = finalize(err.salvaged, platform_target(platform), world_size).config
            except (AssertionError, TypeError, ValueError):  # a plan needs what failed
                salvaged = err.salvaged.config
            extra = check(salvaged, None)
        raise ConfigError(err.lines + [f"{label}: {p}" for p in extra]) from None
    named = not resolved.profile_reason.startswith("auto")
    target = profile_target(resolved.profile) if for_profile and named else None
    target = target or platform_target(platform)
    resolved = finalize(resolved, target, world_size)
    problems = check(resolved.config, target)
    if problems:
        sources, names = resolved.sources, resolved.file_names
        raise ConfigError([blame_problem(p, label, sources, names) for p in problems])
    return resolved
