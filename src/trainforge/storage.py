"""Full and read-only disks: free space under a path, and the one line a failed write becomes.

Checkpoint, report and export writes turn an `OSError` (ENOSPC, EACCES, EROFS, EDQUOT, ...)
into a `StorageError`: one line naming the path, the reason, the space the write needed and
the space free there, and the fix. The standard library's `shutil.disk_usage` answers the free
space; psutil's `disk_usage` was considered and adds nothing for one path. No torch import, so
the report and `doctor` can use it cheaply.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from trainforge.errors import UserError

SPACE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
ACCESS_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS}


class StorageError(UserError):
    """A write refused by the disk (full, read-only, no permission); what was there stays."""


def size_text(num_bytes: int | float) -> str:
    """Bytes in words, decimal units as `df -H` and file managers print them."""
    value = float(num_bytes)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"  # pragma: no cover - the loop returns first


def existing_parent(path: Path) -> Path:
    """`path` or its nearest ancestor that exists (what disk_usage can measure)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: Path) -> int | None:
    """Bytes free to this user on the filesystem holding `path`; None when unreadable."""
    try:
        return shutil.disk_usage(existing_parent(path)).free
    except OSError:
        return None


def storage_error(what: str, path: Path, err: OSError, needed_bytes: int | None, fix: str):
    """The one-line error for `err` hit while writing `what` at `path`."""
    reason = err.strerror or str(err)
    parts = [f"cannot write {what} {path}: {reason}"]
    if needed_bytes:
        free = free_bytes(path)
        room = f", {size_text(free)} free there" if free is not None else ""
        parts.append(f"it needs about {size_text(needed_bytes)}{room}")
    if err.errno in ACCESS_ERRNOS:
        hint = "make the folder writable or point output.dir at a writable disk"
    elif err.errno in SPACE_ERRNOS:
        hint = "free disk space or point output.dir at a bigger disk"
    else:
        hint = "check the disk"
    return StorageError("; ".join(parts), f"{hint}; {fix}")
