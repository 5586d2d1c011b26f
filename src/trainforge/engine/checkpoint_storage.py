"""The checkpointer's storage seam: where a checkpoint's files go and how they are read
(torchtitan's `CheckpointStorage`). The checkpointer (`engine.checkpointer`) decides what is
saved and hands it over as plain data (`Payload`, the sharded parts); a storage writes and
reads, one way, and never calls back. Two storages:

- `PlainStorage` (one process, or DDP): rank 0 writes model.safetensors plus a `weights_only`
  state.pt from a CPU copy, on the writer thread unless the save waits.
- `ShardedStorage` (FSDP): every rank writes its shards with torch.distributed.checkpoint
  into the temporary folder; rank 0 adds state.pt and commits. Synchronous.

Library considered: torchtitan's checkpoint storage classes write torch.distributed.checkpoint
only; the plain format (safetensors + state.pt) is trainforge's own.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from trainforge import parallel
from trainforge.engine import checkpoint as ckpt
from trainforge.engine import checkpoint_write as cw
from trainforge.errors import UserError


@dataclass(frozen=True)
class Payload:
    """What rank 0 hands a storage to write: the whole weights (None when the storage
    writes them as shards), state.pt's contents, and meta.json's (taken when written)."""

    weights: Any
    state: dict[str, Any]
    meta: Callable[[], dict[str, Any]]


@dataclass(frozen=True)
class CheckpointRoot:
    """The checkpoints folder a storage commits into: a complete folder, the run's newest
    meta beside it, the rotation (`engine.checkpoint`)."""

    root: Path
    config_yaml: str
    keep: int | None

    def commit(self, folder: Path, weights: Any, state: Any, meta: Any, **kw: Any) -> None:
        ckpt.save_checkpoint(
            folder, model_state=weights, state=state, meta=meta,
            config_yaml=self.config_yaml, **kw,
        )  # fmt: skip
        ckpt.write_run_meta(self.root, meta)
        ckpt.rotate(self.root, self.keep)


class CheckpointStorage(Protocol):
    """Where a checkpoint's files go (torchtitan's CheckpointStorage seam): the checkpointer
    decides what is saved and hands it over; the storage writes and reads, one way."""

    sharded: bool  # it writes the registry's sharded parts itself (every rank)

    def save(
        self,
        folder: Path,
        payload: Payload | None,
        shards: Any,
        *,
        writer: cw.CheckpointWriter,
        wait: bool,
    ) -> bool:
        """Write checkpoint `folder` (`payload` on rank 0 only, `shards` on every rank when
        `sharded`), in the background on `writer` where the storage can; True when this
        process reports the save."""
        ...

    def load(self, folder: Path, parts: dict[str, Any]) -> dict[str, Any]:
        """Fill `parts` ({name: state dict of this run's tensors}) from the sharded parts of
        checkpoint `folder` (its `dcp/`) and return them; every storage reads one, whatever
        it writes, so a run of either kind resumes from a checkpoint of the other."""
        ...


class PlainStorage:
    """model.safetensors + state.pt, written by rank 0 from a CPU copy (see module doc).

    `background`: the write runs on the writer thread while training goes on, so the state is
    copied first; the weights and optimizer moments (which only `optimizer.step` changes) are
    copied on a helper thread during the next forward and backward. A synchronous save
    writes the CPU tensors as they are (nothing trains meanwhile) and copies only device
    tensors; so does a save the loop waits for (`wait`: the end of a run, a signal), even in
    a background run: a copy there would only add the size of the model and its optimizer
    moments to the peak memory (3.2 GB for a 270M-parameter model with AdamW)."""

    sharded = False

    def __init__(
        self,
        root: CheckpointRoot,
        background: bool = True,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        self.root = root
        self.snapshot = cw.Snapshot(copy=background, optimizer=optimizer if background else None)

    def save(
        self,
        folder: Path,
        payload: Payload | None,
        shards: Any,
        *,
        writer: cw.CheckpointWriter,
        wait: bool,
    ) -> bool:
        if payload is None:  # not rank 0: rank 0 writes
            if wait:
                parallel.barrier()
            return False
        snapshot = cw.Snapshot(copy=False) if wait else self.snapshot
        model_state, state = snapshot.copy((payload.weights, payload.state))
        meta = payload.meta()

        def write() -> None:
            if not cw.all_finite(model_state):
                print(f"checkpoint {folder.name} not written: the model weights hold NaN or Inf")
                return
            self.root.commit(folder, model_state, state, meta)

        writer.submit(write)
        if wait:
            writer.wait()
            parallel.barrier()
        return True

    def load(self, folder: Path, parts: dict[str, Any]) -> dict[str, Any]:
        """A sharded checkpoint's parts read whole, by this process alone: torch.distributed.
        checkpoint reshards on load into tensors shaped like this run's, and without a
        process group it reads on one process (a DDP rank reads its own copy)."""
        import warnings

        with warnings.catch_warnings():
            # One process reads without a process group, as meant; torch warns that it does.
            warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
            return read_dcp(folder, parts)


class ShardedStorage:
    """FSDP: sharded parts through torch.distributed.checkpoint (`dcp/`), the rest in
    state.pt from rank 0 (see module doc)."""

    sharded = True

    def __init__(self, root: CheckpointRoot) -> None:
        self.root = root

    def save(
        self,
        folder: Path,
        payload: Payload | None,
        shards: Any,
        *,
        writer: cw.CheckpointWriter,
        wait: bool,
    ) -> bool:
        import torch.distributed.checkpoint as dcp

        is_main = payload is not None
        tmp = folder.parent / f".tmp-{folder.name}-sharded"
        if is_main:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        parallel.barrier()
        dcp.save(shards, checkpoint_id=str(ckpt.dcp_folder(tmp)))
        if payload is not None:
            self.root.commit(folder, None, payload.state, payload.meta(), tmp=tmp)
        parallel.barrier()
        return True

    def load(self, folder: Path, parts: dict[str, Any]) -> dict[str, Any]:
        """Each rank's shards of the parts, resharded to this run's process count."""
        return read_dcp(folder, parts)


def read_dcp(folder: Path, parts: dict[str, Any]) -> dict[str, Any]:
    """`parts` filled from checkpoint `folder`'s `dcp/`; a misfit is one line."""
    import torch.distributed.checkpoint as dcp

    try:
        dcp.load(parts, checkpoint_id=ckpt.dcp_folder(folder))
    except (Exception, dcp.CheckpointException) as err:  # the latter: a BaseException
        raise misfit(folder, err) from None
    return parts


def misfit(folder: Path, err: BaseException) -> UserError:
    from torch.distributed.checkpoint import CheckpointException

    lines = str(err).strip().splitlines() or [type(err).__name__]
    # torch.distributed.checkpoint wraps each rank's error with its traceback: the cause
    # is that traceback's last line.
    reason = lines[-1] if isinstance(err, CheckpointException) else lines[0]
    return UserError(
        f"checkpoint {folder} does not fit this model: {reason}",
        "resume with the model settings the checkpoint was trained with",
    )
