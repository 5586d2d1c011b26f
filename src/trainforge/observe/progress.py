"""Progress display: a live bar on a terminal; progress lines for logs without one.

Without a terminal (Slurm and Docker output files, nohup, the web app's log) a line is
printed at every logging point, whenever validation has new figures, at the end of an epoch,
and otherwise at least every `interval_s` seconds, so a long epoch is never silent:

    epoch 1/5  step 400/8785  loss 1.2345  lr 9.80e-04  2,410 samples/s  37.7 steps/s
    data wait 3.1%  ETA 0:03:52  | val loss 1.1021  per 12.40%  wer 41.00%

(one line in the log). Validation figures appear only on the first line after they were
measured. Nothing here touches the device: loss, accuracy and samples/s come from the logging
points, where the loop synchronises anyway; step counts, steps/s and the ETA come from the
display's own clock, and the learning rate from the optimizer, so the first line after a
resume shows real figures. The ETA follows the recent rate (the steps of the last
`RATE_WINDOW_S` seconds, as rich's bar estimates its speed over its last 30 s), not the mean
since the start: a run that sped up or slowed down an hour in says so within minutes. After
the first hour a line also shows the time elapsed and the steps an hour. rich draws the
terminal bar; tqdm was not used because rich is already the CLI's console library.
"""

from __future__ import annotations

import math
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from trainforge import parallel
from trainforge.engine.callbacks import Callback

if TYPE_CHECKING:
    from trainforge.engine.loop import Loop

# Metric key -> (label, format); shares are printed as percentages.
_SHOWN = (
    ("loss", "loss", "{:.4f}"),
    ("accuracy", "acc", "{:.2%}"),
    ("perplexity", "ppl", "{:.2f}"),
    ("per", "per", "{:.2%}"),
    ("wer", "wer", "{:.2%}"),
)


def format_metrics(metrics: dict[str, float], prefix: str = "") -> str:
    """`loss 0.1234  acc 95.00%  per 3.10%` for the task metrics present in `metrics`."""
    parts = [
        f"{prefix}{label} {fmt.format(metrics[key])}"
        for key, label, fmt in _SHOWN
        if key in metrics
    ]
    return "  ".join(parts)


RATE_WINDOW_S = 120.0  # the ETA's rate: the steps of the last two minutes
_HOUR_S = 3600.0


def format_eta(seconds: float) -> str:
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


class ProgressDisplay(Callback):
    """`enabled` turns the terminal bar on (lines are printed either way); `interval_s` (None:
    the run config's logging.progress_interval_s) and `clock` set the longest silence in a
    log (tests pass 0 s or a fake clock)."""

    def __init__(
        self,
        enabled: bool = True,
        stream: TextIO | None = None,
        *,
        interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream or sys.stdout
        self.live = enabled and self.stream.isatty()
        self.console = Console(file=self.stream)
        self.progress: Progress | None = None
        self.task_id = None
        self.interval_s = interval_s
        self.clock = clock
        self.train: dict[str, float] = {}
        self.val: dict[str, float] = {}
        self._train_fresh = False
        self._val_fresh = False
        self._start: tuple[float, int] = (0.0, 0)  # (time, step) when fit started
        self._last: tuple[float, int] = (0.0, 0)  # (time, step) of the previous line
        self._recent: deque[tuple[float, int]] = deque()  # (time, step) of recent lines
        self._batch = 0

    def on_fit_start(self, loop: Loop) -> None:
        now, step = self.clock(), loop.state.global_step
        self._start = self._last = (now, step)
        self._recent = deque([(now, step)])
        config = loop.config
        if self.interval_s is None:
            self.interval_s = getattr(config.logging, "progress_interval_s", 30.0)
        batch = config.training.per_device_train_batch_size
        if isinstance(batch, int):  # the step's samples: the plan's effective batch
            total = config.training.global_batch_size
            accumulation = config.training.gradient_accumulation_steps
            self._batch = total or batch * accumulation * parallel.context().world_size
        if not self.live:
            return
        self.progress = Progress(
            TextColumn("[bold]epoch {task.fields[epoch]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[stats]}"),
            console=self.console,
            # rich's default 10 redraws a second cost about 1 % of a core beside a
            # 2-thread CPU training; 4 look as live.
            refresh_per_second=4,
        )
        self.progress.start()
        self.task_id = self.progress.add_task(
            "train", total=loop.total_steps, completed=step, epoch=loop.state.epoch + 1,
            stats="",
        )  # fmt: skip

    def on_metrics(self, loop: Loop, split: str, metrics: dict[str, float]) -> None:
        if split == "train":
            self.train, self._train_fresh = dict(metrics), True
        elif split == "val":
            self.val, self._val_fresh = dict(metrics), True
        # fast validation and telemetry go to the loggers only
        if self.progress is not None and split in ("train", "val"):
            stats = "  ".join(
                s for s in (format_metrics(self.train), self._lr(loop),
                            format_metrics(self.val, "val ")) if s
            )  # fmt: skip
            self.progress.update(self.task_id, stats=stats)

    def on_step_end(self, loop: Loop) -> None:
        if self.progress is not None:
            self.progress.update(self.task_id, completed=loop.state.global_step)
            if self._val_fresh:
                self._print(self.line(loop, loop.state.epoch + 1))
            return
        due = self.clock() - self._last[0] >= (self.interval_s or 0.0)
        if due or self._train_fresh or self._val_fresh:
            self._print(self.line(loop, loop.state.epoch + 1))

    def on_epoch_end(self, loop: Loop) -> None:
        if self.progress is not None:
            self.progress.update(self.task_id, epoch=loop.state.epoch + 1)
        if self._last[1] != loop.state.global_step or self._val_fresh or self._train_fresh:
            self._print(self.line(loop, loop.state.epoch))

    def on_fit_end(self, loop: Loop) -> None:
        if self._train_fresh or self._val_fresh:
            self._print(self.line(loop, loop.state.epoch + 1))
        if self.progress is not None:
            self.progress.stop()

    def _lr(self, loop: Loop) -> str:
        return f"lr {loop.current_lr():.2e}"

    def line(self, loop: Loop, epoch: int) -> str:
        """One progress line; consumes the freshness of the train and validation figures."""
        now, step = self.clock(), loop.state.global_step
        total, train = loop.total_steps, self.train if self._train_fresh else {}
        epochs = math.ceil(total / loop.steps_per_epoch)
        head = f"epoch {min(epoch, epochs)}/{epochs}  step {step}/{total}"
        if step == self._last[1] != self._start[1] and self._val_fresh and not train:
            # The epoch's validation after its last step's line: the figures it adds, not
            # that line again.
            self._val_fresh = False
            return f"{head}  | " + format_metrics(self.val, "val ")
        parts = [head, format_metrics(self.train), self._lr(loop)]
        steps_per_s = self._steps_per_s(train, now, step)
        samples_per_s = train.get("samples_per_s") or (steps_per_s or 0.0) * self._batch
        if samples_per_s:
            parts.append(f"{samples_per_s:,.0f} samples/s")
        if steps_per_s:
            parts.append(f"{steps_per_s:,.2f} steps/s")
        if "data_wait_share" in self.train:
            parts.append(f"data wait {self.train['data_wait_share']:.1%}")
        per_step = self._recent_seconds_per_step(now, step)
        if per_step is not None and step < total:
            parts.append(f"ETA {format_eta((total - step) * per_step)}")
        elapsed = now - self._start[0]
        if elapsed >= _HOUR_S and per_step:
            parts.append(f"elapsed {format_eta(elapsed)}  {_HOUR_S / per_step:,.0f} steps/h")
        text = "  ".join(p for p in parts if p)
        if self._val_fresh and self.val:
            text += "  | " + format_metrics(self.val, "val ")
        self._train_fresh = self._val_fresh = False
        self._last = (now, step)
        return text

    def _recent_seconds_per_step(self, now: float, step: int) -> float | None:
        """Seconds a step over the last RATE_WINDOW_S (at least since the previous line)."""
        recent = self._recent
        while recent and recent[-1][1] >= step:  # a line again at the same step
            recent.pop()
        recent.append((now, step))
        while len(recent) > 2 and now - recent[1][0] >= RATE_WINDOW_S:
            recent.popleft()
        then, steps = recent[0][0], step - recent[0][1]
        return (now - then) / steps if steps > 0 and now > then else None

    def _steps_per_s(self, train: dict[str, float], now: float, step: int) -> float | None:
        if train.get("step_time_s"):
            return 1.0 / train["step_time_s"]  # the training window, evaluation excluded
        last_time, last_step = self._last
        if step > last_step and now > last_time:
            return (step - last_step) / (now - last_time)
        return None

    def _print(self, line: str) -> None:
        if self.progress is not None:
            self.progress.console.print(line, highlight=False, markup=False)
        else:
            print(line, file=self.stream, flush=True)
