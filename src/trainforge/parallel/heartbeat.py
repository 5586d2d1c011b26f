"""Heartbeats of a job's ranks through the rendezvous store, so that a rank whose collective
timed out names the peer that went silent (stopped by SIGSTOP or a debugger, hung in a
driver, frozen by a swapping node) instead of only saying that a collective timed out.

Each rank's daemon thread writes the time under `trainforge/alive/RANK` every interval, in
the store torchrun's agent (or the env:// rendezvous) holds, which serves several threads.
A collective waits at most `hardware.distributed_timeout_s`; the rank it fails on then reads
the other ranks' heartbeats: one that is older than half that timeout names the silent rank.

Considered: torch's `monitored_barrier` (names the ranks that miss a barrier, but Gloo only,
and the loop would need one at every step, a round trip per step, and the process group is
not usable any more once a collective timed out).
"""

from __future__ import annotations

import threading
import time
from typing import Any

KEY = "trainforge/alive/{rank}"
_STOPS: list[threading.Event] = []  # one per beating thread; `stop` ends them all


def start(store: Any, rank: int, interval_s: float) -> None:
    """Beat every `interval_s` seconds until `stop()` (or the process ends)."""
    stopped = threading.Event()
    _STOPS.append(stopped)
    key = KEY.format(rank=rank)

    def beat() -> None:
        while not stopped.is_set():
            try:
                store.set(key, repr(time.time()))
            except Exception:  # the store went with its host: nothing to tell any more
                return
            stopped.wait(interval_s)

    threading.Thread(target=beat, name="trainforge-heartbeat", daemon=True).start()


def stop() -> None:
    while _STOPS:
        _STOPS.pop().set()


def silent_ranks(store: Any, world_size: int, own_rank: int, stale_s: float) -> list[int]:
    """The other ranks whose last heartbeat is older than `stale_s` seconds (a rank that never
    beat is not counted: it may never have started its heartbeat)."""
    now, silent = time.time(), []
    for rank in range(world_size):
        if rank == own_rank:
            continue
        key = KEY.format(rank=rank)
        try:
            if not store.check([key]):
                continue
            last = float(store.get(key).decode())
        except Exception:  # the store went with its host
            return []
        if now - last > stale_s:
            silent.append(rank)
    return silent
