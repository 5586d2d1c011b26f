"""Writing checkpoint files at the cost of their bytes: each byte is written once, hashed on
its way to the disk (no second read for the manifest) and fsynced on the open handle.

`HashingFile` is the file object every checkpoint file goes through. `write_safetensors`
writes the safetensors format (8-byte little-endian header length, JSON header, raw tensor
bytes) straight from the tensors' memory. The safetensors library's own `save_file` was
used before: it first turns every tensor into a `bytes` copy and writes the file itself, so
the manifest needed a second pass that read the whole file back. The files written here are
read with the library's `load_file`, which checks the header, dtypes and offsets.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

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


# Chunks at least this big are hashed on a helper thread while the calling thread writes
# them: both release the GIL, so hashing costs no wall time where a second core is free.
PARALLEL_HASH_BYTES = 1 << 20
_HASHER: ThreadPoolExecutor | None = None


def _hasher() -> ThreadPoolExecutor:
    global _HASHER
    if _HASHER is None:
        _HASHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-hash")
    return _HASHER


class HashingFile:
    """A file opened for writing whose bytes are hashed (sha256) as they are written.

    `close()` flushes (fsyncing the open handle when `sync`) and returns the hex digest; a
    file object
    `torch.save` can write to (it needs `write` and `flush`). `write` returns only when the
    chunk is both written and hashed, so the caller may reuse its buffer at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = open(path, "wb")  # noqa: SIM115 - closed by close()
        self._sha = hashlib.sha256()
        self.num_bytes = 0

    def write(self, data: Any) -> int:
        view = memoryview(data)
        if view.nbytes < PARALLEL_HASH_BYTES:
            self._sha.update(view)
            self._fh.write(view)
        else:
            hashed = _hasher().submit(self._sha.update, view)
            try:
                self._fh.write(view)
            finally:
                hashed.result()
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
        return self._sha.hexdigest()

    def abort(self) -> None:
        self._fh.close()


def write_file(path: Path, write: Any, sync: bool = True) -> str:
    """Create `path`, call `write(file)`, fsync unless not `sync`; the sha256 written.

    Several files written with `sync=False` and fsynced together afterwards cost one
    journal commit on ext4 and XFS instead of one each."""
    out = HashingFile(path)
    try:
        write(out)
    except BaseException:
        out.abort()
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
