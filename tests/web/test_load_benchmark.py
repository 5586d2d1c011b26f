"""The load benchmark (benchmarks/web_load.py) measures what it reports, at a small size."""

from __future__ import annotations

import math
import sys

import pytest

from fakes.web import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

pytestmark = pytest.mark.slow


def test_load_benchmark_reports_latency_and_slowdown():
    import web_load

    text, ratios = web_load.run(clients=10, interval_s=0.5, steps=300, repeats=1)
    assert "training + 10 clients" in text and "web_poll_p99_ms" in text
    assert ratios["errors"] == 0
    assert 0 < ratios["web_poll_p99_ms"] < 5000
    assert math.isfinite(ratios["web_poll_slowdown"]) and ratios["web_poll_slowdown"] > -0.5
