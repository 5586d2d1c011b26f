"""A toy logger added through the logger registry alone: it keeps every record in memory.

Importing this file registers `toy-memory`; a run turns it on with
`logging.loggers=[toy-memory]`. Its own option (`logging.options.toy-memory.every`): keep
every Nth training record only.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from trainforge.observe.loggers import LoggerEntry
from trainforge.options import Options
from trainforge.registry import LOGGERS

NAME = "toy-memory"
RECORDS: list[tuple[str, dict[str, float], int]] = []
PARAMS: list[dict[str, Any]] = []
CLOSED: list[str] = []
OFFERED: list[int] = []  # the step of every training record offered, kept or not


class MemoryOptions(Options):
    every: int = Field(1, ge=1, description="Keep every Nth training record.")


class MemoryLogger:
    def __init__(self, run_name: str, options: MemoryOptions) -> None:
        self.run_name = run_name
        self.every = options.every
        self.seen = 0

    def log(self, split: str, metrics: dict[str, float], step: int, epoch: float) -> None:
        if split == "train":
            OFFERED.append(step)
            self.seen += 1
            if (self.seen - 1) % self.every:
                return
        RECORDS.append((split, dict(metrics), step))

    def log_params(self, params: dict[str, Any]) -> None:
        PARAMS.append(dict(params))

    def close(self) -> None:
        CLOSED.append(self.run_name)


LOGGERS.register(
    NAME,
    LoggerEntry(
        "every record kept in a list (a test's toy)",
        lambda cfg, run_dir, run_name, resume_step: MemoryLogger(run_name, cfg.options_for(NAME)),
        options=MemoryOptions,
    ),
)
