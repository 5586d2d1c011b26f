"""Latency and quality measurement shared by the export summaries and `bench-infer`.

A latency is the wall time of one call of a predictor on a fixed input, from host array in to
host array out (so CUDA timings include the copies an application pays), after warm-up calls
that are not counted. p50 / p99 are taken over a fixed number of timed calls; throughput is
batch size / mean call time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from torch import Tensor

Predict = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Latency:
    batch_size: int
    runs: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    samples_per_s: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def measure_latency(predict: Predict, inputs: np.ndarray, *, warmup: int, runs: int) -> Latency:
    """Time `runs` calls of `predict(inputs)` after `warmup` untimed ones."""
    assert runs >= 1 and warmup >= 0
    for _ in range(warmup):
        predict(inputs)
    times = np.empty(runs)
    for i in range(runs):
        start = time.perf_counter()
        predict(inputs)
        times[i] = time.perf_counter() - start
    mean_s = float(times.mean())
    return Latency(
        batch_size=int(inputs.shape[0]),
        runs=runs,
        p50_ms=float(np.percentile(times, 50) * 1e3),
        p99_ms=float(np.percentile(times, 99) * 1e3),
        mean_ms=mean_s * 1e3,
        samples_per_s=inputs.shape[0] / mean_s,
    )


def predict_all(predict: Predict, batches: Sequence[tuple[Tensor, Tensor]]) -> np.ndarray:
    """Outputs of `predict` over every batch, stacked."""
    return np.concatenate([predict(inputs.numpy()) for inputs, _ in batches])


def targets_of(batches: Sequence[tuple[Tensor, Tensor]]) -> np.ndarray:
    return np.concatenate([targets.numpy() for _, targets in batches])
