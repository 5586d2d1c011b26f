"""Checkpoint files: the only code that writes or reads them.

A checkpoint is a folder under `RUN/checkpoints/`:
    model.safetensors    model weights (safetensors: loading never runs code)
    state.pt             optimizer, scheduler, scaler, loader position, RNG states, counters
                         (torch.save; always read back with weights_only=True)
    config.yaml          the resolved run config
    meta.json            best_val, best_step, best_epoch, config_hash, timestamp, versions
    manifest.json        sha256 of every file above, written last
It is written into a hidden temporary folder, fsynced, then renamed into place, so a crash
leaves either the old checkpoint or the new one, never half of one. Loading checks the
manifest; a folder without a valid manifest is not a checkpoint. `recover` tidies what a
crash mid-write leaves behind (temporary folders, a replaced folder not yet deleted).

Beside the folders, `checkpoint_meta.json` summarises the run's checkpoints: best value,
step and epoch, config hash, timestamp, the newest checkpoint (the metadata that the
training-optimisation notes ask for).

`CheckpointWriter` runs the write on a background thread after the trainer has copied the
state to CPU memory, so the loop stalls only for the copy.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from trainforge.errors import UserError

MANIFEST = "manifest.json"
RUN_META = "checkpoint_meta.json"
PERIODIC = re.compile(r"^(checkpoint_epoch_(\d+)|checkpoint-(\d+))$")


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    meta: dict[str, Any]

    @property
    def global_step(self) -> int:
        return int(self.meta.get("global_step", 0))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_file(path: Path) -> None:
    with path.open("rb") as fh:
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(
    folder: Path,
    *,
    model_state: Mapping[str, torch.Tensor] | None,
    state: Mapping[str, Any],
    meta: Mapping[str, Any],
    config_yaml: str,
    tmp: Path | None = None,
) -> Path:
    """Write one checkpoint atomically and return its final path.

    `model_state` None: the weights are already in `tmp` (a sharded `dcp/` folder written by
    every rank through torch.distributed.checkpoint); this adds the rest and commits.
    """
    tmp = tmp or folder.parent / f".tmp-{folder.name}-{os.getpid()}"
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        if model_state is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            tensors, storages = {}, set()
            for key, value in model_state.items():
                tensor = value.detach().contiguous().cpu()
                ptr = tensor.untyped_storage().data_ptr()
                tensors[key] = tensor.clone() if ptr in storages else tensor  # untie shared
                storages.add(ptr)
            save_file(tensors, str(tmp / "model.safetensors"))
        torch.save(dict(state), tmp / "state.pt")
        (tmp / "config.yaml").write_text(config_yaml, encoding="utf-8")
        (tmp / "meta.json").write_text(json.dumps(dict(meta), indent=2), encoding="utf-8")
        files = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
        manifest = {name: _sha256(tmp / name) for name in files}
        for name in files:
            _fsync_file(tmp / name)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        _fsync_file(tmp / MANIFEST)
        _fsync_dir(tmp)
        old = folder.parent / f".old-{folder.name}-{os.getpid()}"
        if folder.exists():
            folder.rename(old)
        tmp.rename(folder)
        _fsync_dir(folder.parent)
        shutil.rmtree(old, ignore_errors=True)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(
            f"cannot write checkpoint {folder}: {err.strerror or err}",
            "free disk space or fix permissions; the previous checkpoint is intact",
        ) from None
    return folder


class Snapshot:
    """Copies nested training state to CPU memory, reusing its buffers between saves.

    Training keeps mutating the live tensors after a background save starts, so the saved
    state must be a copy. Reusing the same CPU buffers (pinned when CUDA is present) makes
    a copy a plain memcpy without fresh page faults; the caller must not take a new copy
    while a write of the previous one is in flight. Copying also unties shared tensors
    (tied embeddings), which safetensors refuses to write.
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple, torch.Tensor] = {}
        self._pin = torch.cuda.is_available()

    def _tensor(self, key: tuple, value: torch.Tensor) -> torch.Tensor:
        value = value.detach()
        buffer = self._buffers.get(key)
        if buffer is None or buffer.shape != value.shape or buffer.dtype != value.dtype:
            buffer = torch.empty(value.shape, dtype=value.dtype, pin_memory=self._pin)
            self._buffers[key] = buffer
        buffer.copy_(value, non_blocking=value.device.type == "cuda")
        return buffer

    def copy(self, obj: Any, key: tuple = ()) -> Any:
        result = self._copy(obj, key)
        if self._pin:
            torch.cuda.synchronize()  # non-blocking device-to-host copies have landed
        return result

    def _copy(self, obj: Any, key: tuple) -> Any:
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


def snapshot(obj: Any) -> Any:
    """A one-off CPU copy of nested state (see `Snapshot` for the reusable form)."""
    return Snapshot().copy(obj)


def all_finite(tensors: Mapping[str, torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors.values() if t.is_floating_point())


@functools.cache
def library_versions() -> dict[str, str]:
    from importlib import metadata

    versions = {"python": sys.version.split()[0]}
    for name in ("trainforge", "torch", "torchvision", "torchdata", "numpy", "safetensors"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    for name in ("transformers", "peft"):
        if name in sys.modules:
            versions[name] = metadata.version(name)
    return versions


def write_run_meta(root: Path, meta: Mapping[str, Any]) -> None:
    """Atomically (re)write `checkpoint_meta.json` beside the checkpoint folders."""
    keys = ("best_val", "best_metric", "best_step", "best_epoch", "config_hash", "timestamp")
    data = {k: meta.get(k) for k in keys}
    data["latest"] = meta.get("name")
    data["latest_step"] = meta.get("global_step")
    tmp = root / f".{RUN_META}.tmp"
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    tmp.replace(root / RUN_META)


def read_run_meta(root: Path) -> dict[str, Any]:
    return json.loads((root / RUN_META).read_text(encoding="utf-8"))


def recover(root: Path) -> list[str]:
    """Undo what a crash mid-write left in `root`; returns one line per action taken."""
    actions: list[str] = []
    if not root.is_dir():
        return actions
    for item in sorted(root.iterdir()):
        if item.name.startswith(".old-") and item.is_dir():
            # A checkpoint being replaced: the new one may not have landed yet.
            name = item.name[len(".old-") :].rsplit("-", 1)[0]
            target = root / name
            if not target.exists() and verify(item) is None:
                item.rename(target)
                actions.append(f"restored {target.name} from an interrupted replace")
                continue
            shutil.rmtree(item, ignore_errors=True)
            actions.append(f"removed {item.name}")
        elif item.name.startswith((".tmp-", f".{RUN_META}.tmp")):
            if item.is_dir():
                shutil.rmtree(item, ignore_errors=True)
            else:
                item.unlink(missing_ok=True)
            actions.append(f"removed unfinished write {item.name}")
    return actions


class CheckpointWriter:
    """Runs checkpoint writes one at a time, on a background thread or inline.

    A write's error (disk full, permission denied) is raised on the training thread at the
    next `submit` or `wait`, as the `UserError` the write produced.
    """

    def __init__(self, background: bool = True) -> None:
        self.background = background
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _run(self, job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as err:  # re-raised on the training thread
            self._error = err

    def submit(self, job: Callable[[], None]) -> None:
        self.wait()
        if not self.background:
            job()
            return
        self._thread = threading.Thread(target=self._run, args=(job,), name="checkpoint-writer")
        self._thread.start()

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            err, self._error = self._error, None
            raise err


def verify(folder: Path) -> str | None:
    """None when the checkpoint is complete and intact, else the reason it is not."""
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        return "no manifest (incomplete write)"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return "unreadable manifest"
    for name, digest in manifest.items():
        path = folder / name
        if not path.is_file():
            return f"missing {name}"
        if _sha256(path) != digest:
            return f"checksum mismatch in {name}"
    return None


def read_meta(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "meta.json").read_text(encoding="utf-8"))


def load_checkpoint(
    folder: Path,
) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any], dict[str, Any]]:
    """(model state, trainer state, meta) of a verified checkpoint; never executes file code.

    The model state is None for a sharded checkpoint (weights in `dcp/`)."""
    if not folder.is_dir():
        raise UserError(f"checkpoint {folder} not found", "pass a folder under RUN/checkpoints/")
    problem = verify(folder)
    if problem:
        raise UserError(f"checkpoint {folder} is not usable: {problem}", "pick another checkpoint")
    sharded = (folder / "dcp").is_dir()
    model_state = None if sharded else load_file(str(folder / "model.safetensors"))
    try:
        state = torch.load(folder / "state.pt", map_location="cpu", weights_only=True)
    except Exception as err:  # weights_only refuses anything that is not plain data
        raise UserError(
            f"checkpoint {folder}/state.pt refused: {str(err).splitlines()[0]}",
            "it holds objects other than tensors and plain data; use a trusted checkpoint",
        ) from None
    return model_state, state, read_meta(folder)


_REPORTED: set[tuple[str, str]] = set()


def _report_skipped(folder: Path, problem: str) -> None:
    """One line per damaged folder per process, written in one call.

    Rotation lists the checkpoints at every save, so without the memo the same damaged folder
    would be reported again and again; a single write keeps the line whole when a background
    save reports while the training thread prints."""
    key = (str(folder), problem)
    if key in _REPORTED:
        return
    _REPORTED.add(key)
    sys.stdout.write(f"skipping checkpoint {folder}: {problem}\n")
    sys.stdout.flush()


def list_checkpoints(root: Path) -> list[Checkpoint]:
    """Verified checkpoints under `root`, oldest first by global step; bad ones reported."""
    found = []
    if not root.is_dir():
        return found
    for folder in sorted(root.iterdir()):
        if not folder.is_dir() or folder.name.startswith("."):
            continue
        problem = verify(folder)
        if problem:
            _report_skipped(folder, problem)
            continue
        found.append(Checkpoint(folder, read_meta(folder)))
    return sorted(found, key=lambda c: (c.global_step, c.meta.get("timestamp", "")))


def latest(root: Path) -> Checkpoint | None:
    found = list_checkpoints(root)
    return found[-1] if found else None


def rotate(root: Path, keep: int | None) -> list[Path]:
    """Delete the oldest periodic checkpoints beyond `keep`; best/time-limit/newest stay."""
    if keep is None:
        return []
    found = list_checkpoints(root)  # verifying hashes every file: list once
    periodic = [c for c in found if PERIODIC.match(c.path.name)]
    newest = found[-1] if found else None
    removed = []
    for ckpt in periodic[: max(0, len(periodic) - keep)]:
        if newest is not None and ckpt.path == newest.path:
            continue
        shutil.rmtree(ckpt.path, ignore_errors=True)
        removed.append(ckpt.path)
    return removed
