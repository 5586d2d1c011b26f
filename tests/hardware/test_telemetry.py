"""Telemetry sources (fake NVML, psutil, fake tegrastats), source choice, and the sampler."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import types
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import psutil
import pytest

from trainforge.hardware import GpuInfo, JetsonInfo, Platform
from trainforge.hardware.telemetry import (
    NvmlSource,
    PsutilSource,
    TelemetrySampler,
    available_sources,
)

SRC = Path(__file__).resolve().parents[2] / "src"
JP6_LINE = (
    (Path(__file__).resolve().parent / "fixtures" / "telemetry" / "tegrastats_jp6.txt")
    .read_text()
    .splitlines()[0]
)
NOT_SUPPORTED = 3


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {NOT_SUPPORTED: "Not Supported", 12: "NVML Shared Library Not Found"}.get(
            self.value, "Unknown Error"
        )


def fake_nvml(
    gpus: int = 2, *, fail: dict[str, int] | None = None, init_error: int | None = None
) -> types.ModuleType:
    """A pynvml stand-in; `fail` maps a function name to the NVML error code it raises."""
    module = types.ModuleType("fake_pynvml")
    module.NVMLError = FakeNVMLError
    module.NVML_ERROR_NOT_SUPPORTED = NOT_SUPPORTED
    module.NVML_TEMPERATURE_GPU = 0
    module.NVML_CLOCK_SM = 1
    calls: Counter[str] = Counter()
    module.calls = calls
    fail = fail or {}

    def fn(name: str, result):
        def call(*args):
            calls[name] += 1
            if name in fail:
                raise FakeNVMLError(fail[name])
            return result(*args)

        setattr(module, name, call)

    def init() -> None:
        calls["nvmlInit"] += 1
        if init_error is not None:
            raise FakeNVMLError(init_error)

    module.nvmlInit = init
    fn("nvmlShutdown", lambda: None)
    fn("nvmlDeviceGetCount", lambda: gpus)
    fn("nvmlDeviceGetHandleByIndex", lambda index: index)
    fn("nvmlDeviceGetUtilizationRates", lambda h: SimpleNamespace(gpu=50 + h, memory=10))
    fn("nvmlDeviceGetMemoryInfo", lambda h: SimpleNamespace(used=2 * 1024**3, total=24 * 1024**3))
    fn("nvmlDeviceGetTemperature", lambda h, sensor: 60 + h)
    fn("nvmlDeviceGetPowerUsage", lambda h: 250_500)
    fn("nvmlDeviceGetClockInfo", lambda h, clock: 1980 if clock == 1 else 0)
    fn("nvmlDeviceGetCurrentClocksThrottleReasons", lambda h: 4)
    return module


def platform(kind: str) -> Platform:
    gpus = (GpuInfo(0, "NVIDIA GB10", 119.3, (12, 1)),) if kind != "cpu" else ()
    jetson = JetsonInfo("NVIDIA Jetson Orin Nano", "36.4.3", "6.2") if kind == "jetson" else None
    return Platform(
        kind, "cpu" if kind == "cpu" else "cuda", "aarch64", "linux", 4, 8.0, gpus, jetson, None
    )


# --- NVML -----------------------------------------------------------------------------------


def test_nvml_reads_every_metric_per_gpu() -> None:
    source = NvmlSource(fake_nvml(gpus=2))
    out = source.sample()
    assert out["gpu0_util_pct"] == 50.0 and out["gpu1_util_pct"] == 51.0
    assert out["gpu0_mem_used_mib"] == 2048.0 and out["gpu0_mem_total_mib"] == 24576.0
    assert out["gpu1_temp_c"] == 61.0
    assert out["gpu0_power_w"] == 250.5
    assert out["gpu0_sm_clock_mhz"] == 1980.0
    assert out["gpu0_throttle_reasons"] == 4.0
    assert len(out) == 2 * 7
    assert all(isinstance(value, float) for value in out.values())


def test_nvml_not_supported_drops_key_and_is_not_retried() -> None:
    # DGX Spark GB10: no dedicated memory; some boards: no power reading.
    module = fake_nvml(
        gpus=2,
        fail={"nvmlDeviceGetMemoryInfo": NOT_SUPPORTED, "nvmlDeviceGetPowerUsage": NOT_SUPPORTED},
    )
    source = NvmlSource(module)
    for _ in range(3):
        out = source.sample()
        assert not any("mem_" in key or "power" in key for key in out)
        assert {
            "gpu0_util_pct",
            "gpu0_temp_c",
            "gpu1_sm_clock_mhz",
            "gpu1_throttle_reasons",
        } <= set(out)
    assert module.calls["nvmlDeviceGetMemoryInfo"] == 2  # once per GPU, then remembered
    assert module.calls["nvmlDeviceGetPowerUsage"] == 2
    assert module.calls["nvmlDeviceGetUtilizationRates"] == 6


def test_nvml_not_supported_is_one_line_per_metric_never_per_sample(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The issue: a source that answers "not supported" is skipped with one line."""
    module = fake_nvml(
        gpus=2,
        fail={
            "nvmlDeviceGetMemoryInfo": NOT_SUPPORTED,  # DGX Spark GB10
            "nvmlDeviceGetPowerUsage": NOT_SUPPORTED,
            "nvmlDeviceGetTemperature": 999,  # transient: retried, never noted
        },
    )
    sampler = TelemetrySampler([NvmlSource(module)], interval_s=60)
    for _ in range(5):
        sampler._sample_once()  # the sampler's own step, without waiting for its thread
    sampler.stop()
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "telemetry: NVML memory reading not supported on GPU 0 (Not Supported); skipped",
        "telemetry: NVML power reading not supported on GPU 0 (Not Supported); skipped",
    ]
    assert "gpu1_util_pct" in sampler.latest() and "gpu0_power_w" not in sampler.latest()
    assert module.calls["nvmlDeviceGetTemperature"] == 10  # 2 GPUs x 5 samples


def test_nvml_notes_go_to_the_callback_when_given() -> None:
    notes: list[str] = []
    module = fake_nvml(gpus=1, fail={"nvmlDeviceGetClockInfo": NOT_SUPPORTED})
    source = NvmlSource(module, note=notes.append)
    for _ in range(3):
        assert "gpu0_sm_clock_mhz" not in source.sample()
    assert notes == [
        "telemetry: NVML sm_clock reading not supported on GPU 0 (Not Supported); skipped"
    ]


def test_a_failing_note_callback_never_stops_the_readings() -> None:
    def broken(_line: str) -> None:
        raise OSError("stderr closed")

    module = fake_nvml(gpus=1, fail={"nvmlDeviceGetPowerUsage": NOT_SUPPORTED})
    out = NvmlSource(module, note=broken).sample()
    assert "gpu0_power_w" not in out and out["gpu0_temp_c"] == 60.0


def test_nvml_transient_error_is_retried() -> None:
    module = fake_nvml(gpus=1, fail={"nvmlDeviceGetTemperature": 999})
    source = NvmlSource(module)
    for _ in range(3):
        assert "gpu0_temp_c" not in source.sample()
    assert module.calls["nvmlDeviceGetTemperature"] == 3


def test_nvml_prefers_clocks_event_reasons_and_survives_missing_bindings() -> None:
    module = fake_nvml(gpus=1)
    module.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: 1
    del module.nvmlDeviceGetClockInfo  # an old binding without it: AttributeError, dropped
    source = NvmlSource(module)
    out = source.sample()
    assert out["gpu0_throttle_reasons"] == 1.0
    assert "gpu0_sm_clock_mhz" not in out and "gpu0_util_pct" in out


def test_nvml_old_driver_without_clocks_event_reasons_uses_throttle_reasons() -> None:
    def missing_symbol(_handle: int) -> int:
        raise FakeNVMLError(13)  # NVML_ERROR_FUNCTION_NOT_FOUND

    module = fake_nvml(gpus=1)
    module.nvmlDeviceGetCurrentClocksEventReasons = missing_symbol
    assert NvmlSource(module).sample()["gpu0_throttle_reasons"] == 4.0


def test_nvml_close_is_idempotent() -> None:
    module = fake_nvml(gpus=1)
    source = NvmlSource(module)
    source.close()
    source.close()
    assert module.calls["nvmlShutdown"] == 1


def test_nvml_count_failure_shuts_down_and_raises() -> None:
    module = fake_nvml(gpus=1, fail={"nvmlDeviceGetCount": 999})
    with pytest.raises(FakeNVMLError):
        NvmlSource(module)
    assert module.calls["nvmlShutdown"] == 1


# --- choosing sources -----------------------------------------------------------------------


def names(sources) -> list[str]:
    return [source.name for source in sources]


def test_nvml_library_missing_gives_one_note() -> None:
    sources, notes = available_sources(platform("cuda"), nvml_module=fake_nvml(init_error=12))
    assert names(sources) == ["psutil"]
    assert notes == [
        "telemetry: NVML not available (NVML Shared Library Not Found); GPU readings off"
    ]


def test_pynvml_not_installed_gives_one_note(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    sources, notes = available_sources(platform("dgx-spark"))
    assert names(sources) == ["psutil"]
    assert len(notes) == 1 and "\n" not in notes[0]
    assert notes[0].startswith("telemetry: NVML not available (")


def test_dgx_spark_and_cuda_get_nvml() -> None:
    for kind in ("dgx-spark", "cuda"):
        sources, notes = available_sources(platform(kind), nvml_module=fake_nvml(gpus=1))
        assert (names(sources), notes) == (["psutil", "nvml"], [])
        for source in sources:
            source.close()


def test_cpu_platform_gets_psutil_only() -> None:
    module = fake_nvml()
    sources, notes = available_sources(platform("cpu"), nvml_module=module)
    assert (names(sources), notes) == (["psutil"], [])
    assert module.calls["nvmlInit"] == 0


def test_jetson_without_tegrastats_gives_one_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    sources, notes = available_sources(platform("jetson"), nvml_module=fake_nvml())
    assert names(sources) == ["psutil"]
    assert len(notes) == 1 and notes[0].startswith("telemetry: tegrastats not found")
    _, notes = available_sources(platform("jetson"), tegrastats_path=str(tmp_path / "nope"))
    assert len(notes) == 1


def test_jetson_with_tegrastats(tmp_path: Path) -> None:
    script = tmp_path / "tegrastats"
    script.write_text(f"#!/bin/sh\nwhile true; do echo '{JP6_LINE}'; sleep 0.05; done\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    sources, notes = available_sources(
        platform("jetson"), tegrastats_path=str(script), tegrastats_interval_ms=50
    )
    assert (names(sources), notes) == (["psutil", "tegrastats"], [])
    sampler = TelemetrySampler(sources, interval_s=0.02)
    sampler.start()
    try:
        assert wait_for(lambda: "power_vdd_in_mw" in sampler.latest())
        latest = sampler.latest()
        assert latest["gpu_util_pct"] == 45.0 and "process_rss_mib" in latest
    finally:
        sampler.stop()


# --- psutil ---------------------------------------------------------------------------------


def test_psutil_source_sane_numbers() -> None:
    source = PsutilSource()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10)"])
    try:
        assert wait_for(lambda: psutil.Process(child.pid).memory_info().rss > 1024**2)
        out = source.sample()
        own_mib = psutil.Process(os.getpid()).memory_info().rss / 1024**2
    finally:
        child.kill()
        child.wait()
    assert set(out) == {"cpu_util_pct", "ram_used_mib", "ram_total_mib", "process_rss_mib"}
    assert 0.0 <= out["cpu_util_pct"] <= 100.0
    assert 0.0 < out["ram_used_mib"] < out["ram_total_mib"]
    assert out["process_rss_mib"] > own_mib  # the child counts too
    assert out["process_rss_mib"] < out["ram_total_mib"]
    source.close()


def test_psutil_first_cpu_reading_covers_the_time_since_the_source_was_made(monkeypatch):
    """The System page makes the source on a request thread and samples it on the sampler's:
    the first reading is the busy share since the source was made (psutil's cpu_percent
    keeps its reference per thread, so it read 0.0 there), over at least MIN_CPU_WINDOW_S."""
    import threading
    from collections import namedtuple

    fields = "user nice system idle iowait irq softirq steal guest guest_nice"
    cpu_times = namedtuple("scputimes", fields)  # psutil's own shape on Linux

    def times(**values: float):
        return cpu_times(**{name: values.get(name, 0.0) for name in fields.split()})

    readings = [times(user=10.0, idle=90.0), times(user=13.0, idle=91.0, guest=0.5)]
    real = psutil.cpu_times
    out: list[dict[str, float]] = []
    thread = threading.Thread(target=lambda: out.append(source.sample()))
    ours = (threading.current_thread(), thread)  # a sampler an earlier test left reads psutil

    def fake_cpu_times(percpu=False):
        return readings.pop(0) if threading.current_thread() in ours else real(percpu)

    monkeypatch.setattr(psutil, "cpu_times", fake_cpu_times)
    source = PsutilSource()
    made_at = time.monotonic()
    thread.start()
    thread.join()
    # 3 s busy (user; guest time is already in user) of 4 s: 75 %.
    assert out[0]["cpu_util_pct"] == 75.0
    assert time.monotonic() - made_at >= PsutilSource.MIN_CPU_WINDOW_S
    assert readings == []


# --- sampler --------------------------------------------------------------------------------


class CountingSource:
    def __init__(self, name: str = "fake") -> None:
        self.name = name
        self.calls = 0
        self.closed = 0

    def sample(self) -> dict[str, float]:
        self.calls += 1
        return {"fake_temp_c": float(40 + self.calls % 5), "fake_steps": float(self.calls)}

    def close(self) -> None:
        self.closed += 1


class RaisingSource(CountingSource):
    def sample(self) -> dict[str, float]:
        self.calls += 1
        raise RuntimeError("sensor went away\nsecond line")


def wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_sampler_collects_and_summarises() -> None:
    seen: list[dict[str, float]] = []
    source = CountingSource()
    sampler = TelemetrySampler([source], interval_s=0.02, on_sample=seen.append)
    sampler.start()
    assert wait_for(lambda: len(seen) >= 8)
    sampler.stop()
    summary = sampler.summary()
    assert summary["samples"] == len(seen)
    for key in ("fake_temp_c", "fake_steps"):
        values = [sample[key] for sample in seen]
        assert summary[f"{key}_max"] == max(values)
        assert summary[f"{key}_mean"] == pytest.approx(sum(values) / len(values))
    assert "time_max" not in summary and "time_mean" not in summary
    latest = sampler.latest()
    assert latest == seen[-1]
    assert latest["time"] == pytest.approx(time.time(), abs=5)
    times = [sample["time"] for sample in seen]
    assert times == sorted(times)
    # Interval respected: 8 samples at 0.02 s take at least ~0.14 s.
    assert times[-1] - times[0] >= 0.02 * (len(times) - 1) * 0.7


def test_raising_source_disabled_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = CountingSource("good"), RaisingSource("boom")
    sampler = TelemetrySampler([bad, good], interval_s=0.02)
    sampler.start()
    assert wait_for(lambda: good.calls >= 5)
    sampler.stop()
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "telemetry: source boom failed (sensor went away second line); its readings are off"
    ]
    assert bad.calls == 1 and bad.closed == 1
    assert good.closed == 1
    assert sampler.summary()["fake_steps_max"] >= 5


def test_failing_callback_logged_once_and_sampling_goes_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = CountingSource()

    def callback(_sample: dict[str, float]) -> None:
        raise ValueError("disk full")

    sampler = TelemetrySampler([source], interval_s=0.02, on_sample=callback)
    sampler.start()
    assert wait_for(lambda: source.calls >= 4)
    sampler.stop()
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_stop_is_idempotent_and_closes_sources_once() -> None:
    source = CountingSource()
    sampler = TelemetrySampler([source], interval_s=0.02)
    sampler.start()
    assert wait_for(lambda: source.calls >= 1)
    sampler.stop()
    sampler.stop()
    assert source.closed == 1
    calls = source.calls
    sampler.start()  # no restart after stop
    time.sleep(0.06)
    assert source.calls == calls
    # This sampler's thread has ended (another test's sampler may still be winding down).
    assert sampler._thread is not None and not sampler._thread.is_alive()


def test_stop_without_start_closes_sources() -> None:
    source = CountingSource()
    sampler = TelemetrySampler([source], interval_s=1.0)
    sampler.stop()
    sampler.stop()
    assert source.closed == 1
    assert sampler.latest() == {}
    assert sampler.summary() == {"samples": 0.0}


def test_stop_is_prompt_with_a_long_interval() -> None:
    sampler = TelemetrySampler([CountingSource()], interval_s=30.0)
    sampler.start()
    started = time.monotonic()
    sampler.stop()
    assert time.monotonic() - started < 2.0


# --- import cost ----------------------------------------------------------------------------


def test_telemetry_and_tegrastats_do_not_import_torch(run_without_torch) -> None:
    code = (
        "import sys\n"
        "import trainforge.hardware as h\n"
        "from trainforge.hardware import telemetry, tegrastats\n"
        "tegrastats.parse_line('RAM 1/2MB')\n"
        "sources, notes = telemetry.available_sources(h.detect())\n"
        "s = telemetry.TelemetrySampler(sources, 0.01); s.start(); s.stop(); s.summary()\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    run_without_torch(code)


# --- jtop (jetson-stats) ----------------------------------------------------------------------

JTOP = json.loads(
    (Path(__file__).resolve().parent / "fixtures" / "telemetry" / "jtop_orin_nano.json").read_text()
)


class FakeJtop:
    """Stands in for `jtop.jtop`: `start()` connects to the service, `stats`/`memory` read."""

    instances: ClassVar[list[FakeJtop]] = []

    def __init__(self, interval: float = 1.0, fail: Exception | None = None) -> None:
        self.interval, self.fail, self.closed = interval, fail, 0
        FakeJtop.instances.append(self)

    def start(self) -> None:
        if self.fail is not None:
            raise self.fail

    @property
    def stats(self) -> dict:
        return JTOP["stats"]

    @property
    def memory(self) -> dict:
        return JTOP["memory"]

    def close(self) -> None:
        self.closed += 1


def fake_jtop(fail: Exception | None = None) -> types.SimpleNamespace:
    return types.SimpleNamespace(jtop=lambda interval: FakeJtop(interval, fail))


def test_jtop_stats_map_onto_the_tegrastats_keys() -> None:
    from trainforge.hardware.jtop_source import readings

    got = readings(JTOP["stats"], JTOP["memory"])
    assert got["gpu_util_pct"] == 87.5 and got["emc_util_pct"] == 23.0
    assert got["cpu_util_pct"] == pytest.approx((35 + 41 + 28 + 36) / 4)  # offline cores out
    assert got["ram_used_mib"] == pytest.approx(4846240 / 1024)
    assert got["ram_total_mib"] == pytest.approx(7802832 / 1024)
    assert got["swap_used_mib"] == pytest.approx(160768 / 1024)
    assert got["temp_gpu_c"] == 54.3 and got["temp_tj_c"] == 55.2
    assert "temp_cv0_c" not in got  # -256: no sensor behind the zone
    assert got["power_vdd_in_mw"] == 8954.0 and got["power_total_mw"] == 8954.0
    assert got["power_vdd_cpu_gpu_cv_mw"] == 4120.0
    assert all(isinstance(v, float) for v in got.values())
    # The same names as the tegrastats parser gives for the same board.
    from trainforge.hardware.tegrastats import parse_line

    assert {"gpu_util_pct", "ram_used_mib", "power_vdd_in_mw", "power_total_mw"} <= set(
        parse_line(JP6_LINE)
    )


def test_jtop_odd_input_never_raises() -> None:
    from trainforge.hardware.jtop_source import readings

    assert readings({"GPU": "OFF", "Temp x": None, "nvp model": "MAXN"}, None) == {}
    assert readings({"CPU1": True}, {"RAM": {"tot": "?"}}) == {}


def test_jetson_without_tegrastats_uses_jtop(tmp_path: Path) -> None:
    FakeJtop.instances.clear()
    sources, notes = available_sources(
        platform("jetson"),
        tegrastats_path=str(tmp_path / "nope"),
        tegrastats_interval_ms=500,
        jtop_module=fake_jtop(),
    )
    assert (names(sources), notes) == (["psutil", "jtop"], [])
    assert FakeJtop.instances[-1].interval == 0.5
    sampler = TelemetrySampler(sources, interval_s=0.02)
    sampler.start()
    try:
        assert wait_for(lambda: "power_vdd_in_mw" in sampler.latest())
        assert sampler.latest()["gpu_util_pct"] == 87.5
    finally:
        sampler.stop()
    assert FakeJtop.instances[-1].closed == 1


def test_jtop_service_down_is_one_note(tmp_path: Path) -> None:
    sources, notes = available_sources(
        platform("jetson"),
        tegrastats_path=str(tmp_path / "nope"),
        jtop_module=fake_jtop(fail=RuntimeError("The jtop.service is not active")),
    )
    assert names(sources) == ["psutil"]
    assert len(notes) == 1
    assert "jtop failed (The jtop.service is not active)" in notes[0]
    assert "/run/jtop.sock" in notes[0]


def test_tegrastats_is_preferred_over_jtop(tmp_path: Path) -> None:
    script = tmp_path / "tegrastats"
    script.write_text(f"#!/bin/sh\nwhile true; do echo '{JP6_LINE}'; sleep 0.05; done\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    FakeJtop.instances.clear()
    sources, _ = available_sources(
        platform("jetson"), tegrastats_path=str(script), jtop_module=fake_jtop()
    )
    try:
        assert names(sources) == ["psutil", "tegrastats"] and not FakeJtop.instances
    finally:
        for source in sources:
            source.close()
