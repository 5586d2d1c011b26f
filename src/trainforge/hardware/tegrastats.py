"""Jetson `tegrastats`: parsing its one-line reports, and reading them from a live process.

`parse_line()` turns one line into flat numbers with units in the key (`ram_used_mib`,
`gpu_util_pct`, `temp_cpu_c`, `power_vdd_in_mw`, ...). The format changes between JetPack
releases (JP4 prints rails as `VDD_IN 5012/4987`, JP5 adds `mW` units and per-GPC GPU clocks
`GR3D_FREQ 0%@[305,305]`, JP6 drops the GPU clock and prefixes a timestamp), so every field is
matched on its own and an absent field just leaves its keys out.

`TegrastatsReader` runs `tegrastats --interval <ms>` and keeps the newest parsed line;
`TegrastatsSource` offers it to the telemetry sampler (re-exported by `telemetry`). Jetsons
before Thor have no NVML, so this is where their GPU load, power and temperatures come from.
Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import threading

_NUMBER = r"(-?\d+(?:\.\d+)?)"
_RAM_RE = re.compile(r"\bRAM (\d+)/(\d+)(kB|KB|MB|GB)\b")
_SWAP_RE = re.compile(r"\bSWAP (\d+)/(\d+)(kB|KB|MB|GB)\b")
_CPU_RE = re.compile(r"\bCPU \[([^\]]*)\]")
_CORE_RE = re.compile(r"^(\d+(?:\.\d+)?)%(?:@\d+)?$")
# GPU clock is a plain number before JP5 and a per-GPC list such as `@[305,305]` from JP5 on.
_GR3D_RE = re.compile(r"\bGR3D_FREQ (\d+(?:\.\d+)?)%(?:@(?:\[([\d,]*)\]|(\d+)))?")
_EMC_RE = re.compile(r"\bEMC_FREQ (\d+(?:\.\d+)?)%")
_TEMP_RE = re.compile(r"(?<![\w@.])([A-Za-z][A-Za-z0-9_]*)@" + _NUMBER + r"C(?=\s|$)")
_RAIL_MW_RE = re.compile(r"(?<![\w/@.])([A-Za-z][A-Za-z0-9_]*) (\d+)mW/(\d+)mW(?=\s|$)")
# JP4 prints rails without units (`VDD_IN 5012/4987`, `POM_5V_IN 4521/4428`); the trailing
# lookahead keeps `RAM 2862/7772MB` and `IRAM 0/252kB(...)` out.
_RAIL_BARE_RE = re.compile(r"(?<![\w/@.])([A-Z][A-Z0-9_]*) (\d+)/(\d+)(?=\s|$)")
# The board's input rail, i.e. the whole module's draw; the other rails are parts of it.
_INPUT_RAILS = ("vdd_in", "pom_5v_in")
# tegrastats prints -256C for a thermal zone with no sensor behind it (e.g. CV0 on Orin).
_ABSENT_SENSOR_C = -256.0
_TO_MIB = {"kB": 1 / 1024, "KB": 1 / 1024, "MB": 1.0, "GB": 1024.0}


def parse_line(line: str | bytes) -> dict[str, float]:
    """Numbers in one tegrastats line; {} for a line without a RAM field. Never raises.

    Every tegrastats release starts its report with the RAM field, so a line without one is
    noise (a warning, a torn write) rather than a report.
    """
    try:
        text = line.decode("utf-8", errors="replace") if isinstance(line, bytes) else str(line)
        return _parse(text)
    except Exception:  # parsing is best effort: odd input must never reach the sampler
        return {}


def _parse(text: str) -> dict[str, float]:
    ram = _RAM_RE.search(text)
    if ram is None:
        return {}
    scale = _TO_MIB[ram.group(3)]
    out = {
        "ram_used_mib": float(ram.group(1)) * scale,
        "ram_total_mib": float(ram.group(2)) * scale,
    }
    swap = _SWAP_RE.search(text)
    if swap is not None:
        out["swap_used_mib"] = float(swap.group(1)) * _TO_MIB[swap.group(3)]
    cpu = _CPU_RE.search(text)
    if cpu is not None:
        loads = [_core_load(entry) for entry in cpu.group(1).split(",")]
        online = [load for load in loads if load is not None]
        if online:
            out["cpu_util_pct"] = sum(online) / len(online)
    out.update(_gpu(text))
    emc = _EMC_RE.search(text)
    if emc is not None:
        out["emc_util_pct"] = float(emc.group(1))
    out.update(_temperatures(text))
    out.update(_power(text))
    return out


def _core_load(entry: str) -> float | None:
    """Load of one core entry such as `2%@729`; None for `off` (offline) or anything odd."""
    match = _CORE_RE.match(entry.strip())
    return float(match.group(1)) if match else None


def _gpu(text: str) -> dict[str, float]:
    match = _GR3D_RE.search(text)
    if match is None:
        return {}
    out = {"gpu_util_pct": float(match.group(1))}
    per_gpc, single = match.group(2), match.group(3)
    if single is not None:
        out["gpu_freq_mhz"] = float(single)
    elif per_gpc:
        # GPCs share one clock in practice; max is the right answer if they ever differ.
        clocks = [float(part) for part in per_gpc.split(",") if part]
        if clocks:
            out["gpu_freq_mhz"] = max(clocks)
    return out


def _temperatures(text: str) -> dict[str, float]:
    out = {}
    for name, value in _TEMP_RE.findall(text):
        celsius = float(value)
        if celsius > _ABSENT_SENSOR_C:
            out[f"temp_{name.lower()}_c"] = celsius
    return out


def _power(text: str) -> dict[str, float]:
    rails: dict[str, float] = {}
    for regex in (_RAIL_MW_RE, _RAIL_BARE_RE):
        for name, now, _average in regex.findall(text):
            rails.setdefault(name.lower(), float(now))
    if not rails:
        return {}
    out = {f"power_{name}_mw": value for name, value in rails.items()}
    inputs = [rails[name] for name in _INPUT_RAILS if name in rails]
    out["power_total_mw"] = inputs[0] if inputs else sum(rails.values())
    return out


class TegrastatsReader:
    """Runs `tegrastats --interval <ms>` and keeps the newest parsed report.

    A daemon thread reads the process's lines; `latest()` is {} until the first report
    arrives. `close()` stops the process and the thread and is safe to call twice.
    """

    def __init__(self, interval_ms: int = 1000, path: str | None = None) -> None:
        executable = path or shutil.which("tegrastats")
        if executable is None:
            raise FileNotFoundError("tegrastats not found on PATH")
        self._lock = threading.Lock()
        self._latest: dict[str, float] = {}
        # Own session, so close() can signal the whole process group: a wrapper script's
        # children would otherwise keep the pipe open and the reader thread blocked.
        self._proc = subprocess.Popen(
            [executable, "--interval", str(int(interval_ms))],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        self._thread = threading.Thread(target=self._read, name="tegrastats", daemon=True)
        self._thread.start()

    @staticmethod
    def available(path: str | None = None) -> bool:
        """Whether a tegrastats executable exists (at `path`, or on PATH when None)."""
        if path is None:
            return shutil.which("tegrastats") is not None
        return os.path.isfile(path) and os.access(path, os.X_OK)

    def latest(self) -> dict[str, float]:
        with self._lock:
            return dict(self._latest)

    def close(self) -> None:
        if self._proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self._proc.wait(timeout=2.0)
        self._thread.join(timeout=2.0)
        if self._proc.stdout is not None and not self._thread.is_alive():
            self._proc.stdout.close()

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signum)

    def _read(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None  # set by stdout=PIPE
        with contextlib.suppress(OSError, ValueError):  # pipe closed under us at shutdown
            for line in stdout:
                parsed = parse_line(line)
                if parsed:
                    with self._lock:
                        self._latest = parsed


class TegrastatsSource:
    """A telemetry `Source` over a running `TegrastatsReader` (keys as in `parse_line`)."""

    name = "tegrastats"

    def __init__(self, reader: TegrastatsReader) -> None:
        self._reader = reader

    def sample(self) -> dict[str, float]:
        return self._reader.latest()

    def close(self) -> None:
        self._reader.close()
