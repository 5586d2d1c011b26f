"""Trainer counters and RNG capture: everything about *where* a run is, as plain data."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch


@dataclass
class TrainerState:
    epoch: int = 0  # completed epochs
    global_step: int = 0  # completed optimizer steps
    batch_in_epoch: int = 0  # micro-batches consumed in the current epoch
    samples_seen: int = 0
    train_time_s: float = 0.0
    best_metric: float | None = None
    best_step: int | None = None
    best_epoch: int | None = None
    best_fast: float | None = None  # best fast-validation value (full validation on a gain)
    nonfinite_steps: int = 0  # optimizer steps skipped for a NaN/Inf loss or gradient
    consecutive_nonfinite: int = 0
    flops_per_sample: float | None = None  # counted on the run's first micro-batch (MFU)
    improved: bool = False

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            if hasattr(self, key):
                setattr(self, key, value)


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
