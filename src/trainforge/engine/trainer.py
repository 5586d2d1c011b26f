"""The training loop: one loop for every task.

It owns the model on its device, the optimizer, the schedule, precision and gradient
accumulation, and emits events; everything else (evaluation and checkpoint cadence, time
limit, signals, logging, progress) is a callback. Gradient accumulation weights each
micro-batch's mean loss by its item count and divides the summed gradients by the window's
total, so a window of any shape (including a short last window) gives the same update as
one batch holding the same samples.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainforge import parallel
from trainforge.config.schema import RunConfig
from trainforge.engine import checkpoint as ckpt
from trainforge.engine.callbacks import Callback
from trainforge.engine.optimizers import build_optimizer
from trainforge.engine.precision import Precision
from trainforge.engine.schedule import build_scheduler, fit_warmup
from trainforge.engine.state import TrainerState, capture_rng, restore_rng
from trainforge.engine.task import Task
from trainforge.errors import UserError


@dataclass
class FitResult:
    state: TrainerState
    final_metrics: dict[str, float]
    stop_reason: str
    interrupted: bool


def _to_bytes(obj: Any) -> bytes:
    import io

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _from_bytes(data: bytes) -> Any:
    import io

    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


class _NoCount:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_COUNT = _NoCount()


def fixed_subset_loader(loader: Any, fraction: float) -> Any:
    """A loader over an evenly spaced `fraction` of `loader`'s data set, in a fixed order."""
    from torch.utils.data import DataLoader, Subset

    dataset = loader.dataset
    total = len(dataset)
    count = max(1, round(total * fraction))
    indices = torch.linspace(0, total - 1, count).round().long().unique().tolist()
    return DataLoader(
        Subset(dataset, indices),
        batch_size=loader.batch_size,
        shuffle=False,
        collate_fn=loader.collate_fn,
        num_workers=0,
    )


class StepSums:
    """Running sums over the micro-batches of the current optimizer step (its window).

    Kept as device tensors; they (and the partial gradients) go into a checkpoint taken in
    the middle of an accumulation window, so resume continues the window exactly.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.micro = 0  # micro-batches accumulated so far in this window
        self.weight = 0
        self.samples = 0
        self.loss_sum: torch.Tensor | float = 0.0
        self.sums: dict[str, torch.Tensor] = {}

    def add(self, weighted: torch.Tensor, out: Any, samples: int) -> None:
        """Add a micro-batch: `weighted` is its detached loss times its weight, or, when the
        window is this one micro-batch (`Trainer._mean_backward`), its detached mean loss."""
        self.micro += 1
        self.weight += out.weight
        self.samples += samples
        self.loss_sum = weighted if self.micro == 1 else self.loss_sum + weighted
        for key, value in out.sums.items():
            value = value.detach()
            self.sums[key] = self.sums[key] + value if key in self.sums else value

    def state_dict(self, params: list[nn.Parameter]) -> dict[str, Any] | None:
        if self.micro == 0:
            return None
        return {
            "micro": self.micro,
            "weight": self.weight,
            "samples": self.samples,
            "loss_sum": torch.as_tensor(self.loss_sum),
            "sums": dict(self.sums),
            "grads": [p.grad for p in params],
        }

    def load_state_dict(
        self, state: dict[str, Any] | None, params: list[nn.Parameter], device: torch.device
    ) -> None:
        self.reset()
        if not state:
            return
        self.micro, self.weight, self.samples = state["micro"], state["weight"], state["samples"]
        self.loss_sum = state["loss_sum"].to(device)
        self.sums = {k: v.to(device) for k, v in state["sums"].items()}
        for param, grad in zip(params, state["grads"], strict=True):
            param.grad = None if grad is None else grad.to(device=device, dtype=param.dtype)


class Window:
    """The training steps since the last logging point.

    Each step's loss tensor is kept as it is (its weighted sum, or its mean with the weight
    as multiplier) and the losses are combined once, at the logging point: no tensor
    arithmetic per step, and the window's total is summed in float64 on the host.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.losses: list[torch.Tensor] = []
        self.multipliers: list[int] = []
        self.weight = 0
        self.samples = 0
        self.steps = 0
        self.skipped = 0
        self.sums: dict[str, torch.Tensor] = {}
        self.data_s = 0.0
        self.paused_s = 0.0  # evaluation and checkpoint copies: not training time
        self.started = time.perf_counter()

    def fold(self, step: StepSums, mean: bool) -> None:
        """Add a finished step; `mean`: its loss_sum is the step's mean loss."""
        self.losses.append(step.loss_sum)  # type: ignore[arg-type]
        self.multipliers.append(step.weight if mean else 1)
        self.weight += step.weight
        self.samples += step.samples
        self.steps += 1
        for key, value in step.sums.items():
            self.sums[key] = self.sums[key] + value if key in self.sums else value

    def loss_sum(self) -> float:
        """The window's loss summed over its items (one read of every step's loss)."""
        if not self.losses:
            return 0.0
        values = torch.stack([loss.reshape(()) for loss in self.losses]).tolist()
        return math.fsum(v * m for v, m in zip(values, self.multipliers, strict=True))


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
        sync: Callable[[], None] | None = None,
        peak_tflops: float | None = None,
    ) -> None:
        self.task = task
        self.config = config
        self.run_dir = run_dir
        self.device = device
        self.callbacks = callbacks
        self.config_yaml = config_yaml
        self.config_hash = config_hash
        self.sync = sync or (torch.cuda.synchronize if device.type == "cuda" else (lambda: None))
        t = config.training
        self.accumulation = t.gradient_accumulation_steps
        # One micro-batch per optimizer step on one process: gradients of the mean loss are
        # already the step's gradients; otherwise micro-batches are weighted by item count.
        self._mean_backward = self.accumulation == 1 and not parallel.context().enabled
        self.model: nn.Module = task.model.to(device)
        if device.type == "cuda":
            torch.backends.cudnn.benchmark = t.cudnn_benchmark
        if t.channels_last:  # 4-D weights (convolutions) only; inputs follow in the task
            self.model = self.model.to(memory_format=torch.channels_last)
        if t.gradient_checkpointing:  # a ViT of ours or a Hugging Face model
            from trainforge.models.hf import enable_checkpointing

            enable_checkpointing(self.model)
        self.dist = parallel.context()
        self.sharded = self.dist.enabled and config.hardware.data_parallel == "fsdp"
        wrapped: nn.Module = self.model
        if self.sharded:
            from torch.distributed.fsdp import fully_shard

            # One FSDP unit per block of every ModuleList (transformer layers), then the rest.
            for module in list(self.model.modules()):
                if isinstance(module, nn.ModuleList):
                    for block in module:
                        fully_shard(block)
            fully_shard(self.model)
        elif self.dist.enabled:
            from torch.nn.parallel import DistributedDataParallel

            ids = [device.index] if device.type == "cuda" else None
            wrapped = DistributedDataParallel(self.model, device_ids=ids)
        self.forward_model: nn.Module = torch.compile(wrapped) if t.compile else wrapped
        self.precision = Precision.create(t.precision, device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.model, config.optimizer, device, sharded=self.sharded)
        # CUDA with fused AdamW: the finite check stays on the GPU. The fused kernel skips a
        # non-finite step by itself (its `found_inf` input), and the skips are counted on
        # the device and read at logging points, so no step waits for the GPU. Until that
        # read (`settle_nonfinite`) a skipped step counts as a step (global_step, schedule);
        # settling takes it back out, so from then on the run equals one that never saw it.
        # Under fp16 the grad scaler feeds the kernel its own `found_inf` (overflowing
        # gradients, which a non-finite loss produces too) and its skips stay counted.
        self.device_skip = device.type == "cuda" and bool(self.optimizer.defaults.get("fused"))
        # [skipped steps, their loss weight] since the last settle, and the current streak
        self._skipped_dev: torch.Tensor | None = None
        self._consecutive_dev: torch.Tensor | None = None
        self.steps_per_epoch = math.ceil(len(task.train_loader) / self.accumulation)
        if t.max_steps > 0:
            self.total_steps = t.max_steps
        else:
            self.total_steps = max(1, math.ceil(t.num_train_epochs * self.steps_per_epoch))
        schedule, self.schedule_note = fit_warmup(
            config.schedule, self.steps_per_epoch, self.total_steps
        )
        self.scheduler = build_scheduler(
            self.optimizer,
            schedule,
            peak_lr=config.optimizer.learning_rate,
            total_steps=self.total_steps,
            steps_per_epoch=self.steps_per_epoch,
        )
        self.state = TrainerState()
        self.window = Window()
        self.step_sums = StepSums()
        self.writer = ckpt.CheckpointWriter(
            background=config.checkpoint.async_save, on_error=config.checkpoint.on_save_error
        )
        self._snapshot = ckpt.Snapshot()
        self.last_grad_norm: torch.Tensor | None = None
        self.last_step_loss: torch.Tensor | None = None
        self.last_checkpoint: Path | None = None
        self.last_checkpoint_step: int | None = None
        self.stop_signal: str | None = None
        self.diverged = False
        # MFU: the device peak; the model FLOPs of one training sample (forward + backward)
        # are counted with torch.utils.flop_counter on the run's first micro-batch and kept
        # in the trainer state, so a resumed run never counts (counting can change kernel
        # choices, and resume must replay exactly what the uninterrupted run computed).
        self.peak_flops = peak_tflops * 1e12 if peak_tflops else None
        self._fast_val_loader: Any = None
        self.last_val: dict[str, float] = {}
        self.should_stop = False
        self.stop_reason = "finished"
        self.interrupted = False
        self._clock_start = time.monotonic()

    # ----------------------------------------------------------------- set-up
    def emit(self, event: str, *args: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, event)(self, *args)

    def elapsed_s(self) -> float:
        return self.state.train_time_s + time.monotonic() - self._clock_start

    def stop(self, reason: str) -> None:
        self.should_stop = True
        self.stop_reason = reason

    def is_last_epoch(self) -> bool:
        return self._steps_done()

    def _steps_done(self) -> bool:
        """All optimizer steps taken. Device-side skips are settled first (one read, at the
        end only): they give their steps back, and the run trains on to the real total."""
        if self.state.global_step < self.total_steps:
            return False
        self.settle_nonfinite()
        return self.state.global_step >= self.total_steps

    def step_due(self, every: int | None) -> bool:
        """Whether the step just taken is a multiple of `every` (cadence callbacks). A due
        step settles device-side skips first, so cadence follows the real steps; the
        checkpoint or evaluation it triggers reads from the device anyway."""
        if not every or self.state.global_step % every:
            return False
        self.settle_nonfinite()
        return self.state.global_step % every == 0

    @property
    def num_epochs(self) -> int:
        return math.ceil(self.total_steps / self.steps_per_epoch)

    def current_lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    # ------------------------------------------------------------------ loop
    def fit(self) -> FitResult:
        self._clock_start = time.monotonic()
        if self.window.steps == 0:
            # The first logging window starts here, not when the trainer was built: building
            # the model and loading a checkpoint are not training time.
            self.window.reset()
        self.emit("on_fit_start")
        while not self._steps_done() and not self.should_stop:
            self.emit("on_epoch_start")
            if self.should_stop:
                break
            if self._train_epoch():
                self.state.epoch += 1
                self.state.batch_in_epoch = 0
                self.emit("on_epoch_end")
        self.writer.wait()  # every checkpoint is on disk before fit returns
        self.settle_nonfinite()
        parallel.barrier()
        self.state.train_time_s = self.elapsed_s()
        self._clock_start = time.monotonic()
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
        while True:
            fetch_start = time.perf_counter()
            try:
                raw = next(batches)
            except StopIteration:
                return True
            batch = self.task.to_device(raw, self.device, True)
            self.window.data_s += time.perf_counter() - fetch_start
            counter = self._flop_counter()
            closes = (
                self.step_sums.micro + 1 >= self.accumulation
                or self.state.batch_in_epoch + 1 >= num_batches
            )
            with counter, self._no_sync(not closes):
                counting = counter is not _NO_COUNT and not self.dist.enabled
                model = self.model if counting else self.forward_model
                with self.precision.autocast():
                    out = self.task.step(model, batch)
                loss = out.loss if out.loss.dtype == torch.float32 else out.loss.float()
                if self._mean_backward:
                    # The window is this one micro-batch: its mean loss is the step's loss,
                    # so backward on it directly (no weighting on the way in or out), and
                    # the step's sums keep the mean itself (no multiply, no divide).
                    weighted = loss.detach()
                else:
                    loss = loss * out.weight
                    weighted = loss.detach()
                if self.precision.scaler is not None:
                    self.precision.scaler.scale(loss).backward()
                else:
                    loss.backward()
            samples = self.task.batch_size(raw)
            if counter is not _NO_COUNT:
                self.flops_per_sample = counter.get_total_flops() / samples
            self.step_sums.add(weighted, out, samples)
            self.state.samples_seen += samples
            self.state.batch_in_epoch += 1
            epoch_done = self.state.batch_in_epoch >= num_batches
            if (self.step_sums.micro >= self.accumulation or epoch_done) and self._optimizer_step():
                self.writer.check()  # a background save the disk refused stops the run here
                self.emit("on_step_end")
            self.emit("on_batch_end")
            if epoch_done:
                next(batches, None)  # exhaust so the loader's saved state marks the epoch done
                return True
            if self._steps_done() or self.should_stop:  # settling may stop a diverged run
                return False

    def _no_sync(self, skip_reduce: bool) -> Any:
        """DDP/FSDP: reduce gradients once per optimizer step, not once per micro-batch."""
        if self.sharded:
            self.model.set_requires_gradient_sync(not skip_reduce)
            return _NO_COUNT
        if skip_reduce and self.dist.enabled:
            ddp = self.forward_model
            ddp = getattr(ddp, "_orig_mod", ddp)  # under torch.compile
            return ddp.no_sync()
        return _NO_COUNT

    @property
    def flops_per_sample(self) -> float | None:
        return self.state.flops_per_sample

    @flops_per_sample.setter
    def flops_per_sample(self, value: float | None) -> None:
        self.state.flops_per_sample = value

    def _flop_counter(self) -> Any:
        s = self.state
        if s.flops_per_sample is not None or s.global_step or s.batch_in_epoch or s.epoch:
            return _NO_COUNT
        from torch.utils.flop_counter import FlopCounterMode

        self.flops_per_sample = 0.0  # counted once, even if counting fails below
        return FlopCounterMode(display=False)

    def _optimizer_step(self) -> bool:
        """Apply the window's update; False when it was skipped for a non-finite value."""
        sums = self.step_sums
        scaler = self.precision.scaler
        if scaler is not None:
            scaler.unscale_(self.optimizer)
        grads = [p.grad for p in self.params if p.grad is not None]
        loss_sum = sums.loss_sum
        if not isinstance(loss_sum, torch.Tensor):
            loss_sum = torch.tensor(float(loss_sum), device=self.device)
        if self.dist.enabled:
            # DDP averaged the summed gradients over ranks; weight by the global item count.
            totals = torch.stack([loss_sum.reshape(()), loss_sum.new_tensor(float(sums.weight))])
            parallel.all_reduce_sum(totals)
            loss_sum, weight = totals[0], totals[1]
            if grads and self.sharded:  # DTensor gradients take a plain number
                torch._foreach_mul_(grads, float(self.dist.world_size / weight))
            elif grads:
                torch._foreach_mul_(grads, self.dist.world_size / weight)
        else:
            weight = max(1, sums.weight)
            if grads and not self._mean_backward:
                torch._foreach_mul_(grads, 1.0 / weight)
        t = self.config.training
        norm = None
        if t.max_grad_norm is not None:
            norm = nn.utils.clip_grad_norm_(self.params, t.max_grad_norm, foreach=True)
        elif t.skip_nonfinite_steps and grads and scaler is None:
            norm = nn.utils.get_total_norm(grads, foreach=True)
        step_loss = loss_sum if self._mean_backward else loss_sum / weight
        if self.sharded and norm is not None and hasattr(norm, "full_tensor"):  # a DTensor
            norm = norm.full_tensor()
        finite = True
        if t.skip_nonfinite_steps:
            # Host mode: one scalar read per step. Under fp16 the grad scaler already skips
            # steps with overflowing gradients, so only the loss decides there (on CUDA the
            # scaler alone decides, inside the fused kernel, with no read).
            # loss + norm is finite exactly when both are (short of a sum overflowing
            # float32, which only a diverged run reaches): one kernel, one read.
            check = step_loss if norm is None or scaler is not None else step_loss + norm
            if self.device_skip and scaler is None:
                bad = (~torch.isfinite(check)).to(torch.float32)
                self.optimizer.found_inf = bad  # type: ignore[attr-defined]
                self._count_device_skip(bad, sums)
            elif not self.device_skip:
                finite = math.isfinite(float(check))
        if finite:
            if scaler is not None:
                scaler.step(self.optimizer)
                scaler.update()
            else:
                self.optimizer.step()
                if self.device_skip:
                    self.optimizer.found_inf = None  # type: ignore[attr-defined]
            self.scheduler.step()
            self.state.global_step += 1
            if not self.device_skip:  # else counted on the device, read when settling
                self.state.consecutive_nonfinite = 0
            self.last_grad_norm = norm
            self.last_step_loss = step_loss  # detached: built from detached losses
            self.window.fold(sums, self._mean_backward)
        else:
            if scaler is not None:
                scaler.update()
            self._skip_nonfinite()
        self.optimizer.zero_grad(set_to_none=True)
        sums.reset()
        return finite

    def _count_device_skip(self, bad: torch.Tensor, sums: StepSums) -> None:
        """Count a possibly skipped step on the device, and keep its loss and sums out of
        the logging window (a NaN would spoil the window's mean); its weight is taken out
        of the window when settling."""
        if self._skipped_dev is None or self._consecutive_dev is None:
            self._skipped_dev = torch.zeros(2, dtype=torch.float64, device=bad.device)
            # A streak carried in from a checkpoint continues (a host number, no read).
            self._consecutive_dev = bad * 0 + self.state.consecutive_nonfinite
        self._skipped_dev[0].add_(bad)
        self._skipped_dev[1].add_(bad, alpha=sums.weight)
        # consecutive = (consecutive + 1) on a skip, 0 otherwise
        self._consecutive_dev.add_(bad).mul_(bad)
        keep = bad == 0
        if isinstance(sums.loss_sum, torch.Tensor):
            sums.loss_sum = torch.where(keep, sums.loss_sum, 0.0)
        sums.sums = {k: torch.where(keep, v, torch.zeros_like(v)) for k, v in sums.sums.items()}

    def _rewind_schedule(self, num_steps: int) -> None:
        """Take `num_steps` skipped steps back out of the LR schedule: the same rates the
        scheduler computes for that step (LambdaLR: base rate times the multiplier)."""
        s = self.scheduler
        s.last_epoch -= num_steps
        s._step_count -= num_steps  # so its state_dict equals the clean run's as well
        lrs = [base * fn(s.last_epoch) for base, fn in zip(s.base_lrs, s.lr_lambdas, strict=True)]
        for group, lr in zip(self.optimizer.param_groups, lrs, strict=True):
            group["lr"] = lr
        s._last_lr = lrs

    def settle_nonfinite(self) -> None:
        """Device-side finite check: read the skips counted since the last call (one read,
        at a logging point, a checkpoint, a due cadence step or the end), take them back
        out of the step counter and the schedule, and stop a run that keeps diverging."""
        if self._skipped_dev is None or self._consecutive_dev is None:
            return
        counts = torch.cat([self._skipped_dev, self._consecutive_dev.reshape(1).double()])
        skipped, skipped_weight, consecutive = (int(v) for v in counts.tolist())
        self._skipped_dev.zero_()
        s = self.state
        s.consecutive_nonfinite = consecutive
        if not skipped:
            return
        # The kernel left parameters, moments and its step counters untouched; the counter
        # and the schedule went on, so they go back: from here on the run equals one that
        # never saw the bad steps (fused AdamW's own step counters were never advanced).
        s.global_step -= skipped
        self._rewind_schedule(skipped)
        s.nonfinite_steps += skipped
        self.window.skipped += skipped
        self.window.weight -= skipped_weight
        print(
            f"step {s.global_step}: {skipped} optimizer step(s) skipped since the last report "
            f"for a non-finite loss or gradient ({consecutive} in a row, {s.nonfinite_steps} "
            "in total)"
        )
        limit = self.config.training.max_consecutive_nonfinite_steps
        if consecutive >= limit:
            self.diverged = True
            self.stop(f"diverged: {limit} consecutive steps with a non-finite loss or gradient")

    def _skip_nonfinite(self) -> None:
        s = self.state
        s.nonfinite_steps += 1
        s.consecutive_nonfinite += 1
        self.window.skipped += 1
        limit = self.config.training.max_consecutive_nonfinite_steps
        print(
            f"step {s.global_step + 1}: non-finite loss or gradient, optimizer step skipped "
            f"({s.consecutive_nonfinite} in a row, {s.nonfinite_steps} in total)"
        )
        if s.consecutive_nonfinite >= limit:
            self.diverged = True
            self.stop(f"diverged: {limit} consecutive steps with a non-finite loss or gradient")

    def pop_train_metrics(self) -> dict[str, float]:
        """Synchronise once, turn the window's sums into metrics, start a new window."""
        self.sync()
        self.settle_nonfinite()
        w = self.window
        wall_s = max(time.perf_counter() - w.started - w.paused_s, 1e-9)
        if w.weight == 0:
            w.reset()
            return {}
        loss_sum, weight, samples, data_s = w.loss_sum(), w.weight, w.samples, w.data_s
        sums = {k: float(v) for k, v in w.sums.items()}
        if self.dist.enabled:  # metrics over all ranks; time shares averaged
            keys = sorted(sums)
            values = [loss_sum, weight, samples, data_s, *(sums[k] for k in keys)]
            totals = parallel.all_reduce_sum(torch.tensor(values, dtype=torch.float64)).tolist()
            loss_sum, weight, samples = totals[0], int(totals[1]), int(totals[2])
            data_s = totals[3] / self.dist.world_size
            sums = dict(zip(keys, totals[4:], strict=True))
        metrics = self.task.metrics(loss_sum, weight, sums)
        metrics.update(
            {
                "lr": self.current_lr(),
                "samples_per_s": samples / wall_s,
                "step_time_s": wall_s / max(1, w.steps),
                "data_wait_share": min(1.0, data_s / wall_s),
                "compute_time_s": max(0.0, wall_s - data_s) / max(1, w.steps),
            }
        )
        if self.task.items_name == "tokens":
            metrics["tokens_per_s"] = weight / wall_s
        if self.flops_per_sample:
            achieved = self.flops_per_sample * samples / wall_s
            metrics["model_tflops"] = achieved / 1e12
            if self.peak_flops:
                metrics["mfu"] = achieved / self.peak_flops
        if self.last_grad_norm is not None:
            metrics["grad_norm"] = float(self.last_grad_norm)
        if w.skipped:
            metrics["nonfinite_steps"] = float(w.skipped)
        w.reset()
        return metrics

    # ------------------------------------------------------------ evaluation
    @torch.no_grad()
    def _run_eval(self, loader: Any) -> dict[str, float]:
        started = time.perf_counter()
        self.model.eval()
        loss_sum, weight, sums = 0.0, 0, {}
        for raw in loader:
            batch = self.task.to_device(raw, self.device, False)
            with self.precision.autocast():
                out = self.task.step(self.forward_model, batch)
            loss_sum = loss_sum + out.loss.float() * out.weight
            weight += out.weight
            for key, value in out.sums.items():
                sums[key] = sums.get(key, 0) + value
        self.model.train()
        loss_sum, sums = float(loss_sum), {k: float(v) for k, v in sums.items()}
        if self.dist.enabled:  # each rank validated its own shard
            keys = sorted(sums)
            values = [loss_sum, weight, *(sums[k] for k in keys)]
            totals = parallel.all_reduce_sum(torch.tensor(values, dtype=torch.float64)).tolist()
            loss_sum, weight = totals[0], int(totals[1])
            sums = dict(zip(keys, totals[2:], strict=True))
        metrics = self.task.metrics(loss_sum, weight, sums)
        self.window.paused_s += time.perf_counter() - started
        return metrics

    def evaluate(self) -> dict[str, float]:
        """Full validation; tracks the best metric and emits `on_eval_end`."""
        metrics = self._run_eval(self.task.val_loader)
        self._track_best(metrics)
        self.last_val = metrics
        self.emit("on_eval_end", metrics)
        return metrics

    def evaluate_fast(self) -> tuple[dict[str, float], bool]:
        """Validation on a fixed subset (the same samples every time); (metrics, improved).

        Emits `on_fast_eval_end`; the best checkpoint is decided by full validation only.
        """
        if self._fast_val_loader is None:
            self._fast_val_loader = fixed_subset_loader(
                self.task.val_loader, self.config.evaluation.fast_eval_fraction
            )
        metrics = self._run_eval(self._fast_val_loader)
        key = self.config.evaluation.metric_for_best_model
        greater = self._greater_is_better()
        value = metrics[key]
        best = self.state.best_fast
        improved = best is None or (value > best if greater else value < best)
        if improved:
            self.state.best_fast = value
        self.emit("on_fast_eval_end", metrics)
        return metrics, improved

    def _greater_is_better(self) -> bool:
        e = self.config.evaluation
        if e.greater_is_better is not None:
            return e.greater_is_better
        return e.metric_for_best_model == "accuracy"

    def _track_best(self, metrics: dict[str, float]) -> None:
        e = self.config.evaluation
        value = metrics[e.metric_for_best_model]
        greater = self._greater_is_better()
        best = self.state.best_metric
        improved = best is None or (value > best if greater else value < best)
        self.state.improved = improved
        if improved:
            self.state.best_metric = value
            self.state.best_step = self.state.global_step
            self.state.best_epoch = self.state.epoch

    # ----------------------------------------------------------- checkpoints
    def save_checkpoint(self, name: str, *, wait: bool = False) -> Path:
        """Copy the full training state to CPU memory, then write it (on the background
        thread unless `checkpoint.async_save` is off or `wait`). The loop stalls only for
        the copy. Weights holding NaN or Inf are never written: the write is dropped with
        one line and the previous checkpoints stay the newest."""
        paused_from = time.perf_counter()
        self.settle_nonfinite()  # the skip counters go into the checkpoint
        self.last_checkpoint_step = self.state.global_step  # every rank, every save path
        self.writer.wait()  # the copy buffers are free again
        self.state.train_time_s = self.elapsed_s()
        self._clock_start = time.monotonic()
        scheduler = self.scheduler.state_dict()
        scheduler.pop("lr_lambdas", None)  # the schedule's shape comes from the config
        root = self.run_dir / "checkpoints"
        folder = root / name
        if self.sharded:
            return self._save_sharded(name, root, scheduler, paused_from)
        if self.dist.enabled:
            # Rank 0 writes; every rank's own loader position and RNG go in with it.
            own = {"train_loader": self.task.train_loader.state_dict(), "rng": capture_rng()}
            per_rank = [_from_bytes(b) for b in parallel.gather_objects(_to_bytes(own))]
            if not self.dist.is_main:
                self.last_checkpoint = folder
                if wait:
                    parallel.barrier()
                return folder
        model_state, state = self._snapshot.copy(
            (
                self.model.state_dict(),
                {
                    "optimizer": self.optimizer.state_dict(),
                    "scheduler": scheduler,
                    "scaler": self.precision.scaler.state_dict() if self.precision.scaler else None,
                    "train_loader": self.task.train_loader.state_dict(),
                    "trainer": self.state.state_dict(),
                    "accumulation": self.step_sums.state_dict(self.params),
                    "rng": capture_rng(),
                    "world_size": self.dist.world_size,
                    "per_rank": per_rank if self.dist.enabled else None,
                },
            )
        )
        meta = self._meta(name)
        keep = self.config.checkpoint.save_total_limit
        config_yaml = self.config_yaml

        def write() -> None:
            if not ckpt.all_finite(model_state):
                print(f"checkpoint {name} not written: the model weights hold NaN or Inf")
                return
            ckpt.save_checkpoint(
                folder, model_state=model_state, state=state, meta=meta, config_yaml=config_yaml
            )
            ckpt.write_run_meta(root, meta)
            ckpt.rotate(root, keep)

        self.writer.submit(write)
        if wait:
            self.writer.wait()
            parallel.barrier()
        self.window.paused_s += time.perf_counter() - paused_from
        self.last_checkpoint = folder
        self.emit("on_save", folder)
        return folder

    def _meta(self, name: str) -> dict[str, Any]:
        return {
            "name": name,
            "epoch": self.state.epoch,
            "global_step": self.state.global_step,
            "batch_in_epoch": self.state.batch_in_epoch,
            "micro_batch_in_window": self.step_sums.micro,
            "best_val": self.state.best_metric,
            "best_metric": self.config.evaluation.metric_for_best_model,
            "best_step": self.state.best_step,
            "best_epoch": self.state.best_epoch,
            "config_hash": self.config_hash,
            "timestamp": datetime.now(UTC).isoformat(timespec="microseconds"),
            "versions": ckpt.library_versions(),
            "world_size": self.dist.world_size,
            "sharded": self.sharded,
        }

    def _save_sharded(self, name: str, root: Path, scheduler: dict, paused_from: float) -> Path:
        """FSDP: every rank writes its shards with torch.distributed.checkpoint into the
        temporary folder; rank 0 adds the rest and commits it. Synchronous."""
        import shutil

        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        folder = root / name
        tmp = root / f".tmp-{name}-sharded"
        if self.dist.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        parallel.barrier()
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(tmp / "dcp"))
        own = {"train_loader": self.task.train_loader.state_dict(), "rng": capture_rng()}
        per_rank = [_from_bytes(b) for b in parallel.gather_objects(_to_bytes(own))]
        if self.dist.is_main:
            state = {
                "scheduler": scheduler,
                "scaler": self.precision.scaler.state_dict() if self.precision.scaler else None,
                "trainer": self.state.state_dict(),
                "accumulation": None,
                "world_size": self.dist.world_size,
                "per_rank": per_rank,
            }
            meta = self._meta(name)
            ckpt.save_checkpoint(
                folder, model_state=None, state=state, meta=meta, config_yaml=self.config_yaml,
                tmp=tmp,
            )  # fmt: skip
            ckpt.write_run_meta(root, meta)
            ckpt.rotate(root, self.config.checkpoint.save_total_limit)
        parallel.barrier()
        self.window.paused_s += time.perf_counter() - paused_from
        self.last_checkpoint = folder
        self.emit("on_save", folder)
        return folder

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model's weights on CPU (gathered from the shards under FSDP; a
        collective then: every rank calls it, rank 0 gets the tensors)."""
        if not self.sharded:
            return {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(self.model, options=options)

    def load_checkpoint(self, folder: Path) -> dict[str, Any]:
        model_state, state, meta = ckpt.load_checkpoint(folder)
        if model_state is None or self.sharded:
            self._load_sharded(folder, model_state)
        else:
            ckpt.check_model_fits(
                folder, model_state, self.model.state_dict(), self.config.model.model_dump()
            )
            self.model.load_state_dict(model_state)
            self.optimizer.load_state_dict(state["optimizer"])
        scheduler = dict(state["scheduler"])
        scheduler["lr_lambdas"] = [None] * len(self.scheduler.lr_lambdas)
        self.scheduler.load_state_dict(scheduler)
        if self.precision.scaler is not None and state.get("scaler"):
            self.precision.scaler.load_state_dict(state["scaler"])
        saved_world = int(state.get("world_size") or 1)
        if saved_world != self.dist.world_size:
            raise UserError(
                f"checkpoint {folder} was written by {saved_world} process(es), this run has "
                f"{self.dist.world_size}",
                f"resume with {saved_world} process(es) (torchrun --nproc-per-node), or start "
                "a new run from its weights",
            )
        own = state["per_rank"][self.dist.rank] if state.get("per_rank") else state
        self._check_loader_workers(own["train_loader"], folder)
        self.task.train_loader.load_state_dict(own["train_loader"])
        self.state.load_state_dict(state["trainer"])
        self.state.improved = False
        self.step_sums.load_state_dict(state.get("accumulation"), self.params, self.device)
        restore_rng(own["rng"])
        return meta

    def _load_sharded(self, folder: Path, full: dict[str, torch.Tensor] | None) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        if full is not None or not self.sharded:
            raise UserError(
                f"checkpoint {folder} is {'not ' if full is not None else ''}sharded and this "
                f"run {'is' if self.sharded else 'is not'}",
                "resume with the hardware.data_parallel setting it was written with",
            )
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        try:
            dcp.load({"model": model_state, "optimizer": optim_state}, checkpoint_id=folder / "dcp")
        except Exception as err:
            raise UserError(
                f"checkpoint {folder} does not fit this model: {str(err).splitlines()[0]}",
                "resume with the model settings the checkpoint was trained with",
            ) from None
        set_state_dict(
            self.model, self.optimizer, model_state_dict=model_state, optim_state_dict=optim_state
        )

    def _check_loader_workers(self, saved: Any, folder: Path) -> None:
        """The loader's saved position is per worker process: a different worker count
        cannot continue it (torchdata would fail later with an internal assertion)."""
        have = getattr(self.task.train_loader, "num_workers", None)
        if have is None or not isinstance(saved, dict):
            return
        if "_num_yielded" in saved:
            was = 0
        else:
            snapshot = saved.get("_snapshot")
            workers = snapshot.get("_worker_snapshots") if isinstance(snapshot, dict) else None
            was = len(workers) if isinstance(workers, dict) else None
        if was is not None and was != have:
            raise UserError(
                f"checkpoint {folder} was written with data.dataloader_num_workers={was}, "
                f"this run has {have}",
                f"resume with --set data.dataloader_num_workers={was} (the loader position "
                "is kept per worker)",
            )
