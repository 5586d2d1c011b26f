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
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainforge.config.schema import RunConfig
from trainforge.engine import checkpoint as ckpt
from trainforge.engine.callbacks import Callback
from trainforge.engine.precision import Precision
from trainforge.engine.schedule import build_scheduler
from trainforge.engine.state import TrainerState, capture_rng, restore_rng
from trainforge.engine.task import Task


@dataclass
class FitResult:
    state: TrainerState
    final_metrics: dict[str, float]
    stop_reason: str
    interrupted: bool


class Window:
    """Running sums of the training steps since the last logging point (device tensors)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.loss_sum: torch.Tensor | float = 0.0
        self.weight = 0
        self.samples = 0
        self.steps = 0
        self.sums: dict[str, torch.Tensor] = {}
        self.data_s = 0.0
        self.started = time.perf_counter()


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
        self.model: nn.Module = task.model.to(device)
        if t.gradient_checkpointing and hasattr(self.model, "set_gradient_checkpointing"):
            self.model.set_gradient_checkpointing(True)
        self.forward_model: nn.Module = torch.compile(self.model) if t.compile else self.model
        self.precision = Precision.create(t.precision, device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = self._build_optimizer()
        self.steps_per_epoch = math.ceil(len(task.train_loader) / self.accumulation)
        if t.max_steps > 0:
            self.total_steps = t.max_steps
        else:
            self.total_steps = max(1, math.ceil(t.num_train_epochs * self.steps_per_epoch))
        self.scheduler = build_scheduler(
            self.optimizer,
            config.schedule,
            peak_lr=config.optimizer.learning_rate,
            total_steps=self.total_steps,
            steps_per_epoch=self.steps_per_epoch,
        )
        self.state = TrainerState()
        self.window = Window()
        self.last_grad_norm: torch.Tensor | None = None
        self.last_val: dict[str, float] = {}
        self.should_stop = False
        self.stop_reason = "finished"
        self.interrupted = False
        self._clock_start = time.monotonic()

    # ----------------------------------------------------------------- set-up
    def _build_optimizer(self) -> torch.optim.Optimizer:
        o = self.config.optimizer
        # No weight decay on biases, norms, class token and positions (1-D or embeddings).
        decay = [
            p
            for n, p in self.model.named_parameters()
            if p.requires_grad and p.ndim >= 2 and "pos_embed" not in n and "cls_token" not in n
        ]
        ids = {id(p) for p in decay}
        no_decay = [p for p in self.params if id(p) not in ids]
        groups = [
            {"params": decay, "weight_decay": o.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        fused = self.device.type == "cuda"
        return torch.optim.AdamW(
            groups,
            lr=o.learning_rate,
            betas=(o.adam_beta1, o.adam_beta2),
            eps=o.adam_epsilon,
            fused=fused or None,
        )

    def emit(self, event: str, *args: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, event)(self, *args)

    def elapsed_s(self) -> float:
        return self.state.train_time_s + time.monotonic() - self._clock_start

    def stop(self, reason: str) -> None:
        self.should_stop = True
        self.stop_reason = reason

    def is_last_epoch(self) -> bool:
        return self.state.global_step >= self.total_steps

    @property
    def num_epochs(self) -> int:
        return math.ceil(self.total_steps / self.steps_per_epoch)

    def current_lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    # ------------------------------------------------------------------ loop
    def fit(self) -> FitResult:
        self._clock_start = time.monotonic()
        self.emit("on_fit_start")
        while not self.should_stop and self.state.global_step < self.total_steps:
            self.emit("on_epoch_start")
            if self.should_stop:
                break
            if self._train_epoch():
                self.state.epoch += 1
                self.state.batch_in_epoch = 0
                self.emit("on_epoch_end")
        self.state.train_time_s = self.elapsed_s()
        self._clock_start = time.monotonic()
        self.emit("on_fit_end")
        return FitResult(self.state, dict(self.last_val), self.stop_reason, self.interrupted)

    def _train_epoch(self) -> bool:
        """Train until the epoch ends (True) or training stops inside it (False)."""
        self.model.train()
        loader = self.task.train_loader
        num_batches = len(loader)
        batches = iter(loader)
        in_window, window_weight = 0, 0
        while True:
            fetch_start = time.perf_counter()
            try:
                raw = next(batches)
            except StopIteration:
                return True
            batch = self.task.to_device(raw, self.device, True)
            self.window.data_s += time.perf_counter() - fetch_start
            with self.precision.autocast():
                out = self.task.step(self.forward_model, batch)
            weighted = out.loss.float() * out.weight
            if self.precision.scaler is not None:
                self.precision.scaler.scale(weighted).backward()
            else:
                weighted.backward()
            self._accumulate(out, weighted, self.task.batch_size(raw))
            in_window += 1
            window_weight += out.weight
            self.state.batch_in_epoch += 1
            epoch_done = self.state.batch_in_epoch >= num_batches
            if in_window < self.accumulation and not epoch_done:
                continue
            self._optimizer_step(window_weight)
            in_window, window_weight = 0, 0
            self.emit("on_step_end")
            if epoch_done:
                next(batches, None)  # exhaust so the loader's saved state marks the epoch done
                return True
            if self.should_stop or self.state.global_step >= self.total_steps:
                return False

    def _accumulate(self, out: Any, weighted: torch.Tensor, num_samples: int) -> None:
        w = self.window
        w.loss_sum = w.loss_sum + weighted.detach()
        w.weight += out.weight
        w.samples += num_samples
        self.state.samples_seen += num_samples
        for key, value in out.sums.items():
            w.sums[key] = w.sums[key] + value.detach() if key in w.sums else value.detach()

    def _optimizer_step(self, window_weight: int) -> None:
        scaler = self.precision.scaler
        if scaler is not None:
            scaler.unscale_(self.optimizer)
        grads = [p.grad for p in self.params if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, 1.0 / window_weight)
        max_norm = self.config.training.max_grad_norm
        if max_norm is not None:
            self.last_grad_norm = nn.utils.clip_grad_norm_(self.params, max_norm, foreach=True)
        if scaler is not None:
            scaler.step(self.optimizer)
            scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.global_step += 1
        self.window.steps += 1

    def pop_train_metrics(self) -> dict[str, float]:
        """Synchronise once, turn the window's sums into metrics, start a new window."""
        self.sync()
        w = self.window
        wall_s = max(time.perf_counter() - w.started, 1e-9)
        if w.weight == 0:
            return {}
        sums = {k: float(v) for k, v in w.sums.items()}
        metrics = self.task.metrics(float(w.loss_sum), w.weight, sums)
        metrics.update(
            {
                "lr": self.current_lr(),
                "samples_per_s": w.samples / wall_s,
                "step_time_s": wall_s / max(1, w.steps),
                "data_wait_share": min(1.0, w.data_s / wall_s),
                "compute_time_s": max(0.0, wall_s - w.data_s) / max(1, w.steps),
            }
        )
        if self.task.items_name == "tokens":
            metrics["tokens_per_s"] = w.weight / wall_s
        if self.last_grad_norm is not None:
            metrics["grad_norm"] = float(self.last_grad_norm)
        w.reset()
        return metrics

    # ------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        self.model.eval()
        loss_sum, weight, sums = 0.0, 0, {}
        for raw in self.task.val_loader:
            batch = self.task.to_device(raw, self.device, False)
            with self.precision.autocast():
                out = self.task.step(self.forward_model, batch)
            loss_sum = loss_sum + out.loss.float() * out.weight
            weight += out.weight
            for key, value in out.sums.items():
                sums[key] = sums.get(key, 0) + value
        self.model.train()
        metrics = self.task.metrics(float(loss_sum), weight, {k: float(v) for k, v in sums.items()})
        self._track_best(metrics)
        self.last_val = metrics
        self.emit("on_eval_end", metrics)
        return metrics

    def _track_best(self, metrics: dict[str, float]) -> None:
        e = self.config.evaluation
        value = metrics[e.metric_for_best_model]
        greater = e.greater_is_better
        if greater is None:
            greater = e.metric_for_best_model != "loss"
        best = self.state.best_metric
        improved = best is None or (value > best if greater else value < best)
        self.state.improved = improved
        if improved:
            self.state.best_metric = value
            self.state.best_step = self.state.global_step
            self.state.best_epoch = self.state.epoch

    # ----------------------------------------------------------- checkpoints
    def save_checkpoint(self, name: str) -> Path:
        self.state.train_time_s = self.elapsed_s()
        self._clock_start = time.monotonic()
        state = {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.precision.scaler.state_dict() if self.precision.scaler else None,
            "train_loader": self.task.train_loader.state_dict(),
            "trainer": self.state.state_dict(),
            "rng": capture_rng(),
        }
        meta = {
            "name": name,
            "epoch": self.state.epoch,
            "global_step": self.state.global_step,
            "best_val": self.state.best_metric,
            "best_metric": self.config.evaluation.metric_for_best_model,
            "best_step": self.state.best_step,
            "best_epoch": self.state.best_epoch,
            "config_hash": self.config_hash,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "versions": {"torch": torch.__version__},
        }
        root = self.run_dir / "checkpoints"
        path = ckpt.save_checkpoint(
            root / name,
            model_state=self.model.state_dict(),
            state=state,
            meta=meta,
            config_yaml=self.config_yaml,
        )
        ckpt.rotate(root, self.config.checkpoint.save_total_limit)
        self.emit("on_save", path)
        return path

    def load_checkpoint(self, folder: Path) -> dict[str, Any]:
        model_state, state, meta = ckpt.load_checkpoint(folder)
        self.model.load_state_dict(model_state)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.precision.scaler is not None and state.get("scaler"):
            self.precision.scaler.load_state_dict(state["scaler"])
        self.task.train_loader.load_state_dict(state["train_loader"])
        self.state.load_state_dict(state["trainer"])
        self.state.improved = False
        restore_rng(state["rng"])
        return meta
