"""Progress display: a live bar on a terminal, one summary line per epoch otherwise.

The bar advances every step without touching the device; its loss, accuracy, learning
rate and samples/s come from the logging points, where the loop synchronises anyway.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from trainforge.engine.callbacks import Callback

if TYPE_CHECKING:
    from trainforge.engine.trainer import Trainer


def _fmt(split: str, metrics: dict[str, float]) -> str:
    prefix = f"{split} " if split else ""
    parts = []
    if "loss" in metrics:
        parts.append(f"{prefix}loss {metrics['loss']:.4f}")
    if "accuracy" in metrics:
        parts.append(f"{prefix}acc {metrics['accuracy'] * 100:.2f}%")
    return "  ".join(parts)


class ProgressDisplay(Callback):
    def __init__(self, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.live = enabled and self.stream.isatty()
        self.console = Console(file=self.stream)
        self.progress: Progress | None = None
        self.task_id = None
        self.train: dict[str, float] = {}
        self.val: dict[str, float] = {}

    def on_fit_start(self, trainer: Trainer) -> None:
        if not self.live:
            return
        self.progress = Progress(
            TextColumn("[bold]epoch {task.fields[epoch]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[stats]}"),
            console=self.console,
        )
        self.progress.start()
        self.task_id = self.progress.add_task(
            "train",
            total=trainer.total_steps,
            completed=trainer.state.global_step,
            epoch=trainer.state.epoch + 1,
            stats="",
        )

    def on_step_end(self, trainer: Trainer) -> None:
        if self.progress is not None:
            self.progress.update(self.task_id, completed=trainer.state.global_step)

    def on_metrics(self, trainer: Trainer, split: str, metrics: dict[str, float]) -> None:
        if split == "train":
            self.train = metrics
        elif split == "val":
            self.val = metrics
        else:
            return  # fast validation and telemetry go to the loggers only
        if self.progress is not None:
            stats = "  ".join(
                s
                for s in (
                    _fmt("", self.train),
                    f"lr {self.train.get('lr', 0):.2e}",
                    f"{self.train.get('samples_per_s', 0):,.0f} samples/s",
                    _fmt("val", self.val),
                )
                if s
            )
            self.progress.update(self.task_id, stats=stats)

    def on_epoch_end(self, trainer: Trainer) -> None:
        line = (
            f"epoch {trainer.state.epoch}/{trainer.num_epochs}  step {trainer.state.global_step}"
            f"  {_fmt('train', self.train)}  {_fmt('val', self.val)}"
            f"  lr {self.train.get('lr', 0):.2e}"
            f"  {self.train.get('samples_per_s', 0):,.0f} samples/s"
            f"  data wait {self.train.get('data_wait_share', 0) * 100:.1f}%"
        )
        if self.progress is not None:
            self.progress.update(self.task_id, epoch=trainer.state.epoch + 1)
            self.progress.console.print(line)
        else:
            print(line, file=self.stream, flush=True)

    def on_fit_end(self, trainer: Trainer) -> None:
        if self.progress is not None:
            self.progress.stop()
