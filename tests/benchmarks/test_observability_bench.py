"""The observability benchmark in a tiny configuration: both sides run, the "on" side writes
weight histograms inside the timed window, and the table carries the ratio (no speed target
is checked here: timings on a shared test machine mean nothing)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import observability as ob


def test_histogram_interval_puts_histograms_inside_the_timed_window():
    assert ob.DEFAULT_HISTOGRAM_STEPS == 500  # logging.histogram_steps' default
    assert ob.histogram_interval(1000) == 500  # the full benchmark: the default cadence
    assert ob.histogram_interval(300) == 150
    assert ob.histogram_interval(6) == 3
    assert ob.histogram_interval(2) == 1
    assert ob.histogram_interval(10_000) == 500  # never sparser than the default


def test_tiny_run_prints_both_sides_histograms_and_the_ratio():
    text, ratios = ob.run(steps=6, repeats=1, batch_size=4)
    ratio = ratios["observability_throughput_ratio"]
    assert math.isfinite(ratio) and ratio > 0
    lines = text.splitlines()
    assert "weight histograms every 3 steps inside the timed window" in lines[0]
    assert lines[1].split() == ["run", "steps/s", "histogram", "sets", "vs", "off"]
    off = next(line for line in lines if line.startswith("off (no callbacks)"))
    on = next(line for line in lines if line.startswith("on (timing + telemetry"))
    assert off.split()[-2:] == ["0", "1.000"]
    sets, shown = on.split()[-2:]
    assert int(sets) == 2  # steps 3 and 6
    assert float(shown) == round(ratio, 3)
    for row in (off, on):
        assert float(row.split()[-3]) > 0  # steps/s
