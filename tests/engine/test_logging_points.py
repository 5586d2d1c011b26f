"""Between logging points the training process does no TensorBoard or telemetry work: every
TensorBoard write and every telemetry reading happens at a logging point (or a histogram
step, the end of an epoch, the end of the run), on the training thread, and no sampler
thread runs beside the training."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import torch

from trainforge.engine.callbacks import Callback
from trainforge.engine.trainer import Trainer
from trainforge.hardware.telemetry import TelemetrySampler
from trainforge.observe.loggers import JsonlLogger, TensorBoardLogger
from trainforge.observe.reporting import MetricsCallback

LOGGING_STEPS, HISTOGRAM_STEPS, MAX_STEPS = 10, 20, 40


class Calls:
    """(what, global step, thread name) of every call into a writer or a source."""

    def __init__(self) -> None:
        self.trainer: Trainer | None = None
        self.seen: list[tuple[str, int, str]] = []

    def note(self, what: str) -> None:
        assert self.trainer is not None
        step = self.trainer.state.global_step
        self.seen.append((what, step, threading.current_thread().name))


class CountingSource:
    name = "counting"

    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    def sample(self) -> dict[str, float]:
        self.calls.note("telemetry")
        return {"value_pct": 1.0}

    def close(self) -> None:
        pass


class ThreadWatch(Callback):
    """The names of the live threads after every optimizer step."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def on_step_end(self, trainer: Trainer) -> None:
        self.names.update(t.name for t in threading.enumerate())


def _counting_writer(logger: TensorBoardLogger, calls: Calls) -> None:
    for method in ("add_scalar", "add_histogram", "add_text"):
        real = getattr(logger.writer, method)

        def counted(*args: Any, _real=real, _method=method, **kwargs: Any) -> Any:
            calls.note(_method)
            return _real(*args, **kwargs)

        setattr(logger.writer, method, counted)


def test_tensorboard_and_telemetry_work_only_at_logging_points(
    tmp_path: Path, points_task, points_config
) -> None:
    calls = Calls()
    task = points_task(n=64, batch_size=4)  # 16 steps per epoch
    config = points_config(
        **{"training.max_steps": MAX_STEPS, "logging.logging_steps": LOGGING_STEPS}
    )
    tensorboard = TensorBoardLogger(tmp_path / "tb")
    _counting_writer(tensorboard, calls)
    # An interval shorter than any step: a sample is due at every logging point.
    sampler = TelemetrySampler([CountingSource(calls)], 1e-6, background=False)
    metrics = MetricsCallback(
        [JsonlLogger(tmp_path / "metrics.jsonl"), tensorboard],
        LOGGING_STEPS,
        telemetry=sampler,
        histogram_steps=HISTOGRAM_STEPS,
    )
    watch = ThreadWatch()
    trainer = Trainer(
        task, config, run_dir=tmp_path, device=torch.device("cpu"), callbacks=[metrics, watch]
    )
    calls.trainer = trainer
    trainer.fit()

    epoch_ends = {16, 32}
    logging_points = set(range(LOGGING_STEPS, MAX_STEPS + 1, LOGGING_STEPS)) | epoch_ends
    histogram_steps = set(range(HISTOGRAM_STEPS, MAX_STEPS + 1, HISTOGRAM_STEPS))
    scalar_steps = {step for what, step, _ in calls.seen if what == "add_scalar"}
    telemetry_steps = {step for what, step, _ in calls.seen if what == "telemetry"}
    histogram_calls = {step for what, step, _ in calls.seen if what == "add_histogram"}
    assert scalar_steps == logging_points
    assert telemetry_steps == logging_points
    assert histogram_calls == histogram_steps
    # one telemetry reading per logging point (the end of the run flushes once more at 40)
    assert len([c for c in calls.seen if c[0] == "telemetry"]) <= len(logging_points) + 1
    assert {thread for _, _, thread in calls.seen} == {threading.current_thread().name}
    assert "telemetry" not in watch.names  # no sampler thread beside the training
    summary = sampler.summary()
    assert summary["samples"] >= len(telemetry_steps)
    assert summary["value_pct_max"] == 1.0
    records = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert sum('"split": "telemetry"' in line for line in records) >= 1


def test_on_demand_sampler_samples_at_most_once_per_interval() -> None:
    class Source:
        name = "fake"
        count = 0

        def sample(self) -> dict[str, float]:
            Source.count += 1
            return {"x": float(Source.count)}

        def close(self) -> None:
            pass

    sampler = TelemetrySampler([Source()], 3600.0, background=False)
    assert sampler.latest() == {}  # not started: nothing sampled
    sampler.start()
    first = sampler.latest()
    assert first["x"] == 1.0 and "time" in first  # the first call samples at once
    assert sampler.latest()["x"] == 1.0  # within the interval: the same sample, no reading
    assert Source.count == 1
    sampler.stop()
    assert sampler.latest()["x"] == 1.0 and Source.count == 1
    assert sampler.summary()["samples"] == 1.0
