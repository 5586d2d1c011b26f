"""What a `trainforge doctor` check answers (`Finding`) and reads (`Context`), and the
statuses: two of them are findings, each with a one-line fix."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trainforge.doctor.facts import Facts

if TYPE_CHECKING:
    from trainforge.config import RunConfig

STATUSES = ("ok", "info", "skip", "warn", "problem")
# The statuses that make `trainforge doctor` exit 1: each comes with a fix.
FINDINGS = ("warn", "problem")


@dataclass(frozen=True)
class Finding:
    check: str
    status: str
    detail: str
    fix: str | None = None

    def __post_init__(self) -> None:
        assert self.status in STATUSES, self.status
        # A finding fails `trainforge doctor`, so it must say how to fix it.
        assert self.fix or self.status not in FINDINGS, self


@dataclass(frozen=True)
class Context:
    """What the checks read besides the machine: the run config (None if it failed to load)."""

    facts: Facts
    config: RunConfig | None
    config_error: str | None = None
    config_path: Path | None = None
