"""The checkpointer: saves and restores a run's state registry through one storage seam.

It owns what goes into a checkpoint and where each part lands, the save, the restore (exact on
the same setup, moved on another split) and what a fit leaves behind (`leaving`); the files
themselves are written and read by `engine.checkpoint` (atomic folders, manifests, rotation)
through a one-way storage (`engine.checkpoint_storage`: plain safetensors + state.pt, or
torch.distributed.checkpoint shards under FSDP). Nothing here names a part: the registry
(`engine.stateful`, built from the parts by `engine.resumable`) says which state is the
weights, which is sharded and which is per process.

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

import contextlib
import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainforge import parallel
from trainforge.engine import checkpoint as ckpt
from trainforge.engine import checkpoint_write as cw
from trainforge.engine.checkpoint_storage import (
    CheckpointRoot,
    CheckpointStorage,
    Payload,
    PlainStorage,
    ShardedStorage,
    misfit,
)
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

    `describe()` gives what meta.json says about the run at the moment of a save. The
    storage only receives what to write (`Payload`) and where; it never calls back."""

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
        # (step, folder) of the newest periodic checkpoint saved or resumed from.
        self._periodic: tuple[int, Path] | None = None
        self.describe = describe
        self.dist = parallel.context()
        self.writer = cw.CheckpointWriter(
            background=settings.async_save, on_error=settings.on_save_error
        )
        folder = CheckpointRoot(root, config_yaml, settings.save_total_limit)
        self.storage: CheckpointStorage = (
            ShardedStorage(folder)
            if sharded
            else PlainStorage(folder, settings.async_save, optimizer)
        )

    # ------------------------------------------------------------------ save
    def save(self, name: str, *, wait: bool = False, step: int | None = None) -> tuple[Path, bool]:
        """Save the registry as checkpoint `name`: (its folder, whether this process reports
        the save; under DDP only rank 0 writes, and only it reports). `step`: the optimizer
        step it holds; a name due at the step just saved under another kind is that folder's
        second name (`second_name`), and nothing is written or reported."""
        if step is not None and (same := self.second_name(name, step)) is not None:
            return same, False
        per_rank = self._gather_per_rank()  # a collective: every rank, first
        shards = self.registry.state_dict(lambda e: e.sharded) if self.storage.sharded else None
        payload = None
        if self.dist.is_main:
            if self.storage.sharded:
                weights, state = None, self._run_state(per_rank, lambda e: not e.sharded)
            else:
                found = self.registry.state_dict(lambda e: e.weights)
                assert len(found) == 1, "one part holds the weights"
                weights = next(iter(found.values()))
                state = self._run_state(per_rank, lambda e: not e.weights)
            payload = Payload(weights, state, lambda: {"name": name, **self.describe()})
        folder = self.root / name
        reported = self.storage.save(folder, payload, shards, writer=self.writer, wait=wait)
        if step is not None and ckpt.is_periodic(name):
            self._periodic = (step, folder)
        return folder, reported

    def second_name(self, name: str, step: int) -> Path | None:
        """The folder of the periodic checkpoint saved (or resumed from) at `step` when
        `name` is a periodic name of the other kind, now its second name: a one-step
        epoch's end that is also a `save_steps` step is written once (`checkpoint.alias`).
        None: save it. Made by the main process, answered alike by every process. A
        background save of the folder may still be under way: the name resolves once it
        lands (a failed save is reported as such, its second name dangling and never
        listed)."""
        last = self._periodic
        if last is None or last[0] != step or not ckpt.is_periodic(name):
            return None
        if last[1].name == name:
            return last[1]  # the checkpoint this fit resumed from, at its own step
        if ckpt.kind(name) == ckpt.kind(last[1].name):
            return None
        done = ckpt.alias(self.root, name, last[1]) if self.dist.is_main else True
        done = not parallel.agree_any(not done) if self.dist.enabled else done
        return last[1] if done else None

    def _gather_per_rank(self) -> list[dict[str, Any]] | None:
        """Every rank's per-process parts, on rank 0 (None outside torch.distributed)."""
        if not self.dist.enabled:
            return None
        own = self.registry.state_dict(lambda e: e.per_rank)
        return [_from_bytes(b) for b in parallel.gather_objects(_to_bytes(own))]

    def _run_state(self, per_rank: list | None, keep: Callable[[Entry], bool]) -> dict[str, Any]:
        """state.pt's contents: the parts `keep` picks, per-process ones per rank."""
        state = self.registry.state_dict(lambda e: keep(e) and not (e.per_rank and per_rank))
        return {**state, "world_size": self.dist.world_size, "per_rank": per_rank}

    @contextlib.contextmanager
    def leaving(self) -> Iterator[None]:
        """Around a fit: every checkpoint is on disk when it returns, a save made at its
        very end (the closing validation's best model) included; when it fails, the write
        under way is finished first, unless the failure is a second Ctrl+C, which asks to
        abort at once (`CheckpointWriter.after_failure`: the writer thread is a daemon and
        nothing else waits for it)."""
        try:
            yield
            self.writer.wait()
        except BaseException as failure:
            self.writer.after_failure(failure)
            raise

    # ------------------------------------------------------------------ load
    def restore(
        self, folder: Path, setup: Any, state: Any, sampler: Any
    ) -> tuple[dict[str, Any], tuple[str, list[str]]]:
        """Restore every registered part from `folder`: (the checkpoint's meta, the resume's
        guarantee with its reasons).

        On the same setup the run continues exactly where it stopped ("exact"). On another
        split of the step over processes or micro-batches, the run moves: the parts that hold
        only for the old split stay fresh and the run restarts the interrupted optimizer
        step at its first sample, which the invariant sample stream (`data.sampling`) makes
        the same step ("continued", with the reasons). `setup` is this run's
        (`resumable.RunSetup`), `state` the loop's counters (`TrainerState`), `sampler` the
        training loader's batch sampler."""
        saved = ckpt.read_meta(folder)
        real = folder.resolve()  # a second name resumes its folder
        if ckpt.is_periodic(real.name) and real.parent == self.root.resolve():
            self._periodic = (int(saved.get("global_step") or 0), self.root / real.name)
        reasons, moved = setup_changes(saved.get("setup"), setup.now())
        if moved and not hasattr(sampler, "start_at"):
            moved, reasons = False, []  # a loader without steps: only the same split resumes
        meta = self.load(folder, moved=moved)
        if moved:
            window = int(saved.get("micro_batch_in_window") or 0)
            if window:
                reasons.append(
                    f"the step under way restarts from its first sample ({window} "
                    "micro-batch(es) done before)"
                )
            step = (state.batch_in_epoch - window) // int(saved["setup"]["accumulation"])
            sampler.start_at(state.epoch, step)
            state.batch_in_epoch = sampler.layout.step_start(step)
        return meta, ("continued" if reasons else "exact", reasons)

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
                raise misfit(folder, err) from None
        return meta

    def _sharded_parts(self, folder: Path, model_state: Any, state: dict) -> dict[str, Any]:
        """{name: state} of the parts this run shards under FSDP (weights, optimizer), read
        the way the checkpoint was written and this run needs them."""
        if model_state is not None and not self.storage.sharded:  # plain into plain
            return {e.name: model_state for e in self.registry if e.weights}
        if model_state is None and self.storage.sharded:  # sharded into sharded
            return self.storage.load(folder, self.registry.state_dict(lambda e: e.sharded))
        if model_state is None:  # a plain run: each sharded part gathered whole
            return _whole_from_dcp(self.registry, self.storage, folder)
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


# What each difference of setup changes, in the resume line's words.
_SETUP_REASONS = {
    "world_size": ("world size", "sums reduce in another order"),
    "micro_batch": ("micro-batch", "sums accumulate in another order"),
    "accumulation": ("accumulation", "sums accumulate in another order"),
    "workers": ("loader workers", "the loader restarts at the step"),
    "device": ("device", "other kernels round differently"),
    "precision": ("precision", "other rounding"),
    "threads": ("CPU threads", "sums reduce in another order"),
    "sharding": (
        "sharding",
        "the state moves between shards and whole tensors through "
        "torch.distributed.checkpoint, sums reduce in another order",
    ),
}
# Keys whose change splits a step differently: the loader position cannot carry over.
_LAYOUT = ("world_size", "micro_batch", "accumulation", "workers")


def setup_changes(saved: dict[str, Any] | None, now: dict[str, Any]) -> tuple[list[str], bool]:
    """(reasons a resume from a checkpoint of setup `saved` is not bitwise, whether the run
    moves to another split). A checkpoint without a setup (earlier versions) resumes as
    before: the same process count, anything else as it was."""
    if not saved:
        return [], False
    reasons = []
    for key, (name, why) in _SETUP_REASONS.items():
        if key in saved and saved[key] != now[key]:
            reasons.append(f"{name} {saved[key]} -> {now[key]}: {why}")
    return reasons, any(key in saved and saved[key] != now[key] for key in _LAYOUT)


def _whole_from_dcp(registry: StateRegistry, storage: Any, folder: Path) -> dict[str, Any]:
    """A sharded checkpoint's parts for a plain run (one process, or DDP), read by the run's
    storage (`PlainStorage.load`: each part whole, keyed by parameter name) into fresh
    tensors shaped like this run's: the live ones are left alone until every part is read."""
    from torch.utils._pytree import tree_map_only

    def blank(part: ShardedPart) -> Any:
        return tree_map_only(torch.Tensor, torch.empty_like, part.named_state_dict())

    parts = {e.name: blank(e.part) for e in registry if e.sharded}  # type: ignore[arg-type]
    parts = storage.load(folder, parts)
    return {
        e.name: parts[e.name] if e.weights else Whole(parts[e.name]) for e in registry if e.sharded
    }
