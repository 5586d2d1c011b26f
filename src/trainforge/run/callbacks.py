"""The callbacks a training loop runs with, built in one place for `trainforge train` and
for pruning's fine-tune (`export.pruning`): validation cadence, checkpoints, the time
limit, the graceful stop, metrics to the loggers, the progress display and the profiler;
in a sweep's trial, the pruner's report.

Built here, above `engine` and `observe`, because the list joins both: the engine's
cadence callbacks and observe's metrics, progress and profiler.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainforge.config import RunConfig
from trainforge.engine.callbacks import (
    Callback,
    CheckpointCadence,
    EvalCadence,
    GracefulStop,
    LauncherWatch,
    TimeLimit,
    launcher_pid,
)
from trainforge.observe import MetricsCallback, ProgressDisplay
from trainforge.observe.profiler import profiler_callbacks
from trainforge.run.segments import SegmentClock
from trainforge.runfolder import RunFolder, resume_command
from trainforge.sweep.pruning import callbacks_from_env as sweep_callbacks


def build_callbacks(
    config: RunConfig,
    loggers: list[Any],
    *,
    resumable: bool = True,
    progress: bool = True,
    params: dict[str, Any] | None = None,
    telemetry: Any = None,
    profile_dir: Path | None = None,
    run_folder: RunFolder | None = None,
) -> list[Callback]:
    """A resumable run (`trainforge train`) validates by steps, epochs and fast validation,
    keeps checkpoints, and stops at the time limit or on a signal with a checkpoint; a
    fine-tune inside an export validates every `eval_every_epochs` only and keeps no
    checkpoints. Both log `loggers` and show progress when `progress`; a `profile_dir`
    adds the profiler's callbacks writing there. A resumable run with its `run_folder`
    also records its segment's times in run.json and stops when its launcher dies."""
    e, c, t = config.evaluation, config.checkpoint, config.training
    display = ProgressDisplay(enabled=progress)
    if resumable:
        head: list[Callback] = [
            EvalCadence(
                e.eval_steps,
                e.eval_every_epochs,
                e.fast_eval_steps,
                e.full_eval_on_fast_improvement,
            ),
            CheckpointCadence(c.save_steps, c.save_every_epochs, c.save_best),
            TimeLimit(t.max_training_hours, c.save_on_time_limit),
            graceful := GracefulStop(),
        ]
        if run_folder is not None:
            head.append(SegmentClock(run_folder, graceful))
            head.append(LauncherWatch(launcher_pid(), resume_command(run_folder)))
    else:
        head = [EvalCadence(None, e.eval_every_epochs)]
    metrics = MetricsCallback(
        loggers,
        config.logging.logging_steps,
        listeners=[display],
        params=params,
        telemetry=telemetry,
        histogram_steps=config.logging.histogram_steps if config.logging.tensorboard else None,
    )
    profiler = profiler_callbacks(config.logging, profile_dir) if profile_dir else []
    sweep = sweep_callbacks() if resumable else []  # a sweep's trial reports to its pruner
    return [*head, *sweep, metrics, display, *profiler]


def metrics_callback(callbacks: list[Callback]) -> MetricsCallback:
    return next(c for c in callbacks if isinstance(c, MetricsCallback))
