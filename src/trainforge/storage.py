"""Full and read-only disks: free space under a path, and the one line a failed write becomes.

Checkpoint, metrics, TensorBoard, report and export writes turn an `OSError` (ENOSPC,
EACCES, EROFS, EDQUOT, ...) into a `StorageError`: one line naming the path, the reason, the
space the write needed and the space free there, and the fix. Libraries that write for us
wrap the `OSError` (torch's zip writer turns ENOSPC into `RuntimeError: unexpected pos`,
TensorBoard's writer thread raises it again later): `disk_cause` finds it in an exception's
chain, and the CLI turns any error whose cause is a refusing disk into the same one line.
The standard library's `shutil.disk_usage` answers the free space; psutil's `disk_usage` was
considered and adds nothing for one path. No torch import, so the report and `doctor` can
use it cheaply.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from trainforge.errors import UserError

SPACE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
ACCESS_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS}
DISK_ERRNOS = SPACE_ERRNOS | ACCESS_ERRNOS


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


def storage_error(
    what: str, path: Path | None, err: OSError, needed_bytes: int | None, fix: str
) -> StorageError:
    """The one-line error for `err` hit while writing `what` at `path` (None: unknown)."""
    reason = err.strerror or str(err)
    parts = [
        f"cannot write {what} {path}: {reason}" if path else f"cannot write a {what}: {reason}"
    ]
    if needed_bytes and path is not None:
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


def disk_cause(exc: BaseException | None) -> OSError | None:
    """The `OSError` a disk refused a write with (full, quota, read-only, no permission),
    found in `exc` or the exceptions it was raised from or during; None when there is none."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def disk_error_line(exc: BaseException) -> str | None:
    """The one line for an error whose cause is a refusing disk (None for any other error),
    for writes a library made on our behalf: the path is the one the OS names, if any."""
    cause = disk_cause(exc)
    if cause is None:
        return None
    if isinstance(exc, StorageError):
        return exc.line()
    path = Path(cause.filename) if cause.filename else None
    return storage_error("file", path, cause, None, "then resume with --resume RUN").line()
