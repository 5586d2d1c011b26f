"""The training loop: one loop for every task.

`Trainer` trains: `fit`, the epoch loop, forward/backward and the optimizer step, with
gradient accumulation and precision. It emits events; everything else (evaluation and
checkpoint cadence, time limit, signals, logging, progress) is a callback. Its parts are
small classes that own their state: model preparation (`engine.prepare`), the non-finite
guard and the settling of its device-side skips (`engine.guard`), the training meters
(`engine.meters`), the validation passes and the best tracker (`engine.evaluate`), the
schedule (`engine.schedule`). Every part with state is registered once in the state
registry (`engine.stateful`), which the checkpointer (`engine.checkpointer`) saves and
restores; the registration, the checkpoint meta, the save and the restore are
`engine.resumable`'s, the FLOP count's start `engine.meters'`.

Gradient accumulation weights each micro-batch's mean loss by its item count and divides
the summed gradients by the window's total, so a window of any shape (including a short
last window) gives the same update as one batch holding the same samples.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch

from trainforge import parallel
from trainforge.config.schema import RunConfig
from trainforge.engine import resumable, stop
from trainforge.engine.callbacks import Callback, listeners
from trainforge.engine.checkpointer import Checkpointer
from trainforge.engine.evaluate import BestTracker, Validation, evaluate_fast, evaluate_full
from trainforge.engine.gradients import finish_gradients, folds_clipping
from trainforge.engine.guard import NonFiniteGuard, settle_skips, stop_if_diverged
from trainforge.engine.meters import NO_COUNT, AccumulationSums, TrainMeter, as_flops, flop_counter
from trainforge.engine.optimizers import build_optimizer
from trainforge.engine.precision import PrecisionPlan
from trainforge.engine.prepare import prepare_model
from trainforge.engine.schedule import build_run_schedule
from trainforge.engine.state import FitResult, TrainerState, plan_steps
from trainforge.engine.stateful import ModelState
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
        t = config.training
        self.accumulation = t.gradient_accumulation_steps
        self.dist = parallel.context()
        # One micro-batch per optimizer step on one process: gradients of the mean loss are
        # already the step's gradients; otherwise micro-batches are weighted by item count.
        self._mean_backward = self.accumulation == 1 and not self.dist.enabled
        self.prepared = prepare_model(task.model, config, device)
        self.model, self.forward_model = self.prepared.model, self.prepared.forward
        self.sharded = self.prepared.sharded
        self.precision = PrecisionPlan.create(t.precision, device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.model, config.optimizer, device, sharded=self.sharded)
        self.steps_per_epoch, self.total_steps = plan_steps(t, len(task.train_loader))
        self.scheduler, self.schedule_note = build_run_schedule(
            self.optimizer, config, self.steps_per_epoch, self.total_steps
        )
        self.state = TrainerState()
        self.guard = NonFiniteGuard.for_run(self.state.nonfinite, t, device, self.optimizer)
        e = config.evaluation
        self.best = BestTracker(self.state.best, e.metric_for_best_model, e.greater_is_better)
        self.meter = TrainMeter(lambda: time.perf_counter())  # this module's clock: one for all
        self.accumulation_sums = AccumulationSums(self.params, device)
        self.checkpointer = Checkpointer(
            resumable.state_registry(self), root=run_dir / "checkpoints", sharded=self.sharded,
            describe=lambda: resumable.checkpoint_meta(self), config_yaml=config_yaml,
            settings=config.checkpoint, optimizer=self.optimizer,
        )  # fmt: skip
        self.last_grad_norm: torch.Tensor | None = None
        self.last_step_loss: torch.Tensor | None = None
        self.last_checkpoint: Path | None = None
        self.last_checkpoint_step: int | None = None
        self.last_val: dict[str, float] = {}
        self.validation = Validation(
            task, self.prepared, device=device, precision=self.precision,
            distributed=self.dist.enabled, meter=self.meter,
            fast_fraction=config.evaluation.fast_eval_fraction,
        )  # fmt: skip
        # MFU: the table's (or configured) peak and the measured one (hardware.peak_probe).
        self.peak_flops = as_flops(peak_tflops)
        self.measured_peak_flops = as_flops(measured_peak_tflops)
        self.should_stop, self.stop_reason, self.stop_signal = False, "finished", None
        self.interrupted = self.diverged = False
        self._clock_start = time.monotonic()
        self.resume_guarantee: tuple[str, list[str]] | None = None  # set by load_checkpoint

    # ----------------------------------------------------------------- set-up
    def emit(self, event: str, *args: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, event)(self, *args)

    def elapsed_s(self) -> float:
        return self.state.train_time_s + time.monotonic() - self._clock_start

    def restart_clock(self) -> None:
        self._clock_start = time.monotonic()

    def stop(self, reason: str) -> None:
        self.should_stop = True
        self.stop_reason = reason

    def all_steps_done(self) -> bool:
        """All optimizer steps taken. Device-side skips are settled first (one read, at the
        end only): they give their steps back, and the run trains on to the real total."""
        if self.state.global_step < self.total_steps:
            return False
        settle_skips(self)
        return self.state.global_step >= self.total_steps

    def step_due(self, every: int | None) -> bool:
        """Whether the step just taken is a multiple of `every` (cadence callbacks). A due
        step settles device-side skips first, so cadence follows the real steps; the
        checkpoint or evaluation it triggers reads from the device anyway."""
        if not every or self.state.global_step % every:
            return False
        settle_skips(self)
        return self.state.global_step % every == 0

    @property
    def num_epochs(self) -> int:
        return math.ceil(self.total_steps / self.steps_per_epoch)

    def current_lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    # ------------------------------------------------------------------ loop
    def fit(self) -> FitResult:
        with resumable.leaving(self):
            return self._fit()

    def _fit(self) -> FitResult:
        self.restart_clock()
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
        settle_skips(self)
        parallel.barrier()
        self.state.train_time_s = self.elapsed_s()
        self.restart_clock()
        self.emit("on_fit_end")
        return FitResult(self.state, dict(self.last_val), self.stop_reason, self.interrupted)

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
            stop_if_diverged(self)
        self.optimizer.zero_grad(set_to_none=True)
        sums.reset()
        return finite

    def pop_train_metrics(self) -> dict[str, float]:
        """Synchronise once, turn the logging interval into metrics, start a new one."""
        self.sync()
        settle_skips(self)
        return self.meter.report(
            self.task, lr=self.current_lr(), flops_per_sample=self.state.flops_per_sample,
            peak_flops=self.peak_flops, measured_peak_flops=self.measured_peak_flops,
            grad_norm=self.last_grad_norm,
        )  # fmt: skip

    # ------------------------------------------------------------ evaluation
    evaluate = evaluate_full  # engine.evaluate: full validation, emits on_eval_end
    evaluate_fast = evaluate_fast  # validation on the fixed subset, emits on_fast_eval_end

    # ----------------------------------------------------------- checkpoints
    def save_checkpoint(self, name: str, *, wait: bool = False) -> Path:
        """Save every registered part as checkpoint `name` (`engine.resumable.save`)."""
        return resumable.save(self, name, wait=wait)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model's weights on CPU (gathered from the shards under FSDP; a
        collective then: every rank calls it, rank 0 gets the tensors)."""
        return ModelState(self.model, self.sharded).full_state_dict()

    def load_checkpoint(self, folder: Path) -> dict[str, Any]:
        """Restore every registered part from `folder`; returns the checkpoint's meta
        (`engine.resumable.restore`: exact on the same setup, moved on another split)."""
        return resumable.restore(self, folder)
