"""Learning-rate scaling when the effective batch differs from the one the rate was tuned for.

The training-optimisation notes' rule: batch 24 at 3e-4 becomes batch 20 at
3e-4 x 20/24 = 2.5e-4 (linear); `sqrt` scales by the square root; `none` leaves the rate
alone. Only the command line (or an inexact split, said in one line) can change the
effective batch: a profile or the process count never does (see `trainforge.config.plan`).
"""

from __future__ import annotations

import math
from typing import Any


def scaled_rate(rate: float, reference: int, used: int, mode: str) -> tuple[float, str]:
    """(the rate for `used`, the line to print; empty when nothing changed)."""
    if mode == "none" or reference == used:
        return rate, ""
    ratio = used / reference
    new = rate * (ratio if mode == "linear" else math.sqrt(ratio))
    line = (
        f"learning rate: {rate:g} for effective batch {reference} -> {new:.4g} for effective "
        f"batch {used} ({mode} scaling; optimizer.lr_scaling=none keeps it)"
    )
    return new, line


def rescale(optimizer: Any, sources: dict[str, str], reference: int, used: int) -> tuple[Any, str]:
    """(the optimizer section for an effective batch of `used`, the line to print). A rate
    given on the command line is taken as meant for the batch in use and kept; a scaled
    rate's source becomes `lr scaling (MODE)` in `sources`."""
    if sources.get("optimizer.learning_rate", "").startswith("flag"):
        return optimizer, ""
    rate, line = scaled_rate(optimizer.learning_rate, reference, used, optimizer.lr_scaling)
    if not line:
        return optimizer, ""
    sources["optimizer.learning_rate"] = f"lr scaling ({optimizer.lr_scaling})"
    return optimizer.model_copy(update={"learning_rate": rate}), line
