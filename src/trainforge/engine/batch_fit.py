"""Automatic batch fit: `training.per_device_train_batch_size: auto`.

This module owns the search and the plan, and no torch: the largest micro-batch whose
measured peak memory stays under the budget less a safety margin (doubling, then
bisection, capped by the global batch and the data set), and the gradient accumulation
that keeps the global batch. The measurements (one real training step per size, on CUDA,
unified memory or CPU) live in `trainforge.engine.batch_probe`, whose `fit_auto_batch`
returns the numbers for an `auto` config before the run builds its task and loaders;
`trainforge.config.plan.apply_batch_plan` puts them into the config. This module imports
no probe.

A probe is any callable `micro_batch -> peak bytes of one full training step` (forward,
backward, optimizer step) that raises `OutOfMemory` when the step does not fit. Where an
out-of-memory step cannot be caught (unified memory on Jetson and DGX Spark, and CPU RAM:
the kernel's OOM killer ends the process instead), the search runs in `predict` mode: it
extrapolates the peaks measured so far and never tries a size predicted to exceed the
usable memory.

Lightning's `Tuner.scale_batch_size` and Accelerate's `find_executable_batch_size` were
considered: both find a size by running into CUDA out-of-memory errors, which on unified
memory means the OOM killer, neither keeps the global batch through accumulation, and
neither works with this project's task contract.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainforge.config.plan import BatchPlan, plan_accumulation

__all__ = ["BatchPlan", "OutOfMemory", "kept_batch", "plan_accumulation"]

GIB = 1024**3

MemoryProbe = Callable[[int], int]


class OutOfMemory(Exception):
    """Raised by a memory probe when a training step at that micro-batch does not fit."""


@dataclass(frozen=True)
class FitSearch:
    """The outcome of the search: `micro_batch` is 0 when not even one sample fits."""

    micro_batch: int
    peak_bytes: int | None  # measured at micro_batch
    budget_bytes: int
    usable_bytes: int
    margin: float
    cap: int
    # (size, bytes, note): note is fits, over, predicted (bytes: the prediction), held
    # (bytes held before any step already over), or out of memory (bytes: None)
    tried: list[tuple[int, int | None, str]] = field(default_factory=list)


def gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB:.2f}"


class _Predictor:
    """Upper-bound peak estimates from the sizes measured so far (peaks grow with size).

    With one measurement the whole growth over the baseline (weights, data) counts as
    per-sample, which overestimates; with two or more the steepest slope between
    neighbouring measurements is used.
    """

    def __init__(self, baseline_bytes: int) -> None:
        self.baseline = baseline_bytes
        self.points: dict[int, int] = {}

    def add(self, size: int, peak: int) -> None:
        self.points[size] = peak

    def slope(self) -> float:
        sizes = sorted(self.points)
        if len(sizes) == 1:
            return max(0.0, (self.points[sizes[0]] - self.baseline) / sizes[0])
        steps = [(self.points[b] - self.points[a]) / (b - a) for a, b in itertools.pairwise(sizes)]
        return max(0.0, *steps)

    def predict(self, size: int) -> float | None:
        below = [s for s in self.points if s <= size]
        if not below:
            return None if not self.points else float(self.points[min(self.points)])
        nearest = max(below)
        return self.points[nearest] + self.slope() * (size - nearest)


class _Trials:
    """Runs (or, in predict mode, predicts) one micro-batch size at a time, logging and
    recording each: `tried` in order, and the measured peak of every size that fit."""

    def __init__(
        self,
        probe: MemoryProbe,
        usable: int,
        predict: bool,
        baseline_bytes: int,
        log: Callable[[str], None],
    ) -> None:
        self.probe, self.usable, self.predict, self.log = probe, usable, predict, log
        self.baseline = baseline_bytes
        self.predictor = _Predictor(baseline_bytes)
        self.tried: list[tuple[int, int | None, str]] = []
        self.best_peak: dict[int, int] = {}

    def fits(self, size: int) -> bool:
        usable = self.usable
        if self.predict and not self.predictor.points and self.baseline > usable:
            self.log(
                f"batch fit: {gib(self.baseline)} GiB held before any step, over the "
                f"{gib(usable)} GiB usable: nothing tried"
            )
            self.tried.append((size, self.baseline, "held"))
            return False
        guess = self.predictor.predict(size) if self.predict else None
        if guess is not None and guess > usable:
            self.log(
                f"batch fit: micro-batch {size}: predicted peak {gib(guess)} of "
                f"{gib(usable)} GiB usable, over, not tried"
            )
            self.tried.append((size, int(guess), "predicted"))
            return False
        try:
            peak = int(self.probe(size))
        except OutOfMemory:
            self.log(f"batch fit: micro-batch {size}: out of memory")
            self.tried.append((size, None, "out of memory"))
            return False
        self.predictor.add(size, peak)
        ok = peak <= usable
        verdict = "fits" if ok else "over"
        where = f"micro-batch {size}: peak {gib(peak)} of {gib(usable)} GiB usable"
        self.log(f"batch fit: {where}, {verdict}")
        self.tried.append((size, peak, verdict))
        if ok:
            self.best_peak[size] = peak
        return ok


def search_micro_batch(
    probe: MemoryProbe,
    *,
    budget_bytes: int,
    cap: int,
    margin: float = 0.1,
    predict: bool = False,
    baseline_bytes: int = 0,
    log: Callable[[str], None] = print,
) -> FitSearch:
    """The largest micro-batch in [1, cap] whose peak is at most budget x (1 - margin).

    Doubling from 1 until a size does not fit (or the cap), then bisection between the
    largest size that fits and the smallest that does not. With `predict`, a size whose
    extrapolated peak is over the usable memory counts as not fitting and is never run.
    """
    assert cap >= 1 and 0.0 <= margin < 1.0
    usable = int(budget_bytes * (1.0 - margin))
    trials = _Trials(probe, usable, predict, baseline_bytes, log)
    fits = trials.fits
    lo, hi = 0, cap + 1  # lo fits (0: none yet), hi does not
    size = 1
    while size <= cap:
        if not fits(size):
            hi = size
            break
        lo = size
        size *= 2
    if hi == cap + 1 and lo < cap:  # doubling stepped over the cap: try the cap itself
        if fits(cap):
            lo = cap
        else:
            hi = cap
    while lo >= 1 and hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return FitSearch(lo, trials.best_peak.get(lo), budget_bytes, usable, margin, cap, trials.tried)


def fit_line(plan: BatchPlan, search: FitSearch | None, how: str) -> str:
    """The one line printed at start."""
    world = f" x {plan.world_size} processes" if plan.world_size > 1 else ""
    details = []
    if search is None:
        details.append(how)
    else:
        peak = f", peak {gib(search.peak_bytes)} GiB at {search.micro_batch}"
        capped = f", capped at {search.cap}" if search.micro_batch >= search.cap else ""
        details.append(
            f"budget {gib(search.budget_bytes)} GiB {how}{peak if search.peak_bytes else ''}, "
            f"margin {search.margin:.0%}{capped}"
        )
    return (
        f"batch fit: micro-batch {plan.micro_text()} x accumulation {plan.accumulation}{world} "
        f"= global {plan.global_batch} ({'; '.join(details)})"
    )


def no_fit_error(search: FitSearch, how: str) -> Any:
    from trainforge.errors import UserError

    _, amount, note = search.tried[0] if search.tried else (1, None, "out of memory")
    need = {
        "over": f"even micro-batch 1 needs {gib(amount or 0)} GiB",
        "predicted": f"even micro-batch 1 is predicted to need {gib(amount or 0)} GiB",
        "held": f"the run holds {gib(amount or 0)} GiB before its first step",
    }.get(note, "even micro-batch 1 runs out of memory")
    return UserError(
        f"training.per_device_train_batch_size = auto: {need}, over the "
        f"{gib(search.usable_bytes)} GiB usable (budget {gib(search.budget_bytes)} GiB {how} "
        f"less a {search.margin:.0%} margin)",
        "raise hardware.memory_budget_gib or lower training.batch_fit_margin, turn on "
        "training.gradient_checkpointing, or train a smaller model",
    )


# ------------------------------------------------------------------ the run's numbers
def kept_batch(micro: int, accumulation: int, target: int) -> tuple[BatchPlan, str]:
    """The numbers a resumed run keeps from its checkpoint (not probed again), with its line:
    the effective batch `target` and, as the cap, the micro-batch that fitted; on another
    process count the accumulation is planned again under that cap."""
    from trainforge import parallel

    del accumulation  # planned again: the same where the process count is the same
    plan = plan_accumulation(micro, target, parallel.context().world_size)
    return plan, fit_line(plan, None, "kept from the checkpoint, not probed again")
