"""Learning-rate scaling when the effective batch differs from the one the rate was tuned for.

The training-optimisation notes' rule: batch 24 at 3e-4 becomes batch 20 at
3e-4 x 20/24 = 2.5e-4 (linear); `sqrt` scales by the square root; `none` leaves the rate
alone. Only the command line can change the effective batch: a profile, the process count
or the micro-batch never does (any count splits the recipe's batch, see
`trainforge.config.plan`).
The reference is a batch the user's config states; where it states none, nothing is scaled
(a schema default is no batch anyone tuned a rate for).
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


def plan_rate(
    optimizer: Any, sources: dict[str, str], reference: int | None, where: str, used: int
) -> tuple[Any, str, str]:
    """(the optimizer section for an effective batch of `used`, the line to print, the rule
    that decided the rate, as `config show` says it). `reference` is the batch the user's
    config states (None: it states none) and `where` says where."""
    if sources.get("optimizer.learning_rate", "").startswith("flag"):
        rule = "learning rate not scaled: given on the command line, so meant for the batch in use"
        return optimizer, "", rule
    if reference is None:
        rule = (
            "learning rate not scaled: the run config states no batch it was tuned for "
            "(set optimizer.reference_batch_size to scale it)"
        )
        return optimizer, "", rule
    if optimizer.lr_scaling == "none":
        return optimizer, "", "learning rate not scaled: optimizer.lr_scaling is none"
    if reference == used:
        rule = f"learning rate not scaled: effective batch {used} is the reference ({where})"
        return optimizer, "", rule
    scaled, line = rescale(optimizer, sources, reference, used)
    rule = (
        f"learning rate scaled ({optimizer.lr_scaling}): reference batch {reference} "
        f"({where}) -> effective batch {used}"
    )
    return scaled, line, rule
