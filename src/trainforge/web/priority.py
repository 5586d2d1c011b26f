"""The server's CPU priority: below the trainings it starts, which keep the user's own.

Linux keeps a nice value per thread, a new thread or process inherits the nice value of the
thread that creates it, and an unprivileged process may raise a nice value (lower its
priority) but never lower it again. So `trainforge serve` first starts one launcher thread,
at the priority the server was started with, then raises the nice value of every other
thread of the server by `SERVER_NICENESS`; threads started later (request workers, event
streams, the watchers of running trainings) inherit the lower priority from the thread that
starts them. Every training is started from the launcher thread, so it runs at the priority
the user started the server with, and on a busy machine the scheduler serves the trainings
before the server's pages and polls. Elsewhere than Linux a nice value belongs to the whole
process, so the server keeps its priority there (lowering it would lower the trainings).
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from concurrent.futures import Future
from typing import Any

# How much lower the server runs than its trainings (a nice value 0..19 above theirs).
SERVER_NICENESS = 10


class Launcher:
    """Starts processes from one thread that keeps the priority it was created at."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="launcher", daemon=True)
        self._thread.start()
        self.native_id: int = self._call(threading.get_native_id)

    def popen(self, argv: list[str], **options: Any) -> subprocess.Popen:
        """`subprocess.Popen(argv, **options)`, run on the launcher thread."""
        return self._call(subprocess.Popen, argv, **options)

    def _call(self, function, *args: Any, **kwargs: Any):
        future: Future = Future()
        self._jobs.put((future, function, args, kwargs))
        return future.result()

    def _loop(self) -> None:
        while True:
            future, function, args, kwargs = self._jobs.get()
            try:
                future.set_result(function(*args, **kwargs))
            except BaseException as err:  # handed to the caller, who raises it
                future.set_exception(err)


def nice_of(pid: int, tid: int | None = None) -> int:
    """The nice value of a process's main thread, or of thread `tid` (/proc's stat field 19)."""
    path = f"/proc/{pid}/task/{tid}/stat" if tid is not None else f"/proc/{pid}/stat"
    with open(path, encoding="utf-8") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[16])  # fields after "(comm)" start at field 3


def lower_server_priority(launcher: Launcher, steps: int = SERVER_NICENESS) -> int | None:
    """Raise the nice value of every thread of this process but the launcher's by `steps`;
    returns the server's nice value now (None where nice values are per process)."""
    if not sys.platform.startswith("linux") or steps <= 0:
        return None
    own = None
    for name in os.listdir(f"/proc/{os.getpid()}/task"):
        tid = int(name)
        if tid == launcher.native_id:
            continue
        try:
            now = os.getpriority(os.PRIO_PROCESS, tid)
            os.setpriority(os.PRIO_PROCESS, tid, min(19, now + steps))
        except (ProcessLookupError, PermissionError):
            continue  # a thread that just ended
        if tid == threading.get_native_id():
            own = os.getpriority(os.PRIO_PROCESS, tid)
    return own
