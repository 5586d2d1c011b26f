"""Hardware telemetry: sampling GPU, CPU, memory, power and temperature during a run.

A `Source` returns flat numeric readings whose keys carry their unit (`gpu0_temp_c`,
`ram_used_mib`); `available_sources()` picks the ones that work on a `Platform` (psutil always,
NVML on CUDA machines and DGX Spark, tegrastats on Jetson, or jtop there when tegrastats is
missing) and says in one line per source why any was left out. `TelemetrySampler` merges the
sources' readings into one dict with a `time` key and keeps running max/mean per key. It polls
them on a background thread (the web app's system view), or, for a training run, on demand:
when the run asks for the latest sample at a logging point and the interval has passed, so
the training process does no telemetry work between logging points and no sampler thread
takes CPU time from the training threads.

Telemetry is an observer: it must never crash or stall training, so a failing reading is
dropped and a failing source is switched off. Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import psutil

from trainforge.hardware.jtop_source import JtopSource
from trainforge.hardware.platform import Platform
from trainforge.hardware.tegrastats import TegrastatsReader, TegrastatsSource

_MIB = 1024**2
# Fallbacks for fake or very old pynvml modules that lack the constants.
_NVML_ERROR_NOT_SUPPORTED = 3
_NVML_ERROR_FUNCTION_NOT_FOUND = 13
_NVML_KINDS = ("cuda", "dgx-spark")


class Source(Protocol):
    name: str

    def sample(self) -> dict[str, float]: ...

    def close(self) -> None: ...


_NVML_METRICS = ("util", "memory", "temp", "power", "sm_clock", "throttle")


def _read_nvml(nvml: Any, handle: Any, metric: str) -> dict[str, float]:
    """One metric of one GPU, keys without the `gpu<index>_` prefix; raises what NVML raises."""
    if metric == "util":
        return {"util_pct": nvml.nvmlDeviceGetUtilizationRates(handle).gpu}
    if metric == "memory":
        info = nvml.nvmlDeviceGetMemoryInfo(handle)
        return {"mem_used_mib": info.used / _MIB, "mem_total_mib": info.total / _MIB}
    if metric == "temp":
        sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
        return {"temp_c": nvml.nvmlDeviceGetTemperature(handle, sensor)}
    if metric == "power":
        return {"power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0}  # NVML reports mW
    if metric == "sm_clock":
        clock = getattr(nvml, "NVML_CLOCK_SM", 1)
        return {"sm_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, clock)}
    # NVML 12.x renamed "throttle reasons" to "clocks event reasons" (same bitmask); drivers
    # older than the rename lack the new symbol, so fall back to the old name.
    try:
        return {"throttle_reasons": nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)}
    except Exception:
        return {"throttle_reasons": nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)}


class NvmlSource:
    """Per-GPU readings from NVML, keys `gpu<index>_<metric>`.

    Each metric is read on its own: one the board does not support (memory on a DGX Spark
    GB10, power on some boards) is dropped and never asked again, the rest still come.
    The first time a metric is dropped, `note` gets one line naming it and why (stderr by
    default); never once per sample, and once per metric however many GPUs lack it.
    The constructor raises when NVML cannot start; `available_sources` makes that a note.
    """

    name = "nvml"

    def __init__(self, nvml: Any | None = None, note: Callable[[str], None] | None = None) -> None:
        if nvml is None:
            import pynvml as nvml  # lazy: keeps `import trainforge.hardware` cheap
        nvml.nvmlInit()
        self._nvml = nvml
        self._closed = False
        try:
            count = nvml.nvmlDeviceGetCount()
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception:
            self.close()
            raise
        self._unsupported: set[tuple[int, str]] = set()
        self._noted: set[str] = set()
        self._note = note or _log

    def sample(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for index, handle in enumerate(self._handles):
            for metric in _NVML_METRICS:
                if (index, metric) in self._unsupported:
                    continue
                try:
                    values = _read_nvml(self._nvml, handle, metric)
                except Exception as error:
                    if self._is_permanent(error):
                        self._unsupported.add((index, metric))
                        self._note_dropped(index, metric, error)
                    continue  # transient (e.g. GPU busy resetting): try again next sample
                out.update({f"gpu{index}_{key}": float(value) for key, value in values.items()})
        return out

    def _note_dropped(self, index: int, metric: str, error: Exception) -> None:
        if metric in self._noted:
            return
        self._noted.add(metric)
        with contextlib.suppress(Exception):  # a note must never stop the sampler
            self._note(
                f"telemetry: NVML {metric} reading not supported on GPU {index} "
                f"({_reason(error)}); skipped"
            )

    def _is_permanent(self, error: Exception) -> bool:
        nvml_error = getattr(self._nvml, "NVMLError", None)
        if not (isinstance(nvml_error, type) and isinstance(error, nvml_error)):
            # Not an NVML answer: a missing binding or a bad return shape will not fix itself.
            return True
        permanent = {
            getattr(self._nvml, "NVML_ERROR_NOT_SUPPORTED", _NVML_ERROR_NOT_SUPPORTED),
            getattr(self._nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", _NVML_ERROR_FUNCTION_NOT_FOUND),
        }
        return getattr(error, "value", None) in permanent or "Not Supported" in str(error)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()


class PsutilSource:
    """CPU load, system RAM, and this process's resident memory including its children.

    CPU load is the busy share of the CPU times since the previous sample, kept here rather
    than in `psutil.cpu_percent(interval=None)`, whose reference point is per thread: a
    source made on one thread and sampled on the sampler's would read 0.0 first. The first
    sample waits until `MIN_CPU_WINDOW_S` has passed since the source was made, so that it
    covers enough kernel ticks (10 ms each) to be a real reading.
    """

    name = "psutil"
    MIN_CPU_WINDOW_S = 0.25

    def __init__(self) -> None:
        self._process = psutil.Process(os.getpid())
        self._cpu_times = psutil.cpu_times()
        self._cpu_at = time.monotonic()

    def _cpu_util_pct(self) -> float:
        wait = self._cpu_at + self.MIN_CPU_WINDOW_S - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        before, after = self._cpu_times, psutil.cpu_times()
        self._cpu_times, self._cpu_at = after, time.monotonic()
        return busy_pct(before, after)

    def sample(self) -> dict[str, float]:
        memory = psutil.virtual_memory()
        return {
            "cpu_util_pct": self._cpu_util_pct(),
            # total - available is what `free` calls used: page cache does not count.
            "ram_used_mib": (memory.total - memory.available) / _MIB,
            "ram_total_mib": memory.total / _MIB,
            "process_rss_mib": self._rss_bytes() / _MIB,
        }

    def _rss_bytes(self) -> int:
        # DataLoader workers are children; their memory is part of what training costs.
        total = self._process.memory_info().rss
        for child in self._process.children(recursive=True):
            with contextlib.suppress(psutil.Error):  # a worker may exit between list and read
                total += child.memory_info().rss
        return total

    def close(self) -> None:
        pass


def busy_pct(before: Any, after: Any) -> float:
    """The busy share in percent between two `psutil.cpu_times()` readings, as psutil's
    cpu_percent counts it: idle and I/O wait are not busy, guest time is already in user."""
    delta = {name: max(0.0, getattr(after, name) - getattr(before, name)) for name in after._fields}
    total = sum(delta.values()) - delta.get("guest", 0.0) - delta.get("guest_nice", 0.0)
    busy = total - delta.get("idle", 0.0) - delta.get("iowait", 0.0)
    return round(100.0 * busy / total, 1) if total > 0 else 0.0


def available_sources(
    platform: Platform,
    *,
    nvml_module: Any | None = None,
    tegrastats_path: str | None = None,
    tegrastats_interval_ms: int = 1000,
    jtop_module: Any | None = None,
) -> tuple[list[Source], list[str]]:
    """The sources that work on `platform`, and one note line per source left out. Never raises."""
    sources: list[Source] = []
    notes: list[str] = []
    try:
        sources.append(PsutilSource())
    except Exception as error:
        notes.append(f"telemetry: psutil failed ({_reason(error)}); CPU and RAM readings off")
    if platform.kind in _NVML_KINDS:
        try:
            nvml_source = NvmlSource(nvml_module)
        except Exception as error:
            notes.append(f"telemetry: NVML not available ({_reason(error)}); GPU readings off")
        else:
            sources.append(nvml_source)
    if platform.kind == "jetson":
        path = tegrastats_path or shutil.which("tegrastats")
        if path is None or not TegrastatsReader.available(path):
            # Containers often lack tegrastats but reach the host's jtop service.
            try:
                sources.append(JtopSource(tegrastats_interval_ms / 1000.0, jtop_module))
            except ImportError:
                notes.append(
                    "telemetry: tegrastats not found and jtop (pip install jetson-stats) not "
                    "installed; Jetson GPU, power and temperature readings off"
                )
            except Exception as error:
                notes.append(
                    f"telemetry: tegrastats not found and jtop failed ({_reason(error)}); "
                    "Jetson GPU, power and temperature readings off (in a container, mount "
                    "/run/jtop.sock)"
                )
        else:
            try:
                reader = TegrastatsReader(tegrastats_interval_ms, path=path)
            except Exception as error:
                notes.append(f"telemetry: tegrastats failed to start ({_reason(error)}); off")
            else:
                sources.append(TegrastatsSource(reader))
    return sources, notes


def _reason(error: BaseException) -> str:
    """The error as one short line, for notes and logs."""
    try:
        text = " ".join(str(error).split())
    except Exception:  # pynvml's __str__ calls into the driver, which may be what broke
        text = ""
    return text or type(error).__name__


class TelemetrySampler:
    """Samples every interval_s into one dict with a 'time' key.

    `background=True`: a background thread samples on its own schedule. `background=False`:
    no thread; `latest()` takes a sample when none was taken yet or `interval_s` has passed
    since the last one, so samples are taken only when the caller asks (a training run's
    logging points), at most once per interval.
    Sources are merged in list order, so a later source's key replaces an earlier one's;
    `time` is wall-clock seconds (time.time()) when the sample was taken.
    A source (or `on_sample`) that raises is logged in one stderr line and switched off.
    """

    def __init__(
        self,
        sources: list[Source],
        interval_s: float,
        on_sample: Callable[[dict[str, float]], None] | None = None,
        *,
        background: bool = True,
    ) -> None:
        assert interval_s > 0, "interval_s must be positive"
        self._sources = list(sources)
        self._interval_s = interval_s
        self._background = background
        self._started = False
        self._next_at = 0.0  # on demand: monotonic time from which the next sample is due
        self._on_sample = on_sample
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._latest: dict[str, float] = {}
        self._count = 0
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self._maxes: dict[str, float] = {}

    def start(self) -> None:
        if self._thread is not None or self._stopped or self._started:
            return
        self._started = True
        if not self._background:
            return  # sampled in latest(), on the caller's thread
        self._thread = threading.Thread(target=self._run, name="telemetry", daemon=True)
        self._thread.start()

    def latest(self) -> dict[str, float]:
        """The newest sample (a copy); on demand, a new one first when it is due."""
        if not self._background and self._started and not self._stopped:
            now = time.monotonic()
            if self._count == 0 or now >= self._next_at:
                self._next_at = now + self._interval_s
                self._sample_once()
        with self._lock:
            return dict(self._latest)

    def summary(self) -> dict[str, float]:
        """`<key>_max` and `<key>_mean` for every key but `time`, plus `samples` (the count).

        A key's mean is over the samples that had it (a source may start late or stop).
        """
        with self._lock:
            out = {"samples": float(self._count)}
            for key, total in self._sums.items():
                out[f"{key}_max"] = self._maxes[key]
                out[f"{key}_mean"] = total / self._counts[key]
            return out

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            # Bounded: a source stuck in a driver call must not hang the end of training.
            self._thread.join(timeout=max(5.0, 2 * self._interval_s))
        sources, self._sources = self._sources, []
        for source in sources:
            _close_quietly(source)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self._sample_once()
            # Fixed schedule rather than sleep(interval) so slow sources do not add drift;
            # after a stall (suspend, slow driver) start afresh instead of sampling in a burst.
            next_at = max(next_at + self._interval_s, time.monotonic())
            self._stop.wait(next_at - time.monotonic())

    def _sample_once(self) -> None:
        merged: dict[str, float] = {"time": time.time()}
        for source in list(self._sources):
            try:
                readings = source.sample()
            except Exception as error:
                self._disable(source, error)
                continue
            merged.update({k: float(v) for k, v in readings.items() if isinstance(v, int | float)})
        self._record(merged)
        if self._on_sample is not None:
            try:
                self._on_sample(dict(merged))
            except Exception as error:
                _log(f"telemetry: on_sample callback failed ({_reason(error)}); callback off")
                self._on_sample = None

    def _record(self, merged: dict[str, float]) -> None:
        with self._lock:
            self._latest = merged
            self._count += 1
            for key, value in merged.items():
                if key == "time":
                    continue
                self._sums[key] = self._sums.get(key, 0.0) + value
                self._counts[key] = self._counts.get(key, 0) + 1
                self._maxes[key] = max(self._maxes.get(key, value), value)

    def _disable(self, source: Source, error: Exception) -> None:
        name = getattr(source, "name", type(source).__name__)
        _log(f"telemetry: source {name} failed ({_reason(error)}); its readings are off")
        self._sources.remove(source)
        _close_quietly(source)


def _close_quietly(source: Source) -> None:
    with contextlib.suppress(Exception):
        source.close()


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
