"""The callbacks that feed loggers: training metrics every `logging_steps`, validation
always, fast validation, telemetry samples at logging points, weight histograms every
`histogram_steps`, and the config as params at the start."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainforge.engine.callbacks import Callback
from trainforge.observe.loggers import MetricLogger

if TYPE_CHECKING:
    from trainforge.engine.loop import Loop
    from trainforge.hardware.telemetry import TelemetrySampler


class MetricsCallback(Callback):
    def __init__(
        self,
        loggers: list[MetricLogger],
        logging_steps: int,
        listeners=(),
        *,
        params: dict[str, Any] | None = None,
        telemetry: TelemetrySampler | None = None,
        histogram_steps: int | None = None,
    ) -> None:
        self.loggers = loggers
        self.logging_steps = logging_steps
        self.listeners = list(listeners)  # e.g. the progress display
        self.params = params or {}
        self.telemetry = telemetry
        self.histogram_steps = histogram_steps
        self.last_train: dict[str, float] = {}
        self._last_sample_time = 0.0

    def _epoch(self, loop: Loop) -> float:
        return round(loop.state.global_step / loop.steps_per_epoch, 4)

    def _emit(self, loop: Loop, split: str, metrics: dict[str, float]) -> None:
        for logger in self.loggers:
            logger.log(split, metrics, loop.state.global_step, self._epoch(loop))
        for listener in self.listeners:
            listener.on_metrics(loop, split, metrics)

    def on_fit_start(self, loop: Loop) -> None:
        if self.params:
            for logger in self.loggers:
                logger.log_params(self.params)
        if self.telemetry is not None:
            self.telemetry.start()

    def on_step_end(self, loop: Loop) -> None:
        due = loop.step_due(self.logging_steps)  # settles device-side skips first
        step = loop.state.global_step
        if due or step >= loop.total_steps:
            self._flush(loop)
        if self.histogram_steps and step % self.histogram_steps == 0:
            for logger in self.loggers:
                if hasattr(logger, "log_histograms"):
                    logger.log_histograms(loop.task.model, step)

    def on_epoch_end(self, loop: Loop) -> None:
        self._flush(loop)

    def _flush(self, loop: Loop) -> None:
        metrics = loop.pop_train_metrics()
        if metrics:
            self.last_train = metrics
            self._emit(loop, "train", metrics)
        self._log_telemetry(loop)

    def _log_telemetry(self, loop: Loop) -> None:
        if self.telemetry is None:
            return
        sample = self.telemetry.latest()
        taken = sample.pop("time", 0.0)
        if sample and taken > self._last_sample_time:
            self._last_sample_time = taken
            self._emit(loop, "telemetry", sample)

    def on_eval_end(self, loop: Loop, metrics: dict[str, float]) -> None:
        self._emit(loop, "val", metrics)

    def on_fast_eval_end(self, loop: Loop, metrics: dict[str, float]) -> None:
        self._emit(loop, "val_fast", metrics)

    def on_fit_end(self, loop: Loop) -> None:
        self._flush(loop)
        if self.telemetry is not None:
            self.telemetry.stop()
        for logger in self.loggers:
            logger.close()
