"""The measured dense peak: a real matmul probe on this CPU, its arithmetic, its cache per
machine and runtime (damaged, read-only, refreshed), and `trainforge detect --peak`."""

from __future__ import annotations

import json
import re

import pytest
import torch

from fakes.in_process import run_main
from trainforge.hardware import peak_probe
from trainforge.hardware.peak_probe import CACHE_FILE, measured_peak, probe_tflops

CPU = torch.device("cpu")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(peak_probe.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache" / CACHE_FILE


def test_a_small_matmul_on_this_cpu_gives_a_plausible_rate():
    tflops = probe_tflops(CPU, "fp32", size=256, min_run_time_s=0.05)
    # Any CPU of this century does 256^3 fp32 matmuls at more than 0.1 GFLOP/s, and no CPU
    # reaches 50 TFLOP/s in fp32.
    assert 1e-4 < tflops < 50.0


def test_the_rate_is_two_n_cubed_over_the_fastest_block(monkeypatch):
    # A clock that makes the matmuls take 4, 1, 2 and 3 ms (and reads 0 ms between them).
    durations = iter([0.004, 0.001, 0.002, 0.003])
    now = [0.0]
    calls = []

    def clock():
        calls.append(now[0])
        return now[0]

    real_mm = torch.mm

    def timed_mm(a, b, out=None):
        if len(calls) > 1:  # after the deadline was read: a timed block
            now[0] += next(durations)
        return real_mm(a, b, out=out)

    monkeypatch.setattr(peak_probe.time, "perf_counter", clock)
    monkeypatch.setattr(torch, "mm", timed_mm)
    # min_run_time 0: three blocks at least, and the fourth is never run.
    assert probe_tflops(CPU, "fp32", size=64, min_run_time_s=0.0) == pytest.approx(
        2 * 64**3 / 0.001 / 1e12
    )


def test_the_peak_is_cached_per_precision_and_read_back(cache, monkeypatch):
    first = measured_peak(CPU, "fp32", size=128, min_run_time_s=0.02)
    assert not first.cached and first.tflops > 0 and first.precision == "fp32"
    entries = json.loads(cache.read_text())
    (key,) = entries
    assert "fp32" in key and f"torch {torch.__version__}" in key and "threads " in key
    monkeypatch.setattr(peak_probe, "probe_tflops", lambda *a, **k: pytest.fail("re-measured"))
    again = measured_peak(CPU, "fp32", size=128)
    assert again.cached and again.tflops == first.tflops
    monkeypatch.setattr(peak_probe, "probe_tflops", lambda *a, **k: 0.5)
    bf16 = measured_peak(CPU, "bf16", size=128)  # another precision: its own probe and entry
    assert not bf16.cached and bf16.tflops == 0.5
    assert len(json.loads(cache.read_text())) == 2
    assert measured_peak(CPU, "fp32", refresh=True).tflops == 0.5  # --refresh measures again


def test_a_damaged_cache_is_measured_again_and_rewritten(cache, monkeypatch):
    cache.parent.mkdir(parents=True)
    cache.write_text("{ not json")
    monkeypatch.setattr(peak_probe, "probe_tflops", lambda *a, **k: 0.25)
    assert measured_peak(CPU, "fp32").tflops == 0.25
    size = peak_probe.default_size(CPU)
    assert list(json.loads(cache.read_text()).values()) == [{"tflops": 0.25, "size": size}]
    key = peak_probe.cache_key(CPU, "fp32")
    cache.write_text(json.dumps({key: {"tflops": -1.0, "size": 8}}))  # nonsense: not trusted
    assert not measured_peak(CPU, "fp32").cached


def test_a_cache_that_cannot_be_written_costs_only_a_later_probe(tmp_path, monkeypatch):
    # A file where the cache folder should be: mkdir fails for root as for anyone.
    (tmp_path / "blocked").write_text("a file, not a folder")
    monkeypatch.setenv(peak_probe.CACHE_ENV, str(tmp_path / "blocked"))
    monkeypatch.setattr(peak_probe, "probe_tflops", lambda *a, **k: 0.125)
    found = measured_peak(CPU, "fp32")
    assert found.tflops == 0.125 and not found.cached
    assert not measured_peak(CPU, "fp32").cached  # nothing was written, so it measures again


def test_detect_peak_prints_the_measured_peak_and_caches_it(cli, tmp_path):
    env = {peak_probe.CACHE_ENV: str(tmp_path), "CUDA_VISIBLE_DEVICES": ""}
    first = cli("detect", "--peak", env=env, timeout=300)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    measured = [line for line in lines if line.startswith("peak (measured): ")]
    assert len(measured) == 1 and "fp32 on CPU" in measured[0]
    now = re.search(r"\(measured now, (512|1024)\^3 matmuls\)", measured[0])
    assert now, measured[0]  # 512 with up to 8 torch threads, 1024 above
    assert "peak (data sheet): none for this device; MFU uses the measured peak" in lines
    assert f"peak cache: {tmp_path / CACHE_FILE}" in lines
    again = cli("detect", "--peak", env=env, timeout=300)
    line = next(x for x in again.stdout.splitlines() if x.startswith("peak (measured): "))
    assert line == measured[0].replace(now.group(0), "(cached)")


def test_detect_without_peak_measures_nothing_and_a_bad_precision_is_one_line(tmp_path):
    env = {peak_probe.CACHE_ENV: str(tmp_path)}
    plain = run_main("detect", env=env)
    assert plain.returncode == 0 and "peak (measured)" not in plain.stdout
    assert not (tmp_path / CACHE_FILE).exists()
    bad = run_main("detect", "--peak", "--precision", "fp8", env=env)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines()[-1].startswith("--precision fp8: unknown")
