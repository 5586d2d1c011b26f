"""What `trainforge config show` resolves for a config, a profile, a process count and flags,
on the recorded CPU machine: shared by the recipe and plan tests."""

from __future__ import annotations

from pathlib import Path

from trainforge.config import validate
from trainforge.hardware import detect, load_fixture

REPO = Path(__file__).resolve().parents[2]
CPU = detect(load_fixture(REPO / "tests" / "hardware" / "fixtures" / "cpu"))


def plan_for(path: Path | None, profile: str, world: int = 1, *flags: str):
    """What `config show PATH --profile PROFILE --world_size WORLD FLAGS` resolves."""
    from trainforge.config import flags as run_flags

    args = run_flags.parse([*flags]) if flags else None
    return validate(
        path,
        platform=CPU,
        profile=profile,
        for_profile=True,
        world_size=world,
        flags=dict(args.flags) if args else None,
        flag_sources=dict(args.sources) if args else None,
        overrides=list(args.overrides) if args else [],
    )
