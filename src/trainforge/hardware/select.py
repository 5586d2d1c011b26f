"""Choices made from a detected `Platform`.

Owns the entry point for which profile `profile: auto` picks (the rules live in each profile's
`detect:` block) and which device `training.device` resolves to.
"""

from __future__ import annotations

from trainforge.errors import UserError
from trainforge.hardware.detect import profile_for
from trainforge.hardware.platform import Platform

DEVICE_CHOICES = ("auto", "cuda", "mps", "cpu")


def pick_profile(platform: Platform) -> tuple[str, str]:
    """The profile `profile: auto` resolves to, and a one-line reason: the first matching
    `detect:` rule of the registered profiles (`hardware.detect.profile_for`)."""
    return profile_for(platform)


def resolve_device(requested: str, platform: Platform) -> str:
    """What `training.device` means here: "auto" -> the platform's device; checks the rest.

    Raises `UserError` when the requested device does not exist on this machine.
    """
    choice = requested.strip().lower()
    if choice not in DEVICE_CHOICES:
        raise UserError(
            f"training.device={requested!r} is not one of {', '.join(DEVICE_CHOICES)}",
            fix="set training.device to auto, cuda, mps or cpu",
        )
    if choice == "auto":
        return platform.device
    if choice not in ("cpu", platform.device):
        raise UserError(
            f"training.device={choice} but this machine has no {choice.upper()} device "
            f"(found: {_found(platform)})",
            fix="set training.device=cpu or auto",
        )
    return choice


def _found(platform: Platform) -> str:
    if platform.kind == "cpu":
        return f"CPU only, {platform.arch}, {platform.os_name}"
    if platform.kind == "mps":
        return "Apple MPS"
    return f"{platform.kind} with {len(platform.gpus)} GPU(s)"
