"""Jetson telemetry through jtop (the `jetson-stats` package), when tegrastats is not at hand.

Inside a container tegrastats is often missing while the host's jtop service is reachable
through its socket (`-v /run/jtop.sock:/run/jtop.sock`); `jtop` then gives the same readings.
`readings()` maps jtop's compact `stats` dict (and its `memory` table, in KB) onto the keys the
tegrastats parser uses, so plots, reports and summaries need not know which one ran:
`ram_used_mib`, `swap_used_mib`, `cpu_util_pct`, `gpu_util_pct`, `emc_util_pct`,
`temp_<sensor>_c`, `power_<rail>_mw` and `power_total_mw`.

jtop's `stats` (jetson-stats 4.x): `CPU1`.. load in % (or "OFF"), `RAM`/`SWAP` as used
fractions, `EMC` %, `GPU` load %, `Temp <sensor>` in degrees C, `Power <rail>` and `Power TOT`
in mW. Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
from typing import Any

# jtop reports -256 C for a thermal zone with no sensor behind it, as tegrastats does.
_ABSENT_SENSOR_C = -256.0
_KB_PER_MIB = 1024.0


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None  # "OFF", datetime, strings such as the power model's name
    return float(value)


def readings(stats: dict[str, Any], memory: Any = None) -> dict[str, float]:
    """Flat numbers with units in the key from one jtop `stats` dict. Never raises."""
    out: dict[str, float] = {}
    try:
        cpus = []
        for key, value in stats.items():
            number = _number(value)
            if number is None:
                continue
            if key.startswith("CPU") and key[3:].isdigit():
                cpus.append(number)
            elif key.startswith("Temp "):
                if number > _ABSENT_SENSOR_C:
                    out[f"temp_{key[5:].strip().lower().replace(' ', '_')}_c"] = number
            elif key == "Power TOT":
                out["power_total_mw"] = number
            elif key.startswith("Power "):
                out[f"power_{key[6:].strip().lower().replace(' ', '_')}_mw"] = number
            elif key == "GPU":
                out["gpu_util_pct"] = number
            elif key == "EMC":
                out["emc_util_pct"] = number
        if cpus:
            out["cpu_util_pct"] = sum(cpus) / len(cpus)
        out.update(_memory(memory))
    except Exception:  # best effort: an odd jetson-stats release must never reach the sampler
        return out
    return out


def _memory(memory: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    with contextlib.suppress(Exception):
        ram = memory["RAM"]
        out["ram_used_mib"] = float(ram["used"]) / _KB_PER_MIB
        out["ram_total_mib"] = float(ram["tot"]) / _KB_PER_MIB
    with contextlib.suppress(Exception):
        out["swap_used_mib"] = float(memory["SWAP"]["used"]) / _KB_PER_MIB
    return out


class JtopSource:
    """A telemetry `Source` over a running jtop client.

    The constructor connects to the jtop service and raises when it cannot (package missing,
    service not running, socket not mounted); `available_sources` turns that into one note.
    """

    name = "jtop"

    def __init__(self, interval_s: float = 1.0, jtop_module: Any | None = None) -> None:
        if jtop_module is None:
            import jtop as jtop_module  # lazy and optional: the `jetson-stats` package
        self._jetson = jtop_module.jtop(interval=interval_s)
        self._jetson.start()
        self._closed = False

    def sample(self) -> dict[str, float]:
        return readings(self._jetson.stats, getattr(self._jetson, "memory", None))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(Exception):
                self._jetson.close()
