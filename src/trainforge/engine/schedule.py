"""Learning-rate schedule: linear warmup, then cosine (or linear) decay to `min_lr`, per step.

This is the ViT guide's epoch formula evaluated at fractional epochs (step / steps_per_epoch),
so per-step values coincide with the guide at every epoch boundary:
    warmup:  lr = peak * t / warmup
    decay:   lr = min_lr + (peak - min_lr) * 0.5 * (1 + cos(pi * progress))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from trainforge.config.schema import ScheduleConfig


@dataclass
class WarmupDecay:
    """Multiplier of the peak rate at a given optimizer step; plain numbers so it checkpoints."""

    warmup_steps: int
    total_steps: int
    min_ratio: float
    kind: str = "cosine"

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return step / self.warmup_steps
        if self.kind == "constant":
            return 1.0
        span = max(1, self.total_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        if self.kind == "linear":
            shape = 1.0 - progress
        else:
            shape = 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.min_ratio + (1.0 - self.min_ratio) * shape


def warmup_steps_for(cfg: ScheduleConfig, steps_per_epoch: int) -> int:
    if cfg.warmup_steps is not None:
        return cfg.warmup_steps
    return round(cfg.warmup_epochs * steps_per_epoch)


def fit_warmup(cfg: ScheduleConfig, steps_per_epoch: int, total_steps: int) -> tuple[Any, str]:
    """(the schedule, a notice): a warmup that does not fit the run (a run shortened with
    --max_steps while the warmup is counted in epochs, so the config layer could not tell)
    is shortened to a tenth of the run, as `trainforge.config.plan` does for the cases it
    can see before the data is known."""
    warmup = warmup_steps_for(cfg, steps_per_epoch)
    if warmup < total_steps or warmup == 0:
        return cfg, ""
    short = total_steps // 10
    given = f"{cfg.warmup_epochs:g} epochs = " if cfg.warmup_steps is None else ""
    return cfg.model_copy(update={"warmup_steps": short}), (
        f"schedule: warmup of {given}{warmup} steps does not fit the {total_steps}-step run; "
        f"shortened to {short} (a tenth of the run)"
    )


def build_scheduler(
    optimizer: Optimizer,
    cfg: ScheduleConfig,
    *,
    peak_lr: float,
    total_steps: int,
    steps_per_epoch: int,
) -> LambdaLR:
    fn = WarmupDecay(
        warmup_steps=warmup_steps_for(cfg, steps_per_epoch),
        total_steps=total_steps,
        min_ratio=cfg.min_lr / peak_lr,
        kind=cfg.lr_scheduler_type,
    )
    return LambdaLR(optimizer, fn)
