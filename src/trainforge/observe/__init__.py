"""Observation: metric loggers, the logging callback and the progress display."""

from trainforge.observe.loggers import JsonlLogger, MetricLogger, TensorBoardLogger, build_loggers
from trainforge.observe.progress import ProgressDisplay
from trainforge.observe.reporting import MetricsCallback

__all__ = [
    "JsonlLogger",
    "MetricLogger",
    "MetricsCallback",
    "ProgressDisplay",
    "TensorBoardLogger",
    "build_loggers",
]
