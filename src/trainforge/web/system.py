"""The System page: the detected platform, the profile `auto` picks, and live telemetry.

Telemetry reuses the hardware package's sources (psutil everywhere, NVML on CUDA machines,
tegrastats on a Jetson) on one background sampler, started with the first request and
stopped with the server.
"""

from __future__ import annotations

import threading
from typing import Any

from trainforge.hardware import Platform, pick_profile
from trainforge.hardware.telemetry import TelemetrySampler, available_sources
from trainforge.profiles import load_profile


class SystemView:
    def __init__(self, platform: Platform, interval_s: float) -> None:
        self.platform = platform
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._sampler: TelemetrySampler | None = None
        self._notes: list[str] = []

    def facts(self) -> dict[str, Any]:
        name, reason = pick_profile(self.platform)
        profile = load_profile(name)
        return {
            "platform": self.platform.describe(),
            "kind": self.platform.kind,
            "device": self.platform.device,
            "profile": {
                "name": name,
                "reason": reason,
                "description": profile.description,
                "notes": profile.notes,
                "guide": profile.guide,
            },
        }

    def telemetry(self) -> dict[str, Any]:
        with self._lock:
            if self._sampler is None:
                sources, self._notes = available_sources(self.platform)
                self._sampler = TelemetrySampler(sources, self.interval_s)
                self._sampler.start()
            sampler = self._sampler
        latest = sampler.latest()
        return {"time": latest.pop("time", None), "readings": latest, "notes": self._notes}

    def close(self) -> None:
        with self._lock:
            if self._sampler is not None:
                self._sampler.stop()
                self._sampler = None
