"""A toy logger added through the logger registry alone: it keeps every record in memory.

Importing this file registers `toy-memory`; a run turns it on with
`logging.loggers=[toy-memory]`.
"""

from __future__ import annotations

from typing import Any

from trainforge.observe.loggers import LoggerEntry
from trainforge.registry import LOGGERS

NAME = "toy-memory"
RECORDS: list[tuple[str, dict[str, float], int]] = []
PARAMS: list[dict[str, Any]] = []
CLOSED: list[str] = []


class MemoryLogger:
    def __init__(self, run_name: str) -> None:
        self.run_name = run_name

    def log(self, split: str, metrics: dict[str, float], step: int, epoch: float) -> None:
        RECORDS.append((split, dict(metrics), step))

    def log_params(self, params: dict[str, Any]) -> None:
        PARAMS.append(dict(params))

    def close(self) -> None:
        CLOSED.append(self.run_name)


LOGGERS.register(
    NAME,
    LoggerEntry(
        "every record kept in a list (a test's toy)",
        lambda cfg, run_dir, run_name, resume_step: MemoryLogger(run_name),
    ),
)
