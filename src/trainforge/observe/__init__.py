"""Observation: metric loggers, the logging callback, the progress display and the quiet
console. Names are imported on first use, so `trainforge.observe.quiet` (installed by every
command at start) costs no import of rich or the loggers."""

from __future__ import annotations

from importlib import import_module
from typing import Any

_NAMES = {
    "JsonlLogger": "trainforge.observe.loggers",
    "MetricLogger": "trainforge.observe.loggers",
    "TensorBoardLogger": "trainforge.observe.loggers",
    "build_loggers": "trainforge.observe.loggers",
    "ProgressDisplay": "trainforge.observe.progress",
    "MetricsCallback": "trainforge.observe.reporting",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_NAMES[name]), name)
    globals()[name] = value
    return value
