"""The web load benchmark's arithmetic on runs whose rates are known: each window's rate from
the run's own records, the pooled slowdown, and the noise the table prints (the benchmark
itself, with a server, clients and a training, runs in tests/web/test_load_benchmark.py)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import web_load as wl


def _records(rates: list[float], window_s: float = 1.0, every: int = 20):
    """A run's train records (time, step) at `rates` steps/s, one rate per window, from t=100:
    a record every `every` steps, the time each step count is reached."""
    records, step, t = [], 0, 100.0
    for rate in rates:
        end = t + window_s
        while True:
            nxt = t + every / rate
            if nxt > end:
                break
            t, step = nxt, step + every
            records.append((round(t, 6), step))
        t = end  # the fraction of a record interval left over is lost: fine for the check
    return records


def _windows(n: int, first_on: bool, window_s: float = 1.0):
    return [((i % 2 == 0) == first_on, 100.0 + i * window_s, 100.0 + (i + 1) * window_s)
            for i in range(n)]  # fmt: skip


def test_each_window_reads_its_own_rate_after_settling():
    rates = [300.0, 240.0, 300.0, 240.0]
    got = wl._window_rates(_records(rates), _windows(4, first_on=False), settle_s=0.25)
    assert [on for on, _, _ in got] == [False, True, False, True]
    for (_, steps, seconds), rate in zip(got, rates, strict=True):
        assert steps / seconds == pytest.approx(rate, rel=0.02)


def test_a_window_with_too_few_records_is_dropped():
    windows = _windows(3, first_on=True)
    records = [r for r in _records([300.0, 300.0, 300.0]) if not 101.0 <= r[0] < 101.9]
    got = wl._window_rates(records, windows, settle_s=0.25)
    assert [on for on, _, _ in got] == [True, True]  # the middle, "off" window had none


def test_the_slowdown_is_seconds_per_step_on_against_off():
    # 20 % fewer steps per second with the clients on: 1/0.8 - 1 = +25 % time per step.
    got = [(False, 300, 1.0), (True, 240, 1.0), (False, 300, 1.0), (True, 240, 1.0)]
    assert wl._slowdown(got) == pytest.approx(0.25)
    # A host that halves its speed for the second pair slows both kinds alike.
    got = [(False, 300, 1.0), (True, 240, 1.0), (False, 150, 1.0), (True, 120, 1.0)]
    assert wl._slowdown(got) == pytest.approx(0.25)
    assert wl._slowdown([(False, 300, 1.0), (True, 300, 1.0)]) == pytest.approx(0.0)


def test_the_noise_is_the_spread_of_each_window_against_its_neighbours():
    steady = [[(i % 2 == 1, 240 if i % 2 else 300, 1.0) for i in range(9)]]
    sd, error = wl._noise(steady)
    assert sd == pytest.approx(0.0, abs=1e-12) and error == pytest.approx(0.0, abs=1e-12)
    jumpy = [[(i % 2 == 1, (240 if i % 2 else 300) * (1.2 if i % 4 < 2 else 0.8), 1.0)
              for i in range(41)]]  # fmt: skip
    sd, error = wl._noise(jumpy)
    assert sd > 0.1 and error == pytest.approx(sd / math.sqrt(39))
    assert all(math.isnan(x) for x in wl._noise([[(False, 300, 1.0), (True, 240, 1.0)]]))


def test_the_report_refuses_a_run_too_short_for_both_kinds():
    only_off = [[(False, 300, 1.0)]]
    totals = {"errors": 0, "not_modified": 0, "server_cpu_s": 0.0, "client_cpu_s": 0.0}
    load = {"clients": 50, "interval_s": 0.5, "window_s": 1.0, "settle_s": 0.25}
    with pytest.raises(RuntimeError, match="too short"):
        wl._report(only_off, [0.001], totals, 10, load, 100)
