"""The callbacks that feed loggers: training metrics every `logging_steps`, validation
always, fast validation, telemetry samples at logging points, weight histograms every
`histogram_steps`, and the config as params at the start."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainforge.engine.callbacks import Callback
from trainforge.observe.loggers import MetricLogger

if TYPE_CHECKING:
    from trainforge.engine.trainer import Trainer
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

    def _epoch(self, trainer: Trainer) -> float:
        return round(trainer.state.global_step / trainer.steps_per_epoch, 4)

    def _emit(self, trainer: Trainer, split: str, metrics: dict[str, float]) -> None:
        for logger in self.loggers:
            logger.log(split, metrics, trainer.state.global_step, self._epoch(trainer))
        for listener in self.listeners:
            listener.on_metrics(trainer, split, metrics)

    def on_fit_start(self, trainer: Trainer) -> None:
        if self.params:
            for logger in self.loggers:
                logger.log_params(self.params)
        if self.telemetry is not None:
            self.telemetry.start()

    def on_step_end(self, trainer: Trainer) -> None:
        due = trainer.step_due(self.logging_steps)  # settles device-side skips first
        step = trainer.state.global_step
        if due or step >= trainer.total_steps:
            self._flush(trainer)
        if self.histogram_steps and step % self.histogram_steps == 0:
            for logger in self.loggers:
                if hasattr(logger, "log_histograms"):
                    logger.log_histograms(trainer.model, step)

    def on_epoch_end(self, trainer: Trainer) -> None:
        self._flush(trainer)

    def _flush(self, trainer: Trainer) -> None:
        metrics = trainer.pop_train_metrics()
        if metrics:
            self.last_train = metrics
            self._emit(trainer, "train", metrics)
        self._log_telemetry(trainer)

    def _log_telemetry(self, trainer: Trainer) -> None:
        if self.telemetry is None:
            return
        sample = self.telemetry.latest()
        taken = sample.pop("time", 0.0)
        if sample and taken > self._last_sample_time:
            self._last_sample_time = taken
            self._emit(trainer, "telemetry", sample)

    def on_eval_end(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        self._emit(trainer, "val", metrics)

    def on_fast_eval_end(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        self._emit(trainer, "val_fast", metrics)

    def on_fit_end(self, trainer: Trainer) -> None:
        self._flush(trainer)
        if self.telemetry is not None:
            self.telemetry.stop()
        for logger in self.loggers:
            logger.close()
