"""The training loop: one loop for every task.

`Trainer` trains: `fit`, the epoch loop, forward/backward and the optimizer step. It emits
events; evaluation and checkpoint cadence, time limit, signals, logging and progress are
callbacks, which see the loop's declared view (`engine.loop.Loop`). Its parts are built from
the config and each other (`engine.parts`), never handed the Trainer: the guard returns its
device-side skips, validation its metrics, the checkpointer its save, and the loop applies
them (rewinds the step counter, tracks the best, emits the events).

Gradient accumulation weights each micro-batch's mean loss by its item count and divides
the summed gradients by the window's total, so a window of any shape (including a short
last window) gives the same update as one batch holding the same samples.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from trainforge import parallel
from trainforge.config.schema import RunConfig
from trainforge.data.loaders import park_workers
from trainforge.engine import stop
from trainforge.engine.callbacks import Callback, listeners
from trainforge.engine.gradients import finish_gradients, folds_clipping
from trainforge.engine.loop import Outcome
from trainforge.engine.meters import NO_COUNT, TrainMeter, as_flops, flop_counter
from trainforge.engine.parts import build_parts
from trainforge.engine.schedule import rewind
from trainforge.engine.state import FitResult
from trainforge.engine.task import Task


class Trainer:
    def __init__(
        self,
        task: Task,
        config: RunConfig,
        *,
        run_dir: Path,
        device: torch.device,
        callbacks: list[Callback],
        config_yaml: str = "",
        config_hash: str = "",
        peak_tflops: float | None = None,
        measured_peak_tflops: float | None = None,
    ) -> None:
        self.task, self.config, self.run_dir, self.device = task, config, run_dir, device
        self.callbacks, self.config_hash = callbacks, config_hash
        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        self.accumulation = config.training.gradient_accumulation_steps
        self.dist = parallel.context()
        # One micro-batch per optimizer step on one process: gradients of the mean loss are
        # already the step's gradients; otherwise micro-batches are weighted by item count.
        self._mean_backward = self.accumulation == 1 and not self.dist.enabled
        # This module's clock times the whole loop; MFU is against the table's (or configured)
        # peak and the measured one (hardware.peak_probe).
        peaks = as_flops(peak_tflops), as_flops(measured_peak_tflops)
        self.meter = TrainMeter(lambda: time.perf_counter(), *peaks)
        p = build_parts(task, config, self.meter, run_dir, device, config_yaml, config_hash)
        self.prepared, self.precision, self.params = p.prepared, p.precision, p.params
        self.model, self.forward_model = p.prepared.model, p.prepared.forward
        self.sharded, self.optimizer, self.scheduler = p.prepared.sharded, p.optimizer, p.scheduler
        self.steps_per_epoch, self.total_steps = p.steps_per_epoch, p.total_steps
        self.schedule_note, self.state, self.guard, self.best = p.schedule_note, *p.counted
        self.accumulation_sums, self.setup = p.accumulation_sums, p.setup
        self.checkpointer, self.validation = p.checkpointer, p.validation
        self.last_grad_norm: torch.Tensor | None = None
        self.last_step_loss: torch.Tensor | None = None
        self.last_val: dict[str, float] = {}
        self.should_stop, self.outcome = False, Outcome()  # should_stop: read per micro-batch
        self._clock_start = time.monotonic()
        self.resume_guarantee: tuple[str, list[str]] | None = None  # set by load_checkpoint

    def emit(self, event: str, *args: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, event)(self, *args)

    def elapsed_s(self) -> float:
        return self.state.train_time_s + time.monotonic() - self._clock_start

    def restart_clock(self) -> None:
        self._clock_start = time.monotonic()

    def stop(self, reason: str, *, signal: str | None = None) -> None:
        self.should_stop = True
        self.outcome.reason = reason
        if signal is not None:
            self.outcome.signal, self.outcome.interrupted = signal, True

    @property
    def last_checkpoint(self) -> Path | None:
        return self.outcome.last_checkpoint

    def all_steps_done(self) -> bool:
        """All optimizer steps taken. Device-side skips are settled first (one read, at the
        end only): they give their steps back, and the run trains on to the real total."""
        if self.state.global_step < self.total_steps:
            return False
        self.settle_skips()
        return self.state.global_step >= self.total_steps

    def step_due(self, every: int | None) -> bool:
        """Whether the step just taken is a multiple of `every` (cadence callbacks). A due
        step settles device-side skips first, so cadence follows the real steps; the
        checkpoint or evaluation it triggers reads from the device anyway."""
        if not every or self.state.global_step % every:
            return False
        self.settle_skips()
        return self.state.global_step % every == 0

    def settle_skips(self) -> None:
        """The guard's device-side skips since the last read (`NonFiniteGuard.settle`) go
        back out of the step counter, schedule and meter (the kernel left the weights alone),
        so the run equals one that never saw them; a run that keeps diverging stops."""
        skipped, weight = self.guard.settle(self.state.global_step)
        if not skipped:
            return
        self.state.global_step -= skipped
        rewind(self.scheduler, skipped)
        self.meter.give_back(skipped, weight)
        self._stop_if_diverged()

    def _stop_if_diverged(self) -> None:
        if self.guard.diverged():
            self.outcome.diverged = True
            self.stop(self.guard.reason)

    def current_lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def fit(self) -> FitResult:
        """Train to the end or a stop; every checkpoint is on disk when it returns, and the
        loaders' workers end with it (the garbage collector would join them, 5 s each)."""
        try:
            with self.checkpointer.leaving():
                return self._fit()
        finally:
            park_workers(self.task.train_loader, self.task.val_loader)

    def _fit(self) -> FitResult:
        self.restart_clock()
        self.outcome.start_step = self.state.global_step
        self.outcome.start_time_s = self.state.train_time_s
        stop.clear()  # a request left by an earlier fit in this process is not this run's
        p = self.precision  # decided at fit start: a test may give a CPU run a scaler
        self._plain_backward = self._mean_backward and p.name == "fp32" and p.scaler is None
        clip = self.config.training.max_grad_norm
        self._fold_clip = folds_clipping(self.optimizer, self.sharded, clip) and p.scaler is None
        if self.meter.steps == 0:
            # The first logging interval starts here, not when the trainer was built:
            # building the model and loading a checkpoint are not training time.
            self.meter.reset()
        self.emit("on_fit_start")
        while not self.all_steps_done() and not self.should_stop:
            self.emit("on_epoch_start")
            if self.should_stop:
                break
            if self._train_epoch():
                self.state.epoch += 1
                self.state.batch_in_epoch = 0
                self.emit("on_epoch_end")
        self.checkpointer.writer.wait()  # the loop's saves, before on_fit_end (its own: leaving)
        self.settle_skips()
        parallel.barrier()
        self.state.train_time_s = self.elapsed_s()
        self.restart_clock()
        self.emit("on_fit_end")
        o = self.outcome
        return FitResult(self.state, dict(self.last_val), o.reason, o.interrupted)

    def _train_epoch(self) -> bool:
        """Train until the epoch ends (True) or training stops inside it (False).

        A checkpoint may be taken after any micro-batch (events `on_step_end` and
        `on_batch_end`), always before the loader is exhausted, so the saved loader
        position, batch counter and accumulation window agree with each other.
        """
        self.model.train()
        loader = self.task.train_loader
        num_batches = len(loader)
        # A loader draws its worker base seed from the global RNG when it starts an
        # iterator (more than once when restoring one); keep that out of the training RNG
        # stream so a resumed run draws exactly what the uninterrupted run drew.
        with torch.random.fork_rng(devices=[]):
            batches = iter(loader)
        # A zero-weight stand-in fills a process's empty slot in a short last step
        # (`data.sampling.StepLayout`), so every process runs the same micro-batches.
        padded = getattr(getattr(loader, "batch_sampler", None), "padding", frozenset())
        # The step is about 2 ms on a tiny model, where every call and attribute lookup on
        # this path shows in the engine benchmark: the hot names are locals.
        sums, state, task, meter = self.accumulation_sums, self.state, self.task, self.meter
        clock, step_end = time.perf_counter, listeners(self.callbacks, "on_step_end")
        batch_end = listeners(self.callbacks, "on_batch_end")
        while True:
            fetch_start = clock()
            try:
                raw = next(batches)
            except StopIteration:
                return True
            batch = task.to_device(raw, self.device, True)
            meter.data_s += clock() - fetch_start
            index = state.batch_in_epoch
            closes = sums.micro + 1 >= self.accumulation or index + 1 >= num_batches
            padding = index in padded
            samples = 0 if padding else task.batch_size(raw)
            weighted, out = self._forward_backward(batch, closes, samples, padding)
            sums.add(weighted, out, samples)
            state.samples_seen += samples
            state.batch_in_epoch = index + 1
            if closes and self._optimizer_step():
                # A background save the disk refused stops the run here.
                self.checkpointer.writer.check()
                for hook in step_end:
                    hook(self)
            for hook in batch_end:
                hook(self)
            if index + 1 >= num_batches:
                next(batches, None)  # exhaust so the loader's saved state marks the epoch done
                return True
            done = state.global_step >= self.total_steps and self.all_steps_done()
            if done or self.should_stop:  # settling (all_steps_done) may stop a diverged run
                return False

    def _forward_backward(
        self, batch: Any, closes: bool, samples: int, padding: bool = False
    ) -> tuple[torch.Tensor, Any]:
        """One micro-batch of `samples` items: forward, loss, backward; (its detached loss for
        the sums, output). `closes`: it ends the accumulation window (gradients are reduced
        across ranks). `padding`: a stand-in whose loss, weight and sums count zero."""
        if self._plain_backward and not padding and self.state.flops_per_sample is not None:
            # One fp32 micro-batch on one process, FLOPs counted: the general path below
            # with its no-op contexts and branches left out.
            out = self.task.step(self.forward_model, batch)
            loss = out.loss if out.loss.dtype == torch.float32 else out.loss.float()
            weighted = loss.detach()
            loss.backward()
            return weighted, out
        counter = flop_counter(self.state)  # the first micro-batch of a fresh run only
        with counter, self.prepared.no_sync(not closes):
            counting = counter is not NO_COUNT and not self.dist.enabled
            model = self.model if counting else self.forward_model
            with self.precision.autocast():
                out = self.task.step(model, batch)
            loss = out.loss if out.loss.dtype == torch.float32 else out.loss.float()
            if padding:
                out.weight, out.sums = 0, {k: v * 0 for k, v in out.sums.items()}
            if not self._mean_backward:
                # Otherwise the window is this one micro-batch: its mean loss is the step's
                # loss, so backward on it directly (no weighting on the way in or out).
                loss = loss * out.weight
            weighted = loss.detach()
            if self.precision.scaler is not None:
                self.precision.scaler.scale(loss).backward()
            else:
                loss.backward()
        if counter is not NO_COUNT:
            self.state.flops_per_sample = counter.get_total_flops() / max(1, samples)
        return weighted, out

    def _optimizer_step(self) -> bool:
        """Apply the window's update; False when it was skipped for a non-finite value."""
        sums, scaler = self.accumulation_sums, self.precision.scaler
        if scaler is not None:
            scaler.unscale_(self.optimizer)
        t = self.config.training
        step_loss, norm = finish_gradients(
            self.params, sums, mean_backward=self._mean_backward, sharded=self.sharded,
            max_grad_norm=t.max_grad_norm, want_norm=t.skip_nonfinite_steps and scaler is None,
            fold_into=self.optimizer if self._fold_clip else None,  # engine/gradients.py
        )  # fmt: skip
        finite = self.guard.check(step_loss, norm, sums, self.optimizer, scaler)
        if finite:
            if scaler is not None:
                scaler.step(self.optimizer)
                scaler.update()
            else:
                self.optimizer.step()
            self.guard.applied(self.optimizer, scaler)
            self.scheduler.step()
            self.state.global_step += 1
            self.last_grad_norm = norm
            self.last_step_loss = step_loss  # detached: built from detached losses
            self.meter.fold(sums, self._mean_backward)
        else:
            if scaler is not None:
                scaler.update()
            self.guard.skipped_on_host(self.state.global_step + 1)
            self.meter.skipped += 1
            self._stop_if_diverged()
        self.optimizer.zero_grad(set_to_none=True)
        sums.reset()
        return finite

    def pop_train_metrics(self) -> dict[str, float]:
        """Synchronise once, turn the logging interval into metrics, start a new one."""
        self.sync()
        self.settle_skips()
        lr, flops, norm = self.current_lr(), self.state.flops_per_sample, self.last_grad_norm
        return self.meter.report(self.task, lr=lr, flops_per_sample=flops, grad_norm=norm)

    def evaluate(self) -> dict[str, float]:
        """Full validation; the loop tracks the best value and emits `on_eval_end` ({} and
        no event when a stop request cut the pass short: the graceful stop saves the step)."""
        metrics = self.validation.full()
        if metrics:
            self.best.full(metrics, self.state.global_step, self.state.epoch)
            self.last_val = metrics
            self.emit("on_eval_end", metrics)
        return metrics

    def evaluate_fast(self) -> tuple[dict[str, float], bool]:
        """Validation on the fixed subset: (metrics, improved); emits `on_fast_eval_end`."""
        metrics = self.validation.fast()
        improved = bool(metrics) and self.best.fast(metrics)
        if metrics:
            self.emit("on_fast_eval_end", metrics)
        return metrics, improved

    def save_checkpoint(self, name: str, *, wait: bool = False) -> Path:
        """Save every part as checkpoint `name` (`Checkpointer.save`); the loop stalls only
        for the copy to CPU memory, which is paused out of the throughput meter."""
        paused_from = self.meter.clock()  # this module's clock, which times the whole loop
        self.settle_skips()  # the skip counters go into the checkpoint
        self.outcome.last_checkpoint_step = self.state.global_step  # every rank, every save
        self.checkpointer.writer.wait()  # the copy buffers are free again
        self.state.train_time_s = self.elapsed_s()
        self.restart_clock()
        folder, reported = self.checkpointer.save(name, wait=wait, step=self.state.global_step)
        self.outcome.last_checkpoint = folder
        if reported:
            self.meter.paused_s += self.meter.clock() - paused_from
            self.emit("on_save", folder)
        return folder

    def load_checkpoint(self, folder: Path) -> dict[str, Any]:
        """Restore every part from `folder` (`Checkpointer.restore`); the checkpoint's meta."""
        sampler = self.task.train_loader.batch_sampler
        meta, self.resume_guarantee = self.checkpointer.restore(
            folder, self.setup, self.state, sampler
        )
        return meta
