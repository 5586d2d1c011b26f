"""The load benchmark (benchmarks/web_load.py) at its real load, 50 concurrent clients polling
a run's status while it trains, switched on and off in alternate windows, on a short run: it
reports p99 latency and the training slowdown under the keys benchmarks/run.py reads, and the
status endpoint meets the issue's p99 < 200 ms target. The slowdown is only checked for being
measured from windows of both kinds: on a short run on a shared machine it is noise, and the
benchmark's own rounds judge it."""

from __future__ import annotations

import math
import sys

import pytest

from fakes.web import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

pytestmark = pytest.mark.slow


def test_load_benchmark_with_50_clients_reports_p99_and_slowdown():
    import web_load

    text, ratios = web_load.run(clients=50, interval_s=0.5, steps=2500, repeats=1, window_s=1.0)
    print(text)  # the measured numbers, in the log of `make test-slow -s`
    assert "50 clients polling" in text and "clients off" in text
    assert f"web_poll_p99_ms = {ratios['web_poll_p99_ms']:.1f}" in text
    assert f"web_poll_slowdown = {ratios['web_poll_slowdown']:+.3f}" in text
    by_round = next(line for line in text.splitlines() if line.startswith("slowdown by round: "))
    rounds = [float(x) for x in by_round.split(": ")[1].split()]
    assert rounds == [round(ratios["web_poll_slowdown"], 3)]  # one round: the pooled verdict
    assert ratios["windows"] >= 3, text  # the run spanned windows of both kinds
    assert ratios["errors"] == 0
    assert ratios["requests"] >= 100, ratios  # enough polls for a p99 that means something
    assert math.isfinite(ratios["web_poll_slowdown"]) and ratios["web_poll_slowdown"] > -0.5
    assert 0 < ratios["web_poll_p50_ms"] <= ratios["web_poll_p99_ms"]
    assert ratios["web_poll_p99_ms"] < web_load.P99_TARGET_MS, text
