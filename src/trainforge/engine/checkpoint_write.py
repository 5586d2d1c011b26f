"""Writing checkpoint files at the cost of their bytes: each byte is written once, hashed on
its way to the disk (no second read for the manifest) and fsynced on the open handle.

`HashingFile` is the file object every checkpoint file goes through. The manifest's checksum
is XXH3-128 (the xxhash library), written as `xxh3_128:<hex>`: it detects torn and corrupted
files as well as a cryptographic hash would, at about 12 GB/s on one core against sha256's
1.5 GB/s (a 48 MB state: 4 ms against 32 ms, which made a synchronous save 1.4x a plain
`torch.save`). The manifest guards against crashes and bit rot, not against someone forging
a file: checkpoints are trusted as the run folder is. Manifests of earlier versions hold bare
sha256 hex values and still verify (`file_digest` follows the recorded value's notation).

`write_safetensors` writes the safetensors format (8-byte little-endian header length, JSON
header, raw tensor bytes) straight from the tensors' memory. The safetensors library's own
`save_file` was used before: it first turns every tensor into a `bytes` copy and writes the
file itself, so the manifest needed a second pass that read the whole file back. The files
written here are read with the library's `load_file`, which checks the header, dtypes and
offsets.

The CPU copy and the background writer live here too, beside the bytes they write:
`Snapshot` copies a training state off the device (part of it deferred until a write needs
it), and `CheckpointWriter` runs one checkpoint write at a time on a background thread or
inline, raising a write's error on the training thread. The storage seam
(`engine.checkpoint_storage`) and the checkpointer take them from here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import xxhash

from trainforge.storage import StorageError

SAFETENSORS_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}


DIGEST = "xxh3_128"  # the manifest's checksum, the prefix of every value it records


def _digest_text(hasher: Any) -> str:
    return f"{DIGEST}:{hasher.hexdigest()}"


def file_digest(path: Path, like: str | None = None) -> str:
    """`path`'s checksum read back, in the manifest's notation; `like`, a recorded value,
    picks its algorithm (a bare hex value: sha256, as manifests of earlier versions hold)."""
    legacy = like is not None and ":" not in like
    hasher = hashlib.sha256() if legacy else xxhash.xxh3_128()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            hasher.update(chunk)
    return hasher.hexdigest() if legacy else _digest_text(hasher)


class HashingFile:
    """A file opened for writing whose bytes are hashed (XXH3-128) as they are written.

    A file object `torch.save` can write to (it needs `write` and `flush`); `close()`
    flushes (fsyncing the open handle when `sync`) and returns the checksum as the manifest
    records it. An `OSError` of a write is kept in `error`: torch's zip writer swallows it
    and raises `RuntimeError: unexpected pos` instead, so `write_file` raises the kept one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = open(path, "wb")  # noqa: SIM115 - closed by close()
        self._hash = xxhash.xxh3_128()
        self.num_bytes = 0
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self._hash.update(view)
        try:
            self._fh.write(view)
        except OSError as err:
            self.error = err
            raise
        self.num_bytes += view.nbytes
        return view.nbytes

    def flush(self) -> None:
        self._fh.flush()

    def close(self, sync: bool = True) -> str:
        try:
            self._fh.flush()
            if sync:
                os.fsync(self._fh.fileno())
        finally:
            self._fh.close()
        return _digest_text(self._hash)

    def abort(self) -> None:
        with contextlib.suppress(OSError):  # flushing the buffer can fail again: disk full
            self._fh.close()


def write_file(path: Path, write: Any, sync: bool = True) -> str:
    """Create `path`, call `write(file)`, fsync unless not `sync`; the checksum written.

    Several files written with `sync=False` and fsynced together afterwards cost one
    journal commit on ext4 and XFS instead of one each."""
    out = HashingFile(path)
    try:
        write(out)
    except BaseException as err:
        out.abort()
        if out.error is not None and out.error is not err:
            raise out.error from err  # the disk's refusal, not a library's wrapper of it
        raise
    return out.close(sync)


def _raw_bytes(tensor: torch.Tensor) -> memoryview:
    flat = tensor.reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else memoryview(b"")


def write_safetensors(
    out: HashingFile, tensors: Mapping[str, torch.Tensor], metadata: dict[str, str] | None = None
) -> None:
    """The safetensors format from the tensors' own memory (no per-tensor bytes copy).

    Tensors sharing storage (tied embeddings) are each written in full, as the library's
    `save_model` would; a tensor on a device is copied to CPU memory first."""
    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    ready, offset = [], 0
    for name, value in tensors.items():
        tensor = value.detach()
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
        tensor = tensor.contiguous()
        if tensor.dtype not in SAFETENSORS_DTYPES:
            raise TypeError(f"{name}: dtype {tensor.dtype} has no safetensors name")
        size = tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": SAFETENSORS_DTYPES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        ready.append(tensor)
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)  # the format aligns the data to 8 bytes
    out.write(struct.pack("<Q", len(encoded)))
    out.write(encoded)
    for tensor in ready:
        if tensor.numel():
            out.write(_raw_bytes(tensor))


def tensor_bytes(obj: Any) -> int:
    """Bytes of tensor data in nested state (what a checkpoint of it needs at least)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, Mapping):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(tensor_bytes(v) for v in obj)
    return 0


# ------------------------------------------------------------ the CPU copy
# Tensors at least this big that only `optimizer.step` changes are copied off the loop.
DEFER_BYTES = 1 << 16
_IN_FLIGHT: set[Snapshot] = set()  # snapshots whose deferred copies have not landed


def join(thread: threading.Thread) -> None:
    """`thread.join()` in short slices, so a second Ctrl+C aborts a wait for a long write.
    CPython runs a Python signal handler on the main thread only when it returns from a
    wait; a signal the kernel handed to another thread, or one that landed just before the
    wait blocked, does not end an untimed join, which then lasts as long as the write."""
    while thread.is_alive():
        thread.join(0.2)


def wait_for_copies() -> None:
    """Block until every deferred snapshot copy has landed (readers of a snapshot call it)."""
    for snap in list(_IN_FLIGHT):
        snap.wait_copied()


class Snapshot:
    """Copies nested training state to CPU memory, reusing its buffers between saves.

    Training keeps mutating the live tensors after a background save starts, so the saved
    state must be a copy. Reusing the same CPU buffers (pinned when CUDA is present) makes
    a copy a plain memcpy without fresh page faults; the caller must not take a new copy
    while a write of the previous one is in flight. Copying also unties shared tensors
    (tied embeddings).

    `copy=False` is for synchronous saves: nothing trains while they write, so CPU tensors
    are handed over as they are (a copy would be a needless pass over every byte) and only
    device tensors are copied to CPU memory.

    `optimizer`: the weights and optimizer moments change only in `optimizer.step()`, so
    their copy runs on a helper thread while the loop computes the next forward and
    backward; a step pre-hook makes the next step wait until it has landed, and the
    checkpoint readers here (`save_checkpoint`, `all_finite`) wait too. Everything else
    (buffers, partial gradient sums, counters) is copied before `copy` returns. The hook is
    registered with the first deferred copy: a run that never saves pays no call per step.
    """

    def __init__(self, copy: bool = True, optimizer: torch.optim.Optimizer | None = None) -> None:
        import torch

        self._buffers: dict[tuple, torch.Tensor] = {}
        self._pin = torch.cuda.is_available()
        self._copy_cpu = copy
        self._optimizer = optimizer if copy else None
        self._stable: set[int] = set()
        self._pending: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._copier: threading.Thread | None = None
        self._copy_error: BaseException | None = None
        self._hooked = False

    def _before_step(self, *_: Any) -> None:
        self.wait_copied()

    def _stable_storages(self) -> set[int]:
        """Data pointers of what only `optimizer.step` writes: parameters and moments."""
        import torch

        opt = self._optimizer
        if opt is None:
            return set()
        ptrs = {p.data_ptr() for group in opt.param_groups for p in group["params"]}
        for per_param in opt.state.values():
            ptrs.update(t.data_ptr() for t in per_param.values() if isinstance(t, torch.Tensor))
        return ptrs

    def _tensor(self, key: tuple, value: torch.Tensor) -> torch.Tensor:
        import torch

        value = value.detach()
        if not self._copy_cpu and value.device.type == "cpu":
            return value
        buffer = self._buffers.get(key)
        if buffer is None or buffer.shape != value.shape or buffer.dtype != value.dtype:
            buffer = torch.empty(value.shape, dtype=value.dtype, pin_memory=self._pin)
            self._buffers[key] = buffer
        big = value.numel() * value.element_size() >= DEFER_BYTES
        if big and value.data_ptr() in self._stable:
            self._pending.append((buffer, value))
        else:
            buffer.copy_(value, non_blocking=value.device.type == "cuda")
        return buffer

    def copy(self, obj: Any, key: tuple = ()) -> Any:
        import torch

        self.wait_copied()
        self._stable = self._stable_storages()
        result = self._copy(obj, key)
        if self._pin:
            torch.cuda.synchronize()  # non-blocking device-to-host copies have landed
        if self._pending:
            pending, self._pending = self._pending, []
            if not self._hooked and self._optimizer is not None:
                self._optimizer.register_step_pre_hook(self._before_step)
                self._hooked = True
            _IN_FLIGHT.add(self)
            self._copier = threading.Thread(
                target=self._fill, args=(pending,), name="checkpoint-copy", daemon=True
            )
            self._copier.start()
        return result

    def _fill(self, pending: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        import torch

        try:
            for buffer, value in pending:
                buffer.copy_(value, non_blocking=value.device.type == "cuda")
            if self._pin:
                torch.cuda.synchronize()
        except BaseException as err:  # raised where the copy is waited for
            self._copy_error = err

    def wait_copied(self) -> None:
        """Block until the deferred part of the last copy has landed."""
        copier = self._copier
        if copier is not None:
            join(copier)
            self._copier = None
            _IN_FLIGHT.discard(self)
        if self._copy_error is not None:
            err, self._copy_error = self._copy_error, None
            raise err

    def _copy(self, obj: Any, key: tuple) -> Any:
        import torch

        if isinstance(obj, torch.Tensor):
            return self._tensor(key, obj)
        if isinstance(obj, Mapping):
            return {k: self._copy(v, (*key, k)) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            if all(isinstance(v, int | float | str | bool | None) for v in obj):
                return type(obj)(obj)  # e.g. Python's RNG state: 625 plain ints
            items = [self._copy(v, (*key, i)) for i, v in enumerate(obj)]
            return items if isinstance(obj, list) else tuple(items)
        return obj


def all_finite(tensors: Mapping[str, torch.Tensor]) -> bool:
    """No NaN or Inf in any floating-point tensor.

    A finite sum proves every element finite (a NaN or Inf element makes the sum NaN or Inf);
    only a sum that overflowed is checked element by element. One pass, no mask allocated."""
    import torch

    wait_for_copies()
    for tensor in tensors.values():
        overflowed = tensor.is_floating_point() and not bool(torch.isfinite(tensor.sum()))
        if overflowed and not bool(torch.isfinite(tensor).all()):
            return False
    return True


# ------------------------------------------------------- the background writer
class CheckpointWriter:
    """Runs checkpoint writes one at a time, on a background thread or inline.

    A write's error is raised on the training thread at the next `submit`, `wait` or
    `check`, as the `UserError` the write produced. With `on_error="continue"` a write the
    disk refuses (`StorageError`: full, read-only) is reported in one line, the first time
    only, and training goes on without that checkpoint; any other error is still raised.
    """

    def __init__(self, background: bool = True, on_error: str = "stop") -> None:
        self.background = background
        self.on_error = on_error
        self.skipped: list[str] = []  # the lines of the writes dropped under "continue"
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _run(self, job: Callable[[], None]) -> None:
        try:
            job()
        except StorageError as err:
            if self.on_error != "continue":
                self._error = err
                return
            line = f"checkpoint not written, training continues: {err.line()}"
            self.skipped.append(line)
            if len(self.skipped) == 1:  # said once: later refusals of the same disk are quiet
                sys.stdout.write(line + " (later refused saves are not reported again)\n")
                sys.stdout.flush()
        except BaseException as err:  # re-raised on the training thread
            self._error = err

    def submit(self, job: Callable[[], None]) -> None:
        self.wait()
        if not self.background:
            self._run(job)
            self.check()
            return
        # A daemon: a second Ctrl+C ends the process without waiting for the write (whose
        # temporary folder the next start tidies); every other exit waits (`after_failure`).
        self._thread = threading.Thread(
            target=self._run, args=(job,), name="checkpoint-writer", daemon=True
        )
        self._thread.start()

    def check(self) -> None:
        """Raise a finished write's error now, without waiting for a write in flight."""
        in_flight = self._thread is not None and self._thread.is_alive()
        if self._error is not None and not in_flight:
            err, self._error = self._error, None
            raise err

    def wait(self) -> None:
        if self._thread is not None:
            join(self._thread)
            self._thread = None
        self.check()

    def after_failure(self, failure: BaseException) -> None:
        """Training failed with `failure`: the write under way is finished (its checkpoint
        is the newest to resume from), unless a second Ctrl+C asked to abort at once. The
        write's own error, if any, gives way to `failure`."""
        if self._thread is None or isinstance(failure, KeyboardInterrupt):
            return
        join(self._thread)
        self._thread, self._error = None, None
