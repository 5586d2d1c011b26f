"""Real cgroup v1 groups for tests (root, as CI runs): a memory limit, a CPU quota, and a
command line that starts a process inside them. Every group is emptied (its processes
killed) and removed afterwards, also when the test fails."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

V1 = Path("/sys/fs/cgroup")


@dataclass
class Groups:
    folders: list[Path] = field(default_factory=list)

    def command(self, argv: list[str]) -> list[str]:
        """`argv` started inside every group (the shell joins them, then execs `argv`)."""
        joins = " && ".join(f"echo $$ > {folder}/cgroup.procs" for folder in self.folders)
        return ["sh", "-c", f'{joins} && exec "$@"', "sh", *argv]

    def read(self, controller: str, name: str) -> str:
        folder = next(f for f in self.folders if f.parent.name == controller)
        return (folder / name).read_text()

    def oom_kills(self) -> int:
        for line in self.read("memory", "memory.oom_control").splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0


def _empty(folder: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pids = [int(p) for p in (folder / "cgroup.procs").read_text().split()]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    with contextlib.suppress(OSError):
        folder.rmdir()


@contextlib.contextmanager
def cgroup_v1(memory_bytes: int | None = None, cpus: float | None = None) -> Iterator[Groups]:
    """A memory group limited to `memory_bytes` and a cpu group with a quota of `cpus`."""
    if os.geteuid() != 0 or not (V1 / "memory" / "memory.limit_in_bytes").is_file():
        pytest.fail("needs root and cgroup v1 memory and cpu controllers: run as root, as CI does")
    groups = Groups()
    name = f"trainforge-test-{uuid.uuid4().hex[:8]}"
    try:
        if memory_bytes is not None:
            folder = V1 / "memory" / name
            folder.mkdir()
            groups.folders.append(folder)
            (folder / "memory.limit_in_bytes").write_text(str(memory_bytes))
        if cpus is not None:
            folder = V1 / "cpu" / name
            folder.mkdir()
            groups.folders.append(folder)
            (folder / "cpu.cfs_period_us").write_text("100000")
            (folder / "cpu.cfs_quota_us").write_text(str(int(cpus * 100000)))
        yield groups
    finally:
        for folder in groups.folders:
            _empty(folder)
