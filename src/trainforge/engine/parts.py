"""The loop's parts, built from the config and from each other, never from the Trainer:
the prepared model, precision, optimizer, step plan and schedule, the counters, the
non-finite guard, the best tracker, the accumulation sums, the checkpointer over a registry
of these parts (`engine.resumable`) and the validation passes. torchtitan's trainer builds
its model parts, optimizers, schedulers and checkpointer the same way before its loop runs;
`engine.trainer.Trainer` then holds them and applies what they return.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainforge import parallel
from trainforge.config.schema import RunConfig
from trainforge.engine import resumable
from trainforge.engine.checkpointer import Checkpointer
from trainforge.engine.evaluate import BestTracker, Validation
from trainforge.engine.guard import NonFiniteGuard
from trainforge.engine.meters import AccumulationSums, TrainMeter
from trainforge.engine.optimizers import build_optimizer
from trainforge.engine.precision import PrecisionPlan
from trainforge.engine.prepare import PreparedModel, prepare_model
from trainforge.engine.schedule import build_run_schedule
from trainforge.engine.state import TrainerState, plan_steps
from trainforge.engine.task import Task
from trainforge.runfolder import RunFolder


@dataclass
class Parts:
    prepared: PreparedModel
    precision: PrecisionPlan
    params: list[torch.nn.Parameter]  # the parameters that train
    optimizer: torch.optim.Optimizer
    steps_per_epoch: int
    total_steps: int
    scheduler: Any
    schedule_note: str
    state: TrainerState
    guard: NonFiniteGuard
    best: BestTracker
    accumulation_sums: AccumulationSums
    setup: resumable.RunSetup
    checkpointer: Checkpointer
    validation: Validation

    @property
    def counted(self) -> tuple[TrainerState, NonFiniteGuard, BestTracker]:
        """The counters and the two parts that keep their records in them."""
        return self.state, self.guard, self.best


def build_parts(
    task: Task, config: RunConfig, meter: TrainMeter, run_dir: Path, device: torch.device,
    config_yaml: str, config_hash: str,
) -> Parts:  # fmt: skip
    """Every part of a run that trains `task` under `config` on `device`; `meter` is the
    loop's throughput meter (validation pauses it)."""
    t, e, dist = config.training, config.evaluation, parallel.context()
    prepared = prepare_model(task.model, config, device)
    model, sharded = prepared.model, prepared.sharded
    precision = PrecisionPlan.create(t.precision, device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = build_optimizer(model, config.optimizer, device, sharded=sharded)
    steps_per_epoch, total_steps = plan_steps(t, len(task.train_loader))
    scheduler, note = build_run_schedule(optimizer, config, steps_per_epoch, total_steps)
    state = TrainerState()
    guard = NonFiniteGuard.for_run(state.nonfinite, t, device, optimizer)
    best = BestTracker(state.best, e.metric_for_best_model, e.greater_is_better)
    sums = AccumulationSums(params, device)
    setup = resumable.RunSetup.of(
        config, world_size=dist.world_size, device=device, loader=task.train_loader,
        sharded=sharded,
    )  # fmt: skip
    checkpointer = resumable.build_checkpointer(
        model=model, optimizer=optimizer, scheduler=scheduler, precision=precision,
        loader=task.train_loader, state=state, guard=guard, best=best, sums=sums, setup=setup,
        config=config, root=RunFolder(run_dir).checkpoints, config_yaml=config_yaml,
        config_hash=config_hash,
    )  # fmt: skip
    validation = Validation(
        task, prepared, device=device, precision=precision, distributed=dist.enabled,
        meter=meter, fast_fraction=e.fast_eval_fraction,
    )  # fmt: skip
    return Parts(
        prepared, precision, params, optimizer, steps_per_epoch, total_steps, scheduler, note,
        state, guard, best, sums, setup, checkpointer, validation,
    )  # fmt: skip
