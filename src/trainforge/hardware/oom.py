"""Recognising a run the kernel's OOM killer ended: what a start records, and what the next
start (and the web app) conclude from it.

The OOM killer ends a process with SIGKILL: nothing in it runs, so the run cannot say why it
ended. At start a run records (`begin`) its process id, its memory cgroup, the cgroup's
OOM-kill count then and its memory limit in a small file of the run folder; a run that ends
by itself (finished, failed, stopped) removes the file (`end_all`). A file still there names a
start that was killed. `previous_end` then looks for evidence that it was killed for memory:
the cgroup's OOM-kill count grew (cgroup v1 `memory.oom_control`, v2 `memory.events`), or
the kernel log (`/dev/kmsg`, readable as root outside most containers) names the process.

Considered: psutil (no OOM information) and systemd-oomd/journald (not on Jetson images,
containers or most Slurm nodes). The cgroup counters and the kernel log are what the kernel
itself offers.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any

from trainforge.hardware import limits

_RECORDED: list[Path] = []  # files this process wrote, removed when its run ends
FIX = "lower the micro-batch or use --batch_size auto"


def _memory_folder(root: Path) -> Path | None:
    """This process's own memory cgroup folder (v1 or v2), where its OOM count lives."""
    paths = limits._cgroup_paths(root)
    if "memory" in paths:
        chain = limits._chain(root / limits.CGROUP_ROOT / "memory", paths["memory"])
        return chain[0] if chain else None
    mount = limits._v2_mount(root)
    if mount is not None and "" in paths:
        chain = limits._chain(mount, paths[""])
        return chain[0] if chain else None
    return None


def oom_kills(folder: Path | None) -> int | None:
    """The OOM kills counted in a memory cgroup folder; None when unreadable."""
    if folder is None:
        return None
    for name in ("memory.events", "memory.oom_control"):
        text = limits._read(folder / name)
        if text is None:
            continue
        match = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
        if match:
            return int(match.group(1))
    return None


def begin(path: Path, root: Path = Path("/")) -> None:
    """Record this start in `path` (a run folder's process file)."""
    folder = _memory_folder(root)
    budget = limits.memory_budget(limits.host_memory_bytes(), root)
    record = {
        "pid": os.getpid(),
        "memory_cgroup": str(folder) if folder else None,
        "oom_kills": oom_kills(folder),
        "memory_limit_bytes": budget.value,
        "memory_source": budget.source,
    }
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(json.dumps(record), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        return  # a disk that refuses this is reported by the run's own writes
    _RECORDED.append(path)


def end_all() -> None:
    """The runs of this process ended by themselves: their records go."""
    while _RECORDED:
        with contextlib.suppress(OSError):
            _RECORDED.pop().unlink(missing_ok=True)


def _kernel_log_names(pid: int, kmsg: Path) -> bool:
    """Whether the kernel log says it killed `pid` for memory (needs root; else False)."""
    pattern = re.compile(rf"(Killed process {pid}\b|oom-kill:.*\bpid={pid}\b)")
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        for _ in range(200_000):  # one record per read; the ring holds far fewer
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                return False
            except OSError:  # EPIPE: a record was overwritten while reading; go on
                continue
            if not record:
                return False
            if pattern.search(record.decode("utf-8", "replace")):
                return True
    finally:
        os.close(fd)
    return False


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("pid"), int) else None


def previous_end(path: Path, kmsg: Path = Path("/dev/kmsg")) -> str | None:
    """The line for an earlier start that the OOM killer ended, or None (no record, the
    process still alive, or no evidence of an OOM kill)."""
    record = _read_record(path)
    if record is None or record["pid"] == os.getpid():
        return None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(record["pid"], 0)
        return None  # still running (the run folder's lock keeps a second start out)
    folder = record.get("memory_cgroup")
    now = oom_kills(Path(folder)) if folder else None
    before = record.get("oom_kills")
    counted = now is not None and before is not None and now > before
    if not counted and not _kernel_log_names(record["pid"], kmsg):
        return None
    limit = float(record.get("memory_limit_bytes") or 0) / 1024**3
    where = "limit" if record.get("memory_source", "host") != "host" else "the machine's"
    return f"killed: out of memory ({where} {limit:.3g} GiB); {FIX}"
