"""The long-run benchmark: its arithmetic on made-up readings, its rows registered with
`make bench` at the module's targets, and the real module end to end at a tiny size
(100 steps, 2 s of web polling) producing every row with a number."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import long_run
import run as bench_run


def test_rss_growth_is_the_peak_after_the_start_over_the_reading_at_it():
    samples = [(0.0, 500), (1.0, 100), (2.0, 103), (3.0, 101), (9.0, 900)]
    value, first, peak = long_run.growth(samples, 1.0, 3.0)
    assert (first, peak) == (100, 103)
    assert value == pytest.approx(0.03)
    # a window between two readings (a small run on a busy machine): the readings around it
    assert long_run.growth(samples, 4.0, 5.0) == (pytest.approx(900 / 101 - 1), 101, 900)
    with pytest.raises(RuntimeError, match="no RSS reading"):
        long_run.growth([], 4.0, 5.0)


def test_throughput_compares_the_last_fifth_with_the_second():
    # 10 steps: 1 s a step up to step 4, then 2 s a step
    times = {step: float(step if step <= 4 else 4 + 2 * (step - 4)) for step in range(11)}
    second, last = long_run.fifths(times, 10)
    assert second == pytest.approx(1.0)  # steps 2 -> 4
    assert last == pytest.approx(0.5)  # steps 8 -> 10


def test_tenths_give_the_rate_of_each_tenth_of_the_run():
    times = {step: float(step if step <= 50 else 50 + 2 * (step - 50)) for step in range(101)}
    rates = long_run.tenths(times, 100)
    assert len(rates) == 10
    assert rates[:5] == pytest.approx([1.0] * 5) and rates[5:] == pytest.approx([0.5] * 5)


def test_every_row_is_registered_with_make_bench_at_the_modules_target():
    rows = {key: (target, direction) for module, key, target, direction in bench_run.BENCHMARKS
            if module == "long_run"}  # fmt: skip
    assert rows == long_run.TARGETS


@pytest.mark.slow
def test_the_module_produces_every_row_with_a_number(tmp_path):
    text, values = long_run.run(steps=100, short_steps=20, poll_s=2.0, resume_rounds=1,
                                keep=tmp_path / "work")  # fmt: skip
    assert set(values) == set(long_run.TARGETS)
    for key, value in values.items():
        assert isinstance(value, float) and math.isfinite(value), key
        assert key in text
    assert values["long_run_histogram_off_cadence"] == 0.0  # no histogram in 100 steps
    assert "PASS" in text or "MISS" in text
