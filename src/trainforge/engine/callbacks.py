"""Events of the training loop and the callbacks that hang behaviour off them.

The loop only emits events; cadence (evaluation, checkpoints), time limits, signals,
logging and progress display are callbacks. New behaviour is a new callback.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from trainforge import parallel
from trainforge.engine import checkpoint as ckpt
from trainforge.engine import stop

if TYPE_CHECKING:
    from trainforge.engine.loop import Loop


class Callback:
    """Override the events you need; every hook receives the loop's declared view
    (`engine.loop.Loop`), never the Trainer itself. The loop calls the
    per-step events (`on_step_end`, `on_batch_end`) only on callbacks that override them,
    from a list taken at the start of each epoch (`listeners`)."""

    def on_fit_start(self, loop: Loop) -> None: ...
    def on_epoch_start(self, loop: Loop) -> None: ...
    def on_step_end(self, loop: Loop) -> None: ...
    def on_batch_end(self, loop: Loop) -> None: ...
    def on_epoch_end(self, loop: Loop) -> None: ...
    def on_eval_end(self, loop: Loop, metrics: dict[str, float]) -> None: ...
    def on_fast_eval_end(self, loop: Loop, metrics: dict[str, float]) -> None: ...
    def on_save(self, loop: Loop, path: Any) -> None: ...
    def on_fit_end(self, loop: Loop) -> None: ...


def overrides(callback: Any, event: str) -> bool:
    """Whether `callback` does something on `event`: any hook of an object that is not a
    `Callback` (duck typing), or one its class or the object itself replaces."""
    if not isinstance(callback, Callback):
        return True
    base = getattr(Callback, event)
    return getattr(type(callback), event) is not base or event in getattr(callback, "__dict__", ())


def listeners(callbacks: list[Any], event: str) -> list[Any]:
    """The bound `event` hooks of the callbacks that act on it, for the loop's per-step
    events: a base class no-op would cost a call per step for nothing."""
    return [getattr(c, event) for c in callbacks if overrides(c, event)]


class EvalCadence(Callback):
    """Full validation every `eval_steps` steps and every `eval_every_epochs` epochs; fast
    validation on a fixed subset every `fast_steps` steps, followed by a full validation
    when it improves (`full_on_improvement`).

    A run whose epochs (times `eval_every_epochs`) are shorter than `eval_steps` validates
    by step only: ten one-step epochs on a two-line file would otherwise validate ten times.
    Every run that trains to its end validates at its last step, when the cadence did not
    (unless the task's `validates_at_end` says its final model evaluation does that)."""

    def __init__(
        self,
        every_steps: int | None,
        every_epochs: int | None,
        fast_steps: int | None = None,
        full_on_improvement: bool = True,
    ) -> None:
        self.every_steps = every_steps
        self.every_epochs = every_epochs
        self.fast_steps = fast_steps
        self.full_on_improvement = full_on_improvement
        self.last_step: int | None = None  # the step of the last validation

    def by_epoch(self, steps_per_epoch: int) -> bool:
        """Whether epochs set the validation cadence (see the class docstring)."""
        if not self.every_epochs:
            return False
        return not (self.every_steps and steps_per_epoch * self.every_epochs < self.every_steps)

    def _evaluate(self, loop: Loop) -> None:
        loop.evaluate()
        self.last_step = loop.state.global_step

    def on_step_end(self, loop: Loop) -> None:
        full_due = loop.step_due(self.every_steps)
        if not full_due and loop.step_due(self.fast_steps):
            _, improved = loop.evaluate_fast()
            full_due = improved and self.full_on_improvement
        if full_due:
            self._evaluate(loop)

    def on_epoch_end(self, loop: Loop) -> None:
        if not self.by_epoch(loop.steps_per_epoch):
            return
        epoch = loop.state.epoch
        if epoch % self.every_epochs == 0 or loop.all_steps_done():
            self._evaluate(loop)

    def on_fit_end(self, loop: Loop) -> None:
        # A finished run ends with its number: one that stops between validations (30 steps
        # of a config that validates every 5 epochs) validates once more, whatever the cadence.
        if not (self.every_steps or self.every_epochs):
            return
        if loop.should_stop or loop.task.validates_at_end:
            return  # a stopped run validates when it resumes; such a task does it itself
        step = loop.state.global_step
        if step and self.last_step != step and loop.all_steps_done():
            self._evaluate(loop)


class CheckpointCadence(Callback):
    """Periodic checkpoints (`checkpoint-<step>`, `checkpoint_epoch_<n>`) and `best_model`."""

    def __init__(self, save_steps: int | None, every_epochs: int | None, save_best: bool) -> None:
        self.save_steps = save_steps
        self.every_epochs = every_epochs
        self.save_best = save_best

    def on_step_end(self, loop: Loop) -> None:
        if loop.step_due(self.save_steps):
            loop.save_checkpoint(ckpt.step_name(loop.state.global_step))

    def on_epoch_end(self, loop: Loop) -> None:
        epoch = loop.state.epoch
        if not self.every_epochs or epoch % self.every_epochs:
            return
        if self.save_steps and loop.steps_per_epoch * self.every_epochs < self.save_steps:
            return  # epochs shorter than save_steps: checkpoints go by step (as validation)
        loop.save_checkpoint(ckpt.epoch_name(epoch))

    def on_eval_end(self, loop: Loop, metrics: dict[str, float]) -> None:
        if self.save_best and loop.state.improved:
            loop.save_checkpoint(ckpt.best_name())

    def on_fit_end(self, loop: Loop) -> None:
        # Every run that ends leaves a checkpoint of its last step, so extending max_steps
        # or num_train_epochs continues from there and redoes nothing. A signal or the time
        # limit saved one already; a diverged run keeps its last good one.
        if loop.outcome.interrupted or loop.outcome.diverged or loop.state.global_step == 0:
            return
        last = loop.outcome.last_checkpoint_step
        if last != loop.state.global_step:
            loop.save_checkpoint(ckpt.step_name(loop.state.global_step), wait=True)


class TimeLimit(Callback):
    """Stop after `max_hours` of training time, saving `checkpoint_time_limit` first."""

    def __init__(self, max_hours: float | None, save: bool) -> None:
        self.limit_s = max_hours * 3600.0 if max_hours else None
        self.save = save

    def _check(self, loop: Loop) -> None:
        if self.limit_s is None or loop.should_stop:
            return
        if parallel.agree_any(loop.elapsed_s() >= self.limit_s):
            if self.save:
                loop.save_checkpoint(ckpt.time_limit_name())
            loop.stop(f"time limit of {self.limit_s / 3600:g} h reached")

    def on_step_end(self, loop: Loop) -> None:
        self._check(loop)

    def on_epoch_start(self, loop: Loop) -> None:
        # Guide: "For each epoch: 1. Check time limit".
        self._check(loop)


class GracefulStop(Callback):
    """Ctrl+C / SIGTERM / SIGUSR1: finish the micro-batch, save `checkpoint_interrupted`, stop.

    The handler only records the signal (no file I/O in a signal handler); the checkpoint is
    written from the loop after the current micro-batch, mid accumulation window if need be.
    The handler also puts the previous handler back, so a second Ctrl+C aborts at once. A
    process started with the signal ignored (a job a script put in the background, a
    service manager) still stops gracefully on the first and aborts on the second: an
    ignored SIGINT comes back as Python's KeyboardInterrupt, any other as the default action.
    """

    SIGNALS = ("SIGINT", "SIGTERM", "SIGUSR1")

    def __init__(self) -> None:
        self.received: str | None = None
        # When the signal came and when its checkpoint was on disk (epoch seconds): run.json
        # records both, so the time a preemption costs is a number (`run.segments`).
        self.received_at: float | None = None
        self.saved_at: float | None = None
        self._previous: dict[int, Any] = {}

    def _handler(self, signum: int, _frame: Any) -> None:
        self.received = signal.Signals(signum).name
        self.received_at = self.received_at or time.time()  # a plain store: handler-safe
        stop.request(self.received)  # a validation or generation pass ends at its next poll
        signal.signal(signum, self._second(signum))

    def _second(self, signum: int) -> Any:
        """What a second signal of this kind does: the previous handler, never nothing."""
        previous = self._previous.get(signum)
        if previous not in (None, signal.SIG_IGN):
            return previous
        return signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL

    def on_fit_start(self, loop: Loop) -> None:
        stop.clear()
        for name in self.SIGNALS:
            sig = getattr(signal, name, None)
            if sig is not None:
                try:
                    self._previous[sig] = signal.signal(sig, self._handler)
                except ValueError:  # not the main thread (e.g. embedded use)
                    return

    def _stop(self, loop: Loop) -> None:
        self.received_at = self.received_at or time.time()  # a rank that heard it from a peer
        loop.save_checkpoint(ckpt.interrupted_name(), wait=True)
        self.saved_at = time.time()
        loop.stop(f"{self.received} received", signal=self.received)

    def on_batch_end(self, loop: Loop) -> None:
        if parallel.context().enabled:
            return  # ranks agree at optimizer-step boundaries instead (on_step_end)
        if self.received and not loop.should_stop:
            self._stop(loop)

    def on_epoch_end(self, loop: Loop) -> None:
        # A signal during the epoch's validation: stop before the next epoch starts.
        self.on_batch_end(loop)

    def on_step_end(self, loop: Loop) -> None:
        if not parallel.context().enabled or loop.should_stop:
            return
        # A signal may reach the ranks at different moments (or only some of them): all stop
        # at the same step and agree on which signal it was, SIGUSR1 (checkpoint and
        # requeue) before SIGTERM before SIGINT, so rank 0 requeues when any rank got USR1.
        received = self.SIGNALS.index(self.received) + 1 if self.received else 0
        agreed = parallel.agree_max(received)
        if agreed:
            self.received = self.SIGNALS[agreed - 1]
            self._stop(loop)

    def on_fit_end(self, loop: Loop) -> None:
        try:
            late = self.received and loop is not None and not loop.outcome.interrupted
            if late and not parallel.context().enabled:
                self._stop(loop)  # the signal came during the closing validation
        finally:
            for sig, previous in self._previous.items():
                signal.signal(sig, previous)
            stop.clear()  # acted on: a later fit in this process starts without it


class LauncherWatch(Callback):
    """A training process whose launcher died stops at the next step boundary, in seconds.

    torchrun starts its workers in sessions of their own (`setsid`), so a SIGKILL of its
    agent reaches none of them and they would train on, unsupervised, still writing into the
    run folder, while a restarted job may already have taken it over. Linux's
    `PR_SET_PDEATHSIG` was considered (`sweep.trial` uses it for a child it forks itself):
    the child has to set it after the fork, so a launcher that died before then is missed,
    and it fires when the forking *thread* ends, not the process. Comparing the parent pid
    at each step boundary catches every case: an orphan is re-parented (to init or a
    subreaper). The process then ends at once with one line, writing nothing more: a
    checkpoint write under way is abandoned, and a checkpoint folder is only ever taken as
    good once complete (`engine.checkpoint`), so the run resumes from its newest good one.

    `parent_pid` is the launcher's pid at start (None: no launcher to watch)."""

    def __init__(self, parent_pid: int | None, resume: str) -> None:
        self.parent_pid = parent_pid
        self.resume = resume

    def on_step_end(self, loop: Loop) -> None:
        if self.parent_pid is None or os.getppid() == self.parent_pid:
            return
        if loop.should_stop:  # a stop already saved its checkpoint: it ends by itself
            return
        line = (
            f"trainforge: the launcher (process {self.parent_pid}) is gone; stopping at step "
            f"{loop.state.global_step} without saving. continue the run from its newest "
            f"checkpoint with `{self.resume}`"
        )
        with contextlib.suppress(OSError):  # the launcher's end of the pipe went with it
            print(line, file=sys.stderr, flush=True)
        os._exit(2)  # no clean-up: nothing of this orphan may write into the folder again


def launcher_pid(env: dict[str, str] | None = None) -> int | None:
    """The pid of the launcher that owns this training process: torchrun's agent (its
    `TORCHELASTIC_RUN_ID` in the environment) is the parent; None elsewhere, where a parent
    that ends (a shell closed under `nohup`) must not stop the run."""
    env = os.environ if env is None else env
    return os.getppid() if env.get("TORCHELASTIC_RUN_ID") else None
