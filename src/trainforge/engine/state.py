"""Where a run is, as plain data: the trainer's counters, the non-finite counts, the best
values, and RNG capture.

`TrainerState` is the run's record that `fit()` returns. Its counters are the trainer's own
state; the non-finite counts and the best values are records owned (and checkpointed) by
the non-finite guard and the best tracker, reachable from the state under their old
attribute names (`state.best_metric`, `state.nonfinite_steps`, ...).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any

import numpy as np
import torch


@dataclass
class NonFiniteCounts:
    """Owned by `engine.guard.NonFiniteGuard`."""

    nonfinite_steps: int = 0  # optimizer steps skipped for a NaN/Inf loss or gradient
    consecutive_nonfinite: int = 0

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _load_fields(self, state)


@dataclass
class BestValues:
    """Owned by `engine.evaluate.BestTracker`; `improved` is the last full validation's."""

    best_metric: float | None = None
    best_step: int | None = None
    best_epoch: int | None = None
    best_loss: float | None = None  # validation loss at best_step (the notes' best_val_loss)
    best_fast: float | None = None  # best fast-validation value (full validation on a gain)
    improved: bool = False

    def state_dict(self) -> dict[str, Any]:
        state = asdict(self)
        state.pop("improved")  # about the last validation of this process, not the run
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _load_fields(self, state)
        self.improved = False


class _Part:
    """`state.NAME` reads and writes `state.<record>.NAME` (the names callers know)."""

    def __init__(self, record: str) -> None:
        self.record = record

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else getattr(getattr(obj, self.record), self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        setattr(getattr(obj, self.record), self.name, value)


@dataclass
class TrainerState:
    epoch: int = 0  # completed epochs
    global_step: int = 0  # completed optimizer steps
    batch_in_epoch: int = 0  # micro-batches consumed in the current epoch
    samples_seen: int = 0
    train_time_s: float = 0.0
    flops_per_sample: float | None = None  # counted on the run's first micro-batch (MFU)
    nonfinite: NonFiniteCounts = field(default_factory=NonFiniteCounts)
    best: BestValues = field(default_factory=BestValues)

    nonfinite_steps = _Part("nonfinite")
    consecutive_nonfinite = _Part("nonfinite")
    best_metric = _Part("best")
    best_step = _Part("best")
    best_epoch = _Part("best")
    best_fast = _Part("best")
    improved = _Part("best")

    def state_dict(self) -> dict[str, Any]:
        """The counters only: the records are checkpointed by their owners."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if not is_dataclass(getattr(self, f.name))
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _load_fields(self, state)


def _load_fields(record: Any, state: dict[str, Any]) -> None:
    """Set the plain fields of `record` that `state` holds (other keys are someone else's)."""
    for f in fields(record):
        if f.name in state and not is_dataclass(getattr(record, f.name)):
            setattr(record, f.name, state[f.name])


def capture_rng() -> dict[str, Any]:
    """Every RNG the run draws from, in a form `torch.load(weights_only=True)` accepts."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(keys.copy()), pos, has_gauss, cached),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def restore_rng(state: dict[str, Any]) -> None:
    python = state["python"]
    random.setstate((python[0], tuple(python[1]), python[2]))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy(), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def plan_steps(training: Any, num_batches: int) -> tuple[int, int]:
    """(optimizer steps per epoch, total optimizer steps) for `num_batches` micro-batches
    per epoch: `training.max_steps` when set, else the epochs' steps."""
    steps_per_epoch = math.ceil(num_batches / training.gradient_accumulation_steps)
    if training.max_steps > 0:
        return steps_per_epoch, training.max_steps
    return steps_per_epoch, max(1, math.ceil(training.num_train_epochs * steps_per_epoch))


@dataclass
class FitResult:
    state: TrainerState
    final_metrics: dict[str, float]
    stop_reason: str
    interrupted: bool
