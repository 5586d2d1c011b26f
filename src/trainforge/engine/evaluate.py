"""Evaluation: the one loop that runs a task's model over batches without training, and the
best tracker.

`evaluate_batches` is the loop. Its caller chooses the batches, which is the hook each use
needs: the trainer passes the validation loader or its fixed subset (`fixed_subset_loader`),
the causal-LM task the test split read in order (`tasks.causal_lm.evaluate_test`), the
image task its validation loader again for a confusion matrix (`tasks.vision`), whose
per-batch counts the task's own `step` keeps in evaluation mode. Losses and metric sums
stay on the device until the end of the pass: one read per pass.

`Validation` is the trainer's part that runs them: the full pass over the validation loader
and the fast pass over its fixed subset, summed over ranks, the time paused out of the
throughput meter.

A pass returns its metrics; the loop (`Trainer.evaluate`, `Trainer.evaluate_fast`) updates
the best tracker with them and emits the event, as torchtitan's `validate(model_parts,
step)` returns to its trainer.

`BestTracker` owns the best values of a run (`state.BestValues`, checkpointed as the part
"best"): the best full-validation value with its step and epoch, and the best
fast-validation value.

Library considered: torchmetrics (metric objects with their own device state and
reduction) would replace the task's `sums`, but the task protocol already gives each metric
as a numerator over the batch weight, which one sum and one reduction serve.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from trainforge.engine import stop
from trainforge.engine.state import BestValues


@torch.no_grad()
def evaluate_batches(
    task: Any,
    model: nn.Module,
    batches: Iterable[Any],
    *,
    device: torch.device,
    precision: Any = None,
    module: nn.Module | None = None,
    stoppable: bool = False,
) -> tuple[float, int, dict[str, float]]:
    """(loss summed over items, items, metric sums) of `task.step(model, ...)` over loader
    batches, under `precision`'s autocast (fp32 without one). `module` (default `model`;
    the unwrapped model when `model` is a DDP or compiled wrapper) is in evaluation mode
    during the pass and goes back to the mode it was in. `stoppable`: a stop request
    (`engine.stop`) ends the pass between batches with `StopRequested`."""
    module = module if module is not None else model
    was_training = module.training
    module.eval()
    loss_sum: Any = 0.0
    weight, sums = 0, {}
    try:
        for raw in batches:
            if stoppable:
                stop.check()
            batch = task.to_device(raw, device, False)
            with precision.autocast() if precision is not None else contextlib.nullcontext():
                out = task.step(model, batch)
            loss_sum = loss_sum + out.loss.float() * out.weight
            weight += out.weight
            for key, value in out.sums.items():
                sums[key] = sums.get(key, 0) + value
    finally:
        module.train(was_training)
    return float(loss_sum), weight, {k: float(v) for k, v in sums.items()}


def fixed_subset_loader(loader: Any, fraction: float) -> Any:
    """A loader over an evenly spaced `fraction` of `loader`'s data set, in a fixed order."""
    from torch.utils.data import DataLoader, Subset

    dataset = loader.dataset
    total = len(dataset)
    count = max(1, round(total * fraction))
    indices = torch.linspace(0, total - 1, count).round().long().unique().tolist()
    return DataLoader(
        Subset(dataset, indices),
        batch_size=loader.batch_size,
        shuffle=False,
        collate_fn=loader.collate_fn,
        num_workers=0,
    )


class Validation:
    """A run's validation passes: `run(loader)` evaluates the training model (the wrapped
    one for the forward, the plain one for the mode), sums every rank's shard, and counts
    the time as paused in `meter`; `fast_loader` is the fixed subset, built on first use."""

    def __init__(self, task: Any, prepared: Any, *, device: torch.device, precision: Any,
                 distributed: bool, meter: Any, fast_fraction: float) -> None:  # fmt: skip
        self.task, self.prepared, self.device, self.precision = task, prepared, device, precision
        self.distributed, self.meter, self.fast_fraction = distributed, meter, fast_fraction
        self._fast_loader: Any = None

    @property
    def fast_loader(self) -> Any:
        if self._fast_loader is None:
            self._fast_loader = fixed_subset_loader(self.task.val_loader, self.fast_fraction)
        return self._fast_loader

    def full(self) -> dict[str, float]:
        """The metrics over the validation loader; {} when a stop request ended the pass."""
        try:
            return self.run(self.task.val_loader)
        except stop.StopRequested:
            return {}

    def fast(self) -> dict[str, float]:
        """The metrics over the fixed subset; {} when a stop request ended the pass."""
        try:
            return self.run(self.fast_loader)
        except stop.StopRequested:
            return {}

    def run(self, loader: Any) -> dict[str, float]:
        """The task's metrics over `loader` (a stop request ends it with StopRequested
        unless the run is distributed: every rank must finish the pass's collectives)."""
        from trainforge.engine.meters import sum_over_ranks

        started = self.meter.clock()  # the trainer's clock, which times the whole loop
        loss_sum, weight, sums = evaluate_batches(
            self.task, self.prepared.forward, loader, device=self.device,
            precision=self.precision, module=self.prepared.model, stoppable=not self.distributed,
        )  # fmt: skip
        (loss_sum, weight), sums = sum_over_ranks([loss_sum, weight], sums)  # ranks' shards
        metrics = self.task.metrics(loss_sum, int(weight), sums)
        self.meter.paused_s += self.meter.clock() - started
        return metrics


class BestTracker:
    """The best value of `metric` (greater or smaller is better) over full validations, and
    over fast validations on the fixed subset (which decide only whether to run a full one)."""

    def __init__(self, best: BestValues, metric: str, greater_is_better: bool | None) -> None:
        self.best = best
        self.metric = metric
        self.greater = greater_is_better if greater_is_better is not None else metric == "accuracy"

    def state_dict(self) -> dict[str, Any]:
        return self.best.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best.load_state_dict(state)

    def _better(self, value: float, best: float | None) -> bool:
        return best is None or (value > best if self.greater else value < best)

    def full(self, metrics: dict[str, float], step: int, epoch: int) -> bool:
        """Record a full validation; whether it improved on the best (also `best.improved`)."""
        b = self.best
        value = metrics[self.metric]
        b.improved = self._better(value, b.best_metric)
        if b.improved:
            b.best_metric, b.best_step, b.best_epoch = value, step, epoch
            b.best_loss = metrics.get("loss")
        return b.improved

    def fast(self, metrics: dict[str, float]) -> bool:
        """Record a fast validation; whether it improved on the best fast value."""
        value = metrics[self.metric]
        improved = self._better(value, self.best.best_fast)
        if improved:
            self.best.best_fast = value
        return improved
