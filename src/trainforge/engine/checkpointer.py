"""The checkpointer: saves and restores a run's state registry through one storage seam.

It owns what goes into a checkpoint and where each part lands; the files themselves are
written and read by `engine.checkpoint` (atomic folders, manifests, rotation). Nothing
here names a part: the registry (`engine.stateful`) says which state is the weights, which
is sharded and which is per process. Two storages implement the seam:

- `PlainStorage` (one process, or DDP): rank 0 copies everything to CPU memory (the loop
  stalls only for the copy) and writes model.safetensors plus a `weights_only` state.pt on
  the writer thread; every rank's per-process parts go in with it.
- `ShardedStorage` (FSDP): every rank writes its shards of the sharded parts with
  torch.distributed.checkpoint into the temporary folder; rank 0 adds state.pt and
  commits. Synchronous.

Either kind of run reads either kind of checkpoint (`Checkpointer.load`): a plain run
gathers a sharded checkpoint's parts whole through torch.distributed.checkpoint (which
reshards on load, and reads without a process group on one process), an FSDP run takes a
plain checkpoint's whole tensors and keeps its own shard of each (`stateful.Whole`). So a
run trained sharded on a cluster continues on one device, and the other way round; a
sharded checkpoint on another process count reshards through the same `dcp.load`.

state.pt holds {part name: state} plus `world_size` and, under torch.distributed,
`per_rank` (one {part name: state} per rank). Format 1 (before the registry) kept the
non-finite counts and the best values inside `trainer`; `_upgrade` reads them from there.

Library considered: torchtitan's CheckpointManager (a dict of Stateful objects saved with
torch.distributed.checkpoint, async staging); see `engine.stateful` for why its idea is
followed without its code.
"""

from __future__ import annotations

import io
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainforge import parallel
from trainforge.engine import checkpoint as ckpt
from trainforge.engine.stateful import Entry, ShardedPart, StateRegistry, Whole
from trainforge.errors import UserError

if TYPE_CHECKING:
    from trainforge.config.schema import CheckpointConfig

FRAMING = ("world_size", "per_rank")  # keys of state.pt that are not parts


def _to_bytes(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _from_bytes(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def _upgrade(state: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """A format-1 state.pt as format 2: the guard's and the tracker's records were fields
    of `trainer` (each record reads its own fields from the dict)."""
    if meta.get("format", 1) == 1 and "trainer" in state:
        state = {"nonfinite": state["trainer"], "best": state["trainer"], **state}
    return state


class Checkpointer:
    """Saves the registry into `root/<name>` and restores it from a checkpoint folder.

    `describe()` gives what meta.json says about the run at the moment of a save."""

    def __init__(
        self,
        registry: StateRegistry,
        *,
        root: Path,
        sharded: bool,
        describe: Callable[[], dict[str, Any]],
        config_yaml: str,
        settings: CheckpointConfig,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        assert not set(FRAMING) & set(registry.names())
        self.registry = registry
        self.root = root
        self.describe = describe
        self.config_yaml = config_yaml
        self.keep = settings.save_total_limit
        self.dist = parallel.context()
        self.writer = ckpt.CheckpointWriter(
            background=settings.async_save, on_error=settings.on_save_error
        )
        self.storage: PlainStorage | ShardedStorage = (
            ShardedStorage() if sharded else PlainStorage(settings.async_save, optimizer)
        )

    # ------------------------------------------------------------------ save
    def save(self, name: str, *, wait: bool = False) -> bool:
        """Save the registry as checkpoint `name`; True when this process reports the save
        (under DDP only rank 0 writes, and only it reports)."""
        return self.storage.save(self, name, wait)

    def meta(self, name: str) -> dict[str, Any]:
        return {"name": name, **self.describe()}

    def gather_per_rank(self) -> list[dict[str, Any]] | None:
        """Every rank's per-process parts, on rank 0 (None outside torch.distributed)."""
        if not self.dist.enabled:
            return None
        own = self.registry.state_dict(lambda e: e.per_rank)
        return [_from_bytes(b) for b in parallel.gather_objects(_to_bytes(own))]

    def run_state(self, per_rank: list | None, keep: Callable[[Entry], bool]) -> dict[str, Any]:
        """state.pt's contents: the parts `keep` picks, per-process ones per rank."""
        state = self.registry.state_dict(lambda e: keep(e) and not (e.per_rank and per_rank))
        return {**state, "world_size": self.dist.world_size, "per_rank": per_rank}

    def commit(self, folder: Path, model_state: Any, state: Any, meta: Any, **kw: Any) -> None:
        ckpt.save_checkpoint(
            folder, model_state=model_state, state=state, meta=meta,
            config_yaml=self.config_yaml, **kw,
        )  # fmt: skip
        ckpt.write_run_meta(self.root, meta)
        ckpt.rotate(self.root, self.keep)

    # ------------------------------------------------------------------ load
    def load(self, folder: Path, *, moved: bool = False) -> dict[str, Any]:
        """Restore every registered part from `folder`; returns its meta. `moved`: the run
        continues on another split over processes and micro-batches: layout-bound parts
        stay fresh, and a process the checkpoint had no state for takes rank 0's."""
        model_state, state, meta = ckpt.load_checkpoint(folder)
        state = _upgrade(state, meta)
        saved = self._sharded_parts(folder, model_state, state)
        if not moved:
            self._check_world_size(folder, state)
        ranks = state.get("per_rank") or [state]
        own = ranks[self.dist.rank] if self.dist.rank < len(ranks) else ranks[0]
        entries = [e for e in self.registry if not (moved and e.layout_bound)]
        for entry in entries:
            source = own if entry.per_rank else state
            if entry.name not in saved and entry.name not in source:
                raise UserError(
                    f"checkpoint {folder} holds no state for {entry.name!r}",
                    "resume from a checkpoint this run's trainforge wrote, or start a new run",
                )
            saved.setdefault(entry.name, source.get(entry.name))
        for entry in entries:
            if entry.check is not None:
                value = saved[entry.name]
                entry.check(folder, value.state if isinstance(value, Whole) else value)
        for entry in entries:
            try:
                entry.part.load_state_dict(saved[entry.name])
            except (KeyError, ValueError, RuntimeError) as err:
                if not isinstance(saved[entry.name], Whole):
                    raise
                raise _misfit(folder, err) from None
        return meta

    def _sharded_parts(self, folder: Path, model_state: Any, state: dict) -> dict[str, Any]:
        """{name: state} of the parts this run shards under FSDP (weights, optimizer), read
        the way the checkpoint was written and this run needs them."""
        if (model_state is None) == isinstance(self.storage, ShardedStorage):
            return self.storage.load_parts(self, folder, model_state)
        if model_state is None:  # a plain run: each sharded part gathered whole
            return _whole_from_dcp(self.registry, folder)
        # An FSDP run: the plain checkpoint's whole tensors; each rank keeps its shard.
        return {
            e.name: Whole(model_state if e.weights else state[e.name])
            for e in self.registry
            if e.sharded and (e.weights or e.name in state)
        }

    def _check_world_size(self, folder: Path, state: dict[str, Any]) -> None:
        saved_world = int(state.get("world_size") or 1)
        if saved_world != self.dist.world_size:
            raise UserError(
                f"checkpoint {folder} was written by {saved_world} process(es), this run has "
                f"{self.dist.world_size}",
                f"resume with {saved_world} process(es) (torchrun --nproc-per-node), or start "
                "a new run from its weights (--init_from)",
            )


class PlainStorage:
    """model.safetensors + state.pt, written by rank 0 from a CPU copy (see module doc).

    `background`: the write runs on the writer thread while training goes on, so the state is
    copied first; the weights and optimizer moments (which only `optimizer.step` changes) are
    copied on a helper thread during the next forward and backward. A synchronous save
    writes the CPU tensors as they are (nothing trains meanwhile) and copies only device
    tensors."""

    def __init__(
        self, background: bool = True, optimizer: torch.optim.Optimizer | None = None
    ) -> None:
        self.snapshot = ckpt.Snapshot(copy=background, optimizer=optimizer if background else None)

    def save(self, c: Checkpointer, name: str, wait: bool) -> bool:
        folder = c.root / name
        per_rank = c.gather_per_rank()
        if c.dist.enabled and not c.dist.is_main:
            if wait:
                parallel.barrier()
            return False
        weights = c.registry.state_dict(lambda e: e.weights)
        assert len(weights) == 1, "one part holds the weights"
        model_state, state = self.snapshot.copy(
            (next(iter(weights.values())), c.run_state(per_rank, lambda e: not e.weights))
        )
        meta = c.meta(name)

        def write() -> None:
            if not ckpt.all_finite(model_state):
                print(f"checkpoint {name} not written: the model weights hold NaN or Inf")
                return
            c.commit(folder, model_state, state, meta)

        c.writer.submit(write)
        if wait:
            c.writer.wait()
            parallel.barrier()
        return True

    def load_parts(self, c: Checkpointer, folder: Path, model_state: Any) -> dict[str, Any]:
        return {e.name: model_state for e in c.registry if e.weights}


class ShardedStorage:
    """FSDP: sharded parts through torch.distributed.checkpoint (`dcp/`), the rest in
    state.pt from rank 0 (see module doc)."""

    def save(self, c: Checkpointer, name: str, wait: bool) -> bool:
        import torch.distributed.checkpoint as dcp

        folder = c.root / name
        tmp = c.root / f".tmp-{name}-sharded"
        if c.dist.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        parallel.barrier()
        dcp.save(c.registry.state_dict(lambda e: e.sharded), checkpoint_id=str(tmp / "dcp"))
        per_rank = c.gather_per_rank()
        if c.dist.is_main:
            state = c.run_state(per_rank, lambda e: not e.sharded)
            c.commit(folder, None, state, c.meta(name), tmp=tmp)
        parallel.barrier()
        return True

    def load_parts(self, c: Checkpointer, folder: Path, model_state: Any) -> dict[str, Any]:
        import torch.distributed.checkpoint as dcp

        parts = c.registry.state_dict(lambda e: e.sharded)
        try:
            dcp.load(parts, checkpoint_id=folder / "dcp")
        except (Exception, dcp.CheckpointException) as err:  # the latter: a BaseException
            raise _misfit(folder, err) from None
        return parts


def _misfit(folder: Path, err: BaseException) -> UserError:
    from torch.distributed.checkpoint import CheckpointException

    lines = str(err).strip().splitlines() or [type(err).__name__]
    # torch.distributed.checkpoint wraps each rank's error with its traceback: the cause
    # is that traceback's last line.
    reason = lines[-1] if isinstance(err, CheckpointException) else lines[0]
    return UserError(
        f"checkpoint {folder} does not fit this model: {reason}",
        "resume with the model settings the checkpoint was trained with",
    )


def _whole_from_dcp(registry: StateRegistry, folder: Path) -> dict[str, Any]:
    """A sharded checkpoint's parts for a plain run (one process, or DDP): torch.distributed.
    checkpoint reads each part whole into tensors shaped like this run's, keyed by parameter
    name (`dcp.load` reshards on load; without a process group it reads on one process)."""
    import torch.distributed.checkpoint as dcp
    from torch.utils._pytree import tree_map_only

    def blank(part: ShardedPart) -> Any:
        # Fresh tensors to read into: the live ones are left alone until every part is read.
        return tree_map_only(torch.Tensor, torch.empty_like, part.named_state_dict())

    parts = {e.name: blank(e.part) for e in registry if e.sharded}  # type: ignore[arg-type]
    try:
        with warnings.catch_warnings():
            # One process reads without a process group, as meant; torch warns that it does.
            warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
            dcp.load(parts, checkpoint_id=folder / "dcp")
    except (Exception, dcp.CheckpointException) as err:  # the latter: a BaseException
        raise _misfit(folder, err) from None
    return {
        e.name: parts[e.name] if e.weights else Whole(parts[e.name]) for e in registry if e.sharded
    }
