"""Imported by Python at start when this folder is on PYTHONPATH: with
TRAINFORGE_TEST_HOG_AFTER=PATH set, a thread waits until PATH exists (a checkpoint folder)
and then takes memory until the kernel's OOM killer ends the process, as a run that does not
fit its container's or Slurm job's memory limit is ended."""

from __future__ import annotations

import os
import threading
import time

_PATH = os.environ.get("TRAINFORGE_TEST_HOG_AFTER")


def _hog(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.02)
    hoard = []
    while True:
        hoard.append(b"\x01" * (32 << 20))  # written, so resident: charged to the cgroup


if _PATH:
    threading.Thread(target=_hog, args=(_PATH,), daemon=True).start()
