"""Learning-rate scaling when the global batch differs from the one the rate was tuned for.

The training-optimisation notes' rule: batch 24 at 3e-4 becomes batch 20 at
3e-4 x 20/24 = 2.5e-4 (linear); `sqrt` scales by the square root; `none` leaves the rate
alone. The reference is
`optimizer.reference_batch_size`, else the global batch the config file itself asks for,
else (with `per_device_train_batch_size: auto`) `AUTO_GLOBAL_BATCH`. The batch fit keeps
that same reference as the global batch, so the two agree: a fit that keeps it changes no
rate. A learning rate given on the command line is taken as meant for the batch in use.
"""

from __future__ import annotations

import math
from typing import Any

from trainforge.config.loading import ResolvedConfig, read_config_file
from trainforge.config.schema import RunConfig

# The global batch `per_device_train_batch_size: auto` keeps when nothing else names one:
# the schema's default micro-batch (128) without accumulation.
AUTO_GLOBAL_BATCH = 128


def _file_global_batch(resolved: ResolvedConfig) -> int | None:
    if resolved.path is None:
        return None
    try:
        raw: dict[str, Any] = read_config_file(resolved.path)
    except Exception:
        return None
    training = raw.get("training") if isinstance(raw, dict) else None
    if not isinstance(training, dict) or "per_device_train_batch_size" not in training:
        return None
    try:
        batch = int(training["per_device_train_batch_size"])
        accumulation = int(training.get("gradient_accumulation_steps", 1))
    except (TypeError, ValueError):
        return None
    return batch * accumulation


def reference_global_batch(resolved: ResolvedConfig) -> int | None:
    """The global batch the learning rate was tuned for (None: not known)."""
    config = resolved.config
    reference = config.optimizer.reference_batch_size or _file_global_batch(resolved)
    if reference is None and config.training.per_device_train_batch_size == "auto":
        return AUTO_GLOBAL_BATCH
    return reference


def scale_learning_rate(resolved: ResolvedConfig, world_size: int = 1) -> tuple[RunConfig, str]:
    """(config with the scaled rate, the line to print; empty when nothing changed)."""
    config = resolved.config
    o, t = config.optimizer, config.training
    if o.lr_scaling == "none" or t.per_device_train_batch_size == "auto":
        return config, ""  # auto: scaled once the batch fit has chosen the numbers
    if resolved.sources.get("optimizer.learning_rate", "").startswith("flag"):
        return config, ""
    reference = reference_global_batch(resolved)
    used = t.per_device_train_batch_size * t.gradient_accumulation_steps * world_size
    if reference is None or reference == used:
        return config, ""
    ratio = used / reference
    factor = ratio if o.lr_scaling == "linear" else math.sqrt(ratio)
    rate = o.learning_rate * factor
    scaled = config.model_copy(update={"optimizer": o.model_copy(update={"learning_rate": rate})})
    line = (
        f"learning rate: {o.learning_rate:g} for global batch {reference} -> {rate:.4g} for "
        f"global batch {used} ({o.lr_scaling} scaling; optimizer.lr_scaling=none keeps it)"
    )
    return scaled, line
