"""The held-out share of a dataset that trainforge splits into training and validation
itself: the base of every built-in dataset's options that takes `val_fraction`."""

from __future__ import annotations

from pydantic import Field

from trainforge.options import Options


class SplitOptions(Options):
    """A dataset split into training and validation here: the held-out share."""

    val_fraction: float = Field(
        0.2, gt=0.0, lt=1.0, description="Held-out share for validation (a fixed, seeded split)."
    )
