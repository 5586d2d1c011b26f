"""Heartbeats through a store: a rank whose beats stopped is named, the others are not."""

from __future__ import annotations

import time

from trainforge.parallel import heartbeat


class Store:
    """The three calls of torch's TCPStore that the heartbeats use."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.data[key] = value.encode()

    def get(self, key: str) -> bytes:
        return self.data[key]

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)


def test_a_rank_whose_heartbeat_stopped_is_silent():
    store = Store()
    now = time.time()
    store.set(heartbeat.KEY.format(rank=1), repr(now - 100))  # stopped 100 s ago
    store.set(heartbeat.KEY.format(rank=2), repr(now))
    # rank 3 never beat at all: it may never have started its heartbeat, so it is not named
    assert heartbeat.silent_ranks(store, 4, own_rank=0, stale_s=10) == [1]
    assert heartbeat.silent_ranks(store, 3, own_rank=0, stale_s=1000) == []


def test_the_beating_thread_writes_until_stopped():
    store = Store()
    heartbeat.start(store, rank=0, interval_s=0.01)
    deadline = time.monotonic() + 60
    while heartbeat.KEY.format(rank=0) not in store.data:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    heartbeat.stop()
    assert heartbeat.silent_ranks(store, 2, own_rank=1, stale_s=60) == []
