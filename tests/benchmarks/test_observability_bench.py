"""The observability benchmark in a tiny configuration: both sides run, the "on" side writes
weight histograms inside the timed window, and the table carries the ratio and the accounted
cost (no speed target is checked here: timings on a shared test machine mean nothing). The
accounting itself is checked on callbacks whose cost is known."""

from __future__ import annotations

import math
import re
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import observability as ob

from trainforge.engine.callbacks import Callback, listeners


def test_histogram_interval_puts_histograms_inside_the_timed_window():
    assert ob.DEFAULT_HISTOGRAM_STEPS == 500  # logging.histogram_steps' default
    assert ob.histogram_interval(1000) == 500  # the full benchmark: the default cadence
    assert ob.histogram_interval(300) == 150
    assert ob.histogram_interval(6) == 3
    assert ob.histogram_interval(2) == 1
    assert ob.histogram_interval(10_000) == 500  # never sparser than the default


def test_tiny_run_prints_both_sides_histograms_and_the_ratio():
    text, ratios = ob.run(steps=6, repeats=1, batch_size=4)
    ratio, share = ratios["observability_throughput_ratio"], ratios["observability_cost_share"]
    assert math.isfinite(ratio) and ratio > 0
    assert 0 < share < 1  # the logging points and the writer thread cost something
    lines = text.splitlines()
    assert "weight histograms every 3 steps inside the timed window" in lines[0]
    assert lines[1].split() == [
        "run",
        "steps/s",
        "histogram",
        "sets",
        "vs",
        "off",
        "accounted",
        "cost",
    ]
    rows = {
        cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", line.strip()) for line in lines[3:])
    }
    assert rows["off (no callbacks)"][1:] == ["0", "1.000", "-"]
    steps_per_s, sets, shown, cost = rows["on (timing + telemetry + JSONL + TensorBoard)"]
    assert int(sets) == 2  # steps 3 and 6
    assert float(shown) == round(ratio, 3)
    assert cost.startswith(f"{share * 100:.2f} % (")
    assert float(steps_per_s) > 0 and float(rows["off (no callbacks)"][0]) > 0


class Costly(Callback):
    """A callback whose cost is known: a sleep at every step end, and a helper thread that
    spins for the whole fit."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.spun = 0.0

    def on_fit_start(self, trainer) -> None:
        def spin() -> None:
            start = time.thread_time()
            while not self.stop.is_set():
                sum(range(1000))
            self.spun = time.thread_time() - start

        self.thread = threading.Thread(target=spin, daemon=True)
        self.thread.start()

    def on_step_end(self, trainer) -> None:
        time.sleep(0.01)

    def on_fit_end(self, trainer) -> None:
        self.stop.set()
        self.thread.join()


def test_the_accounting_times_each_hook_and_the_helper_threads_cpu():
    inner = Costly()
    accounted = ob.Accounted(inner)
    # The loop's per-step lists see exactly the events the wrapped callback acts on.
    assert len(listeners([accounted], "on_step_end")) == 1
    assert listeners([accounted], "on_batch_end") == []
    trainer = object()
    accounted.on_fit_start(trainer)
    for _ in range(5):
        accounted.on_step_end(trainer)
    time.sleep(0.05)  # the helper spins meanwhile
    accounted.on_fit_end(trainer)
    assert accounted.hook_s >= 5 * 0.01  # the sleeps, timed on this thread
    # The spinning thread's CPU up to the start of on_fit_end (its last instants, between
    # that reading and the join, are in the timed on_fit_end hook instead).
    assert 0 < accounted.threads_s <= inner.spun + 1e-3
    assert accounted.cost_s == accounted.hook_s + accounted.threads_s
