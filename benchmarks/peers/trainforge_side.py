"""trainforge: the real `Trainer` with a task that computes the same loss, no callbacks.

No callbacks means no logging, progress, evaluation or checkpoints, as on the other sides.
The batches come from trainforge's own loader (`make_loader`: a StatefulDataLoader whose
EpochShuffleSampler uses the workload's seed, so the order matches the other sides).
"""

from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from peers.workload import SideResult, Workload, finish, loss_fn, measured
from trainforge.config.loading import load
from trainforge.config.schema import RunConfig
from trainforge.data.loaders import make_loader
from trainforge.engine.task import StepOutput
from trainforge.engine.trainer import Trainer


@dataclass
class BenchTask:
    """The Task contract for the benchmark: batches are (images, labels), loss only."""

    model: nn.Module
    train_loader: Any
    val_loader: Any
    num_train_samples: int
    name: str = "bench"
    items_name: str = "samples"

    def to_device(self, batch: Any, device: torch.device, train: bool) -> tuple[Tensor, Tensor]:
        images, labels = batch
        non_blocking = device.type == "cuda"
        return images.to(device, non_blocking=non_blocking), labels.to(
            device, non_blocking=non_blocking
        )

    def batch_size(self, batch: Any) -> int:
        return int(batch[1].shape[0])

    def step(self, model: nn.Module, batch: tuple[Tensor, Tensor]) -> StepOutput:
        images, labels = batch
        return StepOutput(loss_fn(model(images), labels), int(labels.shape[0]))

    def metrics(self, loss_sum: float, weight: int, sums: dict[str, float]) -> dict[str, float]:
        return {"loss": loss_sum / weight}


def _yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def trainforge_config(w: Workload, **extra: Any) -> RunConfig:
    """The run config for `w`: its steps, batch, optimizer and precision; nothing on the side."""
    sets: dict[str, Any] = {
        "training.max_steps": w.total_steps,
        "training.per_device_train_batch_size": w.batch_size,
        "training.gradient_accumulation_steps": 1,
        "training.max_grad_norm": w.max_grad_norm,
        "training.precision": w.precision,
        "training.compile": w.compile,
        "training.seed": w.seed,
        "optimizer.learning_rate": w.learning_rate,
        "optimizer.weight_decay": w.weight_decay,
        "schedule.lr_scheduler_type": "constant",
        "schedule.warmup_steps": 0,
        "logging.tensorboard": False,
        "logging.jsonl": False,
        "logging.progress_bar": False,
        "checkpoint.save_every_epochs": None,
        "checkpoint.save_best": False,
        "checkpoint.save_final_model": False,
        "data.dataloader_num_workers": 0,
        # Pinning only applies to host tensors; the GPU benchmark keeps its data on the device.
        "data.pin_memory": w.images.device.type == "cpu",
    }
    sets.update(extra)
    overrides = [f"{key}={_yaml(value)}" for key, value in sets.items()]
    return load(None, overrides=overrides, profile="cpu").config


@functools.cache
def _adamw_fused(device: torch.device, precision: str) -> bool | None:
    probe = Workload(
        "probe", lambda: nn.Linear(4, 2), torch.zeros(2, 4), torch.zeros(2, dtype=torch.long),
        batch_size=1, warmup_steps=1, timed_steps=1, device=device, precision=precision,
    )  # fmt: skip
    config = trainforge_config(probe)
    loader = make_loader(probe.dataset(), config.data, batch_size=1, train=True, seed=0,
                         batched_fetch=True)  # fmt: skip
    task = BenchTask(probe.make_model().to(device), loader, None, 2)
    with tempfile.TemporaryDirectory(prefix="trainforge-bench-") as run_dir:
        trainer = Trainer(task, config, run_dir=Path(run_dir), device=device, callbacks=[])
        return trainer.optimizer.defaults.get("fused")


def trainforge_adamw_fused(w: Workload) -> bool | None:
    """`fused` of the AdamW trainforge's Trainer builds by default for `w`'s device."""
    return _adamw_fused(w.device, w.precision)


def run_trainforge(w: Workload, **config_sets: Any) -> SideResult:
    """Train `w` with trainforge's Trainer; `config_sets` are extra config fields."""
    config = trainforge_config(w, **config_sets)
    model = w.prepare_model()
    loader = make_loader(
        w.dataset(),
        config.data,
        batch_size=w.batch_size,
        train=True,
        seed=w.seed,
        batched_fetch=True,
    )
    task = BenchTask(model, loader, None, len(w.labels))
    with tempfile.TemporaryDirectory(prefix="trainforge-bench-") as run_dir:
        trainer = Trainer(task, config, run_dir=Path(run_dir), device=w.device, callbacks=[])
        with measured(w) as (clock, memory):
            clock.attach(trainer.optimizer)
            trainer.fit()
    return finish(w, trainer.model, clock, memory)
