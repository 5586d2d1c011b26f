"""The callback that feeds loggers: training metrics every `logging_steps`, validation always."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainforge.engine.callbacks import Callback
from trainforge.observe.loggers import MetricLogger

if TYPE_CHECKING:
    from trainforge.engine.trainer import Trainer


class MetricsCallback(Callback):
    def __init__(self, loggers: list[MetricLogger], logging_steps: int, listeners=()) -> None:
        self.loggers = loggers
        self.logging_steps = logging_steps
        self.listeners = list(listeners)  # e.g. the progress display
        self.last_train: dict[str, float] = {}

    def _epoch(self, trainer: Trainer) -> float:
        return round(trainer.state.global_step / trainer.steps_per_epoch, 4)

    def _emit(self, trainer: Trainer, split: str, metrics: dict[str, float]) -> None:
        for logger in self.loggers:
            logger.log(split, metrics, trainer.state.global_step, self._epoch(trainer))
        for listener in self.listeners:
            listener.on_metrics(trainer, split, metrics)

    def on_step_end(self, trainer: Trainer) -> None:
        step = trainer.state.global_step
        if step % self.logging_steps == 0 or step >= trainer.total_steps:
            self._flush(trainer)

    def on_epoch_end(self, trainer: Trainer) -> None:
        self._flush(trainer)

    def _flush(self, trainer: Trainer) -> None:
        metrics = trainer.pop_train_metrics()
        if metrics:
            self.last_train = metrics
            self._emit(trainer, "train", metrics)

    def on_eval_end(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        self._emit(trainer, "val", metrics)

    def on_fit_end(self, trainer: Trainer) -> None:
        self._flush(trainer)
        for logger in self.loggers:
            logger.close()
