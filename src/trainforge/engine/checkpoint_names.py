"""The names of the checkpoint folders a run writes under RUN/checkpoints/, in one table, and
which of them rotation may delete. The folder layout's other owner is `runfolder`; callers
name checkpoint folders through these functions (re-exported by `engine.checkpoint`), never by
literal."""

from __future__ import annotations

import re

# Every checkpoint folder a run writes under RUN/checkpoints/, in one table: its name (a
# pattern with `{}` for the step or epoch), what writes it, and whether rotation
# (`checkpoint.save_total_limit`) may delete it. Callers name folders through the functions
# below, never by literal.
NAMES: dict[str, tuple[str, str, bool]] = {
    #  kind          name                     written                                 rotated
    "step":        ("checkpoint-{}",          "every save_steps and at the run's end", True),
    "epoch":       ("checkpoint_epoch_{}",    "every save_every_epochs",               True),
    "best":        ("best_model",             "when the validation metric improves",   False),
    "time_limit":  ("checkpoint_time_limit",  "when training.max_hours is reached",    False),
    "interrupted": ("checkpoint_interrupted", "on Ctrl+C, SIGTERM or SIGUSR1",         False),
}  # fmt: skip
# Each name as a pattern of the whole folder name, by kind (`{}`: the step or epoch).
PATTERNS = {
    kind: re.compile("^" + re.escape(name).replace(r"\{\}", r"\d+") + "$")
    for kind, (name, _, _) in NAMES.items()
}


def step_name(step: int) -> str:
    """The periodic checkpoint of optimizer step `step` (also the run's last step)."""
    return NAMES["step"][0].format(step)


def epoch_name(epoch: int) -> str:
    """The periodic checkpoint at the end of epoch `epoch`."""
    return NAMES["epoch"][0].format(epoch)


def best_name() -> str:
    """The checkpoint of the best validation metric so far (never rotated)."""
    return NAMES["best"][0]


def time_limit_name() -> str:
    """The checkpoint saved when `training.max_hours` stops the run."""
    return NAMES["time_limit"][0]


def interrupted_name() -> str:
    """The checkpoint saved when a signal stops the run (Ctrl+C, SIGTERM, SIGUSR1)."""
    return NAMES["interrupted"][0]


def kind(name: str) -> str | None:
    """Which entry of NAMES the folder `name` is (None: none of them)."""
    return next((key for key, pattern in PATTERNS.items() if pattern.match(name)), None)


def is_periodic(name: str) -> bool:
    """Whether rotation may delete the checkpoint folder `name` (a checkpoint that goes by a
    cadence: a step's or an epoch's)."""
    found = kind(name)
    return found is not None and NAMES[found][2]
