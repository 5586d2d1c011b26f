"""What a run's checkpoint holds, built from the parts themselves: every part with state
registered once for the checkpointer (`state_registry`), the setup each checkpoint records
(`RunSetup`), and what a checkpoint's meta says (`checkpoint_meta`). The save, the restore
and what a fit leaves behind belong to the checkpointer (`engine.checkpointer`); the loop
(`engine.trainer`) only hands over its parts, as torchtitan builds its checkpointer from
its states (model parts, optimizers, schedulers, data loader, train state).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainforge.data.loaders import LoaderPosition
from trainforge.engine import checkpoint as ckpt
from trainforge.engine.checkpointer import Checkpointer
from trainforge.engine.stateful import (
    ModelState,
    OptimizerState,
    OptionalState,
    RngState,
    ScheduleState,
    Stateful,
    StateRegistry,
    loader_workers_check,
)


@dataclass(frozen=True)
class RunSetup:
    """How this run computes (kept in each checkpoint's meta): what decides whether a
    resume is bitwise. The CPU thread count is read at each save."""

    world_size: int
    micro_batch: Any
    accumulation: int
    device: str
    precision: str
    workers: int
    sharded: bool

    @classmethod
    def of(
        cls, config: Any, *, world_size: int, device: torch.device, loader: Any, sharded: bool
    ) -> RunSetup:
        t = config.training
        return cls(
            world_size,
            t.per_device_train_batch_size,
            t.gradient_accumulation_steps,
            device.type,
            str(t.precision),
            int(getattr(loader, "num_workers", 0) or 0),
            sharded,
        )

    def now(self) -> dict[str, Any]:
        return {
            "world_size": self.world_size, "micro_batch": self.micro_batch,
            "accumulation": self.accumulation, "device": self.device,
            "precision": self.precision, "threads": torch.get_num_threads(),
            "workers": self.workers, "sharding": "fsdp" if self.sharded else "none",
        }  # fmt: skip


def state_registry(
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    precision: Any,
    loader: Any,
    state: Stateful,
    guard: Stateful,
    best: Stateful,
    sums: Stateful,
    sharded: bool,
    model_settings: dict[str, Any],
) -> StateRegistry:
    """Every part with state, once, in restore order (the RNG last). `model_settings`: the
    config's model section, which a misfit's message compares."""
    registry = StateRegistry()
    model_fits = None
    if not sharded:  # under FSDP torch.distributed.checkpoint refuses a misfit

        def model_fits(folder: Path, saved: Any) -> None:
            ckpt.check_model_fits(folder, saved, model.state_dict(), model_settings)

    registry.register(ckpt.MODEL_PART, ModelState(model, sharded), weights=True, sharded=True,
                      check=model_fits)  # fmt: skip
    registry.register("optimizer", OptimizerState(model, optimizer, sharded), sharded=True)
    registry.register("scheduler", ScheduleState(scheduler))
    registry.register("scaler", OptionalState(lambda: precision.scaler))
    registry.register("train_loader", LoaderPosition(loader), per_rank=True,
                      check=loader_workers_check(loader), layout_bound=True)  # fmt: skip
    registry.register("trainer", state)
    registry.register("nonfinite", guard)
    registry.register("best", best)
    registry.register("accumulation", sums, layout_bound=True)
    registry.register("rng", RngState(), per_rank=True)
    return registry


def checkpoint_meta(
    *, state: Any, micro_batch_in_window: int, best: Any, setup: RunSetup, config_hash: str
) -> dict[str, Any]:
    """What a checkpoint's meta.json (and checkpoint_meta.json) says besides its name."""
    s = state
    return {
        "epoch": s.epoch, "global_step": s.global_step, "batch_in_epoch": s.batch_in_epoch,
        "micro_batch_in_window": micro_batch_in_window, "best_val": s.best_metric,
        "best_metric": best.metric, "best_step": s.best_step,
        "best_epoch": s.best_epoch, "best_val_loss": best.best.best_loss,
        "best_val_step": s.best_step, "config_hash": config_hash,
        "train_time_s": round(s.train_time_s, 3),  # the run's training time over its segments
        "timestamp": datetime.now(UTC).isoformat(timespec="microseconds"),
        "versions": ckpt.library_versions(), "world_size": setup.world_size,
        "sharded": setup.sharded, "setup": setup.now(),
    }  # fmt: skip


def build_checkpointer(
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    precision: Any,
    loader: Any,
    state: Any,
    guard: Stateful,
    best: Any,
    sums: Any,
    setup: RunSetup,
    config: Any,
    root: Path,
    config_yaml: str,
    config_hash: str,
) -> Checkpointer:
    """The run's checkpointer over a registry of these parts, its meta read from them."""
    registry = state_registry(
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        precision=precision,
        loader=loader,
        state=state,
        guard=guard,
        best=best,
        sums=sums,
        sharded=setup.sharded,
        model_settings=config.model.model_dump(),
    )

    def describe() -> dict[str, Any]:
        return checkpoint_meta(
            state=state,
            micro_batch_in_window=sums.micro,
            best=best,
            setup=setup,
            config_hash=config_hash,
        )

    return Checkpointer(
        registry,
        root=root,
        sharded=setup.sharded,
        describe=describe,
        config_yaml=config_yaml,
        settings=config.checkpoint,
        optimizer=optimizer,
    )
