"""Training meters: the sums of the current accumulation window and of the logging interval.

Two spans of training, two names:
- the *accumulation window* is the micro-batches of one optimizer step: `AccumulationSums`
  (checkpointed as the part "accumulation", with the partial gradients, so a checkpoint
  taken in the middle of a window resumes it exactly);
- the *logging interval* is the optimizer steps since the last logging point:
  `TrainMeter`, which turns them into the logged training metrics. It is not checkpointed:
  a resumed run starts a new interval.

Library considered: torchmetrics' `MeanMetric`/`SumMetric` keep device sums too, but they
synchronise across ranks per metric object and know nothing of skipped steps or of the
data-wait / compute split; the sums here are read once per logging point in one reduction.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from trainforge import parallel


class AccumulationSums:
    """Running sums over the micro-batches of the current optimizer step.

    Kept as device tensors; they (and the partial gradients of `params`) go into a
    checkpoint taken in the middle of an accumulation window.
    """

    def __init__(self, params: list[nn.Parameter], device: torch.device) -> None:
        self.params, self.device = params, device
        self.reset()

    def reset(self) -> None:
        self.micro = 0  # micro-batches accumulated so far in this window
        self.weight = 0
        self.samples = 0
        self.loss_sum: torch.Tensor | float = 0.0
        self.sums: dict[str, torch.Tensor] = {}

    def add(self, weighted: torch.Tensor, out: Any, samples: int) -> None:
        """Add a micro-batch: `weighted` is its detached loss times its weight, or, when the
        window is this one micro-batch (`Trainer._mean_backward`), its detached mean loss."""
        self.micro += 1
        self.weight += out.weight
        self.samples += samples
        self.loss_sum = weighted if self.micro == 1 else self.loss_sum + weighted
        for key, value in out.sums.items():
            value = value.detach()
            self.sums[key] = self.sums[key] + value if key in self.sums else value

    def state_dict(self) -> dict[str, Any] | None:
        if self.micro == 0:
            return None
        return {
            "micro": self.micro,
            "weight": self.weight,
            "samples": self.samples,
            "loss_sum": torch.as_tensor(self.loss_sum),
            "sums": dict(self.sums),
            "grads": [p.grad for p in self.params],
        }

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        self.reset()
        if not state:
            return
        self.micro, self.weight, self.samples = state["micro"], state["weight"], state["samples"]
        self.loss_sum = state["loss_sum"].to(self.device)
        self.sums = {k: v.to(self.device) for k, v in state["sums"].items()}
        for param, grad in zip(self.params, state["grads"], strict=True):
            param.grad = None if grad is None else grad.to(device=self.device, dtype=param.dtype)


class TrainMeter:
    """The training steps of the current logging interval.

    Each step's loss tensor is kept as it is (its weighted sum, or its mean with the weight
    as multiplier) and the losses are combined once, at the logging point: no tensor
    arithmetic per step, and the interval's total is summed in float64 on the host.
    `clock` (seconds) is the trainer's, which also times data waits and pauses; the peaks
    (FLOP/s: the table's or configured one, the measured one) are what MFU is against.
    """

    def __init__(
        self, clock: Callable[[], float] = time.perf_counter, peak_flops: float | None = None,
        measured_peak_flops: float | None = None,
    ) -> None:  # fmt: skip
        self.clock = clock
        self.peak_flops, self.measured_peak_flops = peak_flops, measured_peak_flops
        self.reset()

    def reset(self) -> None:
        self.losses: list[torch.Tensor] = []
        self.multipliers: list[int] = []
        self.weight = 0
        self.samples = 0
        self.steps = 0
        self.skipped = 0
        self.sums: dict[str, torch.Tensor] = {}
        self.data_s = 0.0
        self.paused_s = 0.0  # evaluation and checkpoint copies: not training time
        self.started = self.clock()

    def fold(self, step: AccumulationSums, mean: bool) -> None:
        """Add a finished step; `mean`: its loss_sum is the step's mean loss."""
        self.losses.append(step.loss_sum)  # type: ignore[arg-type]
        self.multipliers.append(step.weight if mean else 1)
        self.weight += step.weight
        self.samples += step.samples
        self.steps += 1
        for key, value in step.sums.items():
            self.sums[key] = self.sums[key] + value if key in self.sums else value

    def give_back(self, skipped: int, weight: int) -> None:
        """Steps the device-side guard skipped after they were folded in."""
        self.skipped += skipped
        self.weight -= weight

    def loss_sum(self) -> float:
        """The interval's loss summed over its items (one read of every step's loss)."""
        if not self.losses:
            return 0.0
        values = torch.stack([loss.reshape(()) for loss in self.losses]).tolist()
        return math.fsum(v * m for v, m in zip(values, self.multipliers, strict=True))

    def report(
        self,
        task: Any,
        *,
        lr: float,
        flops_per_sample: float | None,
        grad_norm: torch.Tensor | None,
    ) -> dict[str, float]:
        """The interval's metrics over every rank (one reduction); starts a new interval.

        `mfu` is against the data sheet's (or configured) peak, else the measured one;
        `mfu_measured` is against the measured peak whenever there is one."""
        peak_flops, measured_peak_flops = self.peak_flops, self.measured_peak_flops
        wall_s = max(self.clock() - self.started - self.paused_s, 1e-9)
        if self.weight == 0:
            self.reset()
            return {}
        sums = {k: float(v) for k, v in self.sums.items()}
        totals = [self.loss_sum(), self.weight, self.samples, self.data_s]
        totals, sums = sum_over_ranks(totals, sums)
        loss_sum, weight, samples = totals[0], int(totals[1]), int(totals[2])
        data_s = totals[3] / parallel.context().world_size  # time shares are averaged
        metrics = task.metrics(loss_sum, weight, sums)
        steps = max(1, self.steps)
        metrics.update(
            lr=lr,
            samples_per_s=samples / wall_s,
            step_time_s=wall_s / steps,
            data_wait_share=min(1.0, data_s / wall_s),
            compute_time_s=max(0.0, wall_s - data_s) / steps,
        )
        if task.items_name == "tokens":
            metrics["tokens_per_s"] = weight / wall_s
        if flops_per_sample:
            achieved = flops_per_sample * samples / wall_s
            metrics["model_tflops"] = achieved / 1e12
            if peak_flops or measured_peak_flops:
                metrics["mfu"] = achieved / (peak_flops or measured_peak_flops)
            if measured_peak_flops:
                metrics["mfu_measured"] = achieved / measured_peak_flops
        if grad_norm is not None:
            metrics["grad_norm"] = float(grad_norm)
        if self.skipped:
            metrics["nonfinite_steps"] = float(self.skipped)
        self.reset()
        return metrics


def sum_over_ranks(
    totals: list[float], sums: dict[str, float]
) -> tuple[list[float], dict[str, float]]:
    """`totals` and `sums` summed over every rank in one float64 reduction (as they are on
    one process)."""
    if not parallel.context().enabled:
        return totals, sums
    keys = sorted(sums)
    values = [*totals, *(sums[k] for k in keys)]
    reduced = parallel.all_reduce_sum(torch.tensor(values, dtype=torch.float64)).tolist()
    return reduced[: len(totals)], dict(zip(keys, reduced[len(totals) :], strict=True))


NO_COUNT = contextlib.nullcontext()


def flop_counter(state: Any) -> Any:
    """The model FLOPs of one training sample (forward + backward) are counted with
    torch.utils.flop_counter on the run's first micro-batch and kept in the trainer state,
    so a resumed run never counts (counting can change kernel choices, and resume must
    replay exactly what the uninterrupted run computed). `NO_COUNT` otherwise."""
    s = state
    if s.flops_per_sample is not None or s.global_step or s.batch_in_epoch or s.epoch:
        return NO_COUNT
    from torch.utils.flop_counter import FlopCounterMode

    state.flops_per_sample = 0.0  # counted once, even if counting fails below
    return FlopCounterMode(display=False)


def as_flops(tflops: float | None) -> float | None:
    """TFLOP/s (a peak from the table, the config or a measurement) as FLOP/s."""
    return tflops * 1e12 if tflops else None
