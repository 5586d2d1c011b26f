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
manifest; a folder without a valid manifest is not a checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from trainforge.errors import UserError

MANIFEST = "manifest.json"
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
    model_state: Mapping[str, torch.Tensor],
    state: Mapping[str, Any],
    meta: Mapping[str, Any],
    config_yaml: str,
) -> Path:
    """Write one checkpoint atomically and return its final path."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".tmp-{folder.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        tensors = {k: v.detach().contiguous().cpu() for k, v in model_state.items()}
        save_file(tensors, str(tmp / "model.safetensors"))
        torch.save(dict(state), tmp / "state.pt")
        (tmp / "config.yaml").write_text(config_yaml, encoding="utf-8")
        (tmp / "meta.json").write_text(json.dumps(dict(meta), indent=2), encoding="utf-8")
        files = sorted(p.name for p in tmp.iterdir())
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


def load_checkpoint(folder: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any], dict[str, Any]]:
    """(model state, trainer state, meta) of a verified checkpoint; never executes file code."""
    if not folder.is_dir():
        raise UserError(f"checkpoint {folder} not found", "pass a folder under RUN/checkpoints/")
    problem = verify(folder)
    if problem:
        raise UserError(f"checkpoint {folder} is not usable: {problem}", "pick another checkpoint")
    model_state = load_file(str(folder / "model.safetensors"))
    try:
        state = torch.load(folder / "state.pt", map_location="cpu", weights_only=True)
    except Exception as err:  # weights_only refuses anything that is not plain data
        raise UserError(
            f"checkpoint {folder}/state.pt refused: {str(err).splitlines()[0]}",
            "it holds objects other than tensors and plain data; use a trusted checkpoint",
        ) from None
    return model_state, state, read_meta(folder)


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
            print(f"skipping checkpoint {folder}: {problem}")
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
    periodic = [c for c in list_checkpoints(root) if PERIODIC.match(c.path.name)]
    newest = latest(root)
    removed = []
    for ckpt in periodic[: max(0, len(periodic) - keep)]:
        if newest is not None and ckpt.path == newest.path:
            continue
        shutil.rmtree(ckpt.path, ignore_errors=True)
        removed.append(ckpt.path)
    return removed
