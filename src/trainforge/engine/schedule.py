"""Learning-rate schedules: linear warmup, then a registered shape, evaluated per step.

This module owns the built-in entries of `trainforge.registry.SCHEDULES` (the config's
`schedule.lr_scheduler_type` -> shape): "cosine" (the ViT guide's), "linear" and
"constant". A shape maps the progress after warmup (0 to 1) and the floor `min_lr / peak`
to a multiplier of the peak rate; a project or a test adds its own with
`SCHEDULES.register("name", shape)`. `WarmupDecay` puts warmup and shape together and
`build_scheduler` wraps it in torch's `LambdaLR`. `rewind` takes skipped steps back out of
a scheduler through its own `state_dict()` / `load_state_dict()`.

The cosine shape is the ViT guide's epoch formula evaluated at fractional epochs
(step / steps_per_epoch), so per-step values coincide with the guide at every epoch boundary:
    warmup:  lr = peak * t / warmup
    decay:   lr = min_lr + (peak - min_lr) * 0.5 * (1 + cos(pi * progress))

Libraries considered: torch's chained schedulers (`LinearLR` + `CosineAnnealingLR` in a
`SequentialLR`) compute each rate from the previous one, so a rate after a resume or after a
skipped step depends on the path taken; a closed-form multiplier under `LambdaLR` gives
the same rate for the same step every time and checkpoints as a step counter. transformers'
`get_cosine_schedule_with_warmup` is that same form without a floor, behind a heavy import.

Importing this module does not import torch (config validation reads the names).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainforge.registry import SCHEDULES

if TYPE_CHECKING:
    from torch.optim import Optimizer
    from torch.optim.lr_scheduler import LambdaLR

    from trainforge.config.schema import RunConfig, ScheduleConfig

# shape(progress after warmup in [0, 1], min_lr / peak) -> multiplier of the peak rate
Shape = Callable[[float, float], float]


@SCHEDULES.register("cosine")
def cosine(progress: float, min_ratio: float) -> float:
    """Half a cosine from the peak down to min_lr (the ViT guide)."""
    return min_ratio + (1.0 - min_ratio) * (0.5 * (1.0 + math.cos(math.pi * progress)))


@SCHEDULES.register("linear")
def linear(progress: float, min_ratio: float) -> float:
    """A straight line from the peak down to min_lr."""
    return min_ratio + (1.0 - min_ratio) * (1.0 - progress)


@SCHEDULES.register("constant")
def constant(progress: float, min_ratio: float) -> float:
    """The peak rate after warmup, unchanged to the end."""
    return 1.0


@dataclass
class WarmupDecay:
    """Multiplier of the peak rate at a given optimizer step: linear warmup, then the shape
    registered as `kind`. Plain numbers and a name, so `LambdaLR.state_dict` stays plain."""

    warmup_steps: int
    total_steps: int
    min_ratio: float
    kind: str = "cosine"

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return step / self.warmup_steps
        span = max(1, self.total_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        return SCHEDULES.get(self.kind)(progress, self.min_ratio)


def warmup_steps_for(cfg: ScheduleConfig, steps_per_epoch: int) -> int:
    if cfg.warmup_steps is not None:
        return cfg.warmup_steps
    return round(cfg.warmup_epochs * steps_per_epoch)


def fit_warmup(cfg: ScheduleConfig, steps_per_epoch: int, total_steps: int) -> tuple[Any, str]:
    """(the schedule, a notice): a warmup that does not fit the run (a run shortened with
    --max_steps while the warmup is counted in epochs, so the config layer could not tell)
    is shortened by `trainforge.config.plan.fitted_warmup`, the rule the plan applies to
    the cases it can see before the data is known."""
    from trainforge.config.plan import fitted_warmup

    given = f"{cfg.warmup_epochs:g} epochs = " if cfg.warmup_steps is None else ""
    warmup = warmup_steps_for(cfg, steps_per_epoch)
    fitted = fitted_warmup(warmup, total_steps, "step", given)
    if fitted is None:
        return cfg, ""
    return cfg.model_copy(update={"warmup_steps": int(fitted[0])}), fitted[1]


def build_scheduler(
    optimizer: Optimizer,
    cfg: ScheduleConfig,
    *,
    peak_lr: float,
    total_steps: int,
    steps_per_epoch: int,
) -> LambdaLR:
    """The schedule `cfg.lr_scheduler_type` names (an unknown name is a one-line error)."""
    from torch.optim.lr_scheduler import LambdaLR

    SCHEDULES.get(cfg.lr_scheduler_type)  # refuse an unknown name before training starts
    fn = WarmupDecay(
        warmup_steps=warmup_steps_for(cfg, steps_per_epoch),
        total_steps=total_steps,
        min_ratio=cfg.min_lr / peak_lr,
        kind=cfg.lr_scheduler_type,
    )
    return LambdaLR(optimizer, fn)


def build_run_schedule(
    optimizer: Optimizer, config: RunConfig, steps_per_epoch: int, total_steps: int
) -> tuple[LambdaLR, str]:
    """(the run's scheduler, a notice when its warmup was shortened to fit; see
    `fit_warmup`)."""
    schedule, note = fit_warmup(config.schedule, steps_per_epoch, total_steps)
    scheduler = build_scheduler(
        optimizer,
        schedule,
        peak_lr=config.optimizer.learning_rate,
        total_steps=total_steps,
        steps_per_epoch=steps_per_epoch,
    )
    return scheduler, note


def rewind(scheduler: LambdaLR, num_steps: int) -> None:
    """Take `num_steps` steps back out of `scheduler`: its state is set one step before the
    target and stepped once, so the rates in the optimizer and the scheduler's whole state
    equal those of a run that never took the steps."""
    state = scheduler.state_dict()
    state["last_epoch"] -= num_steps + 1
    state["_step_count"] -= num_steps + 1
    scheduler.load_state_dict(state)
    scheduler.step()
