"""The state registry: every part of a run that has state, registered once by name.

A part is any object with `state_dict()` / `load_state_dict()` (the `Stateful` protocol that
torch.distributed.checkpoint uses too). The trainer registers its parts when it is built
(model, optimizer, scheduler, scaler, non-finite guard, best tracker, accumulation sums,
trainer counters, loader position, RNG); the checkpointer (`engine.checkpointer`) saves and
restores whatever is registered, so state added to a run is one `register` call and no
checkpoint code. Each entry says where its state lives:

    weights    the model's tensors: model.safetensors, or the dcp/ shards under FSDP
    sharded    state that torch.distributed.checkpoint writes per rank under FSDP
    per_rank   one value per process (loader position, RNG), gathered to rank 0
    (neither)  one value for the whole run, written by rank 0 into state.pt

A sharded part (`ShardedPart`) also gives its state keyed by parameter name, as
torch.distributed.checkpoint keeps it, and takes `Whole` state: the whole, unsharded state a
run of the other kind wrote (a plain checkpoint read by an FSDP run, a sharded one gathered
for a plain run), which it loads with torch's full-state-dict loading.

`layout_bound` marks state that only the same process count, micro-batch and accumulation
can continue (the loader position, a half-accumulated window); a run that moves to another
split leaves it fresh and restarts at the step boundary (`engine.trainer`).

Registration order is restore order: the model before the optimizer, the RNG last (so
nothing restored after it draws from it). An entry may carry a `check` that refuses saved
state that cannot be restored, in one line, before anything is restored.

This module also holds the small adaptors that give torch objects the protocol in the form
the checkpoint needs (a model or optimizer under FSDP, a scheduler whose shape comes from
the config, an optional loss scaler, the global RNGs).

Library considered: torchtitan's CheckpointManager keeps such a dict of `Stateful` objects
(its ModelWrapper, OptimizersContainer, data loader and train state) and hands it to
torch.distributed.checkpoint whole. The idea is the same here; the code is not taken from
it, because torchtitan is a training framework (its own config and trainer) rather than a
library, and trainforge's single-process format is safetensors plus a `weights_only`
state.pt, which torchtitan does not write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from trainforge.engine.state import capture_rng, restore_rng


class Stateful(Protocol):
    def state_dict(self) -> Any: ...
    def load_state_dict(self, state: Any) -> None: ...


class ShardedPart(Stateful, Protocol):
    """A part registered `sharded`: its `load_state_dict` also takes `Whole` state."""

    def named_state_dict(self) -> Any:
        """The state keyed by parameter name (DTensor shards under FSDP, whole tensors
        otherwise): the form torch.distributed.checkpoint writes and reshards on load."""
        ...


@dataclass(frozen=True)
class Whole:
    """State that a run of the other kind wrote, whole and unsharded: model weights by
    parameter name, optimizer state by parameter name (a sharded checkpoint gathered
    through torch.distributed.checkpoint) or by index (`optimizer.state_dict()` of a plain
    run). A `ShardedPart` loads it with `StateDictOptions(full_state_dict=True)`."""

    state: Any


@dataclass(frozen=True)
class Entry:
    name: str
    part: Stateful
    weights: bool = False
    sharded: bool = False
    per_rank: bool = False
    check: Callable[[Path, Any], None] | None = None  # (folder, saved state): refuse or pass
    # State that holds only for the same split of a step over processes and micro-batches
    # (loader position, a half-accumulated window): left fresh when a run moves.
    layout_bound: bool = False


class StateRegistry:
    """Name -> stateful part of one run, in registration (= restore) order."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, part: Stateful, **where: Any) -> None:
        assert name not in self._entries, f"state {name!r} registered twice"
        self._entries[name] = Entry(name, part, **where)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries.values())

    def names(self) -> list[str]:
        return list(self._entries)

    def state_dict(self, select: Callable[[Entry], bool]) -> dict[str, Any]:
        """{name: state} of the entries `select` picks."""
        return {e.name: e.part.state_dict() for e in self if select(e)}


class ModelState:
    """A model's weights: its own state dict, or the DTensor shards under FSDP."""

    def __init__(self, model: nn.Module, sharded: bool) -> None:
        self.model, self.sharded = model, sharded

    def state_dict(self) -> dict[str, torch.Tensor]:
        if not self.sharded:
            return self.model.state_dict()
        return self.named_state_dict()

    def named_state_dict(self) -> dict[str, torch.Tensor]:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(self.model)

    def load_state_dict(self, state: dict[str, torch.Tensor] | Whole) -> None:
        whole = isinstance(state, Whole)
        weights = state.state if isinstance(state, Whole) else state
        if not self.sharded:  # plain weights are keyed by name either way
            self.model.load_state_dict(weights)
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        # Whole weights: every rank holds them all and keeps its own shard of each.
        options = StateDictOptions(full_state_dict=whole)
        set_model_state_dict(self.model, weights, options=options)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model's weights on CPU (under FSDP a collective: every rank calls it,
        rank 0 gets the tensors)."""
        if not self.sharded:
            return {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(self.model, options=options)


# Param-group keys that choose an optimizer's kernels, not its maths.
KERNEL_KEYS = ("fused", "foreach", "capturable", "differentiable")


class OptimizerState:
    """An optimizer's state: its own, or keyed by parameter name and sharded under FSDP."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, sharded: bool) -> None:
        self.model, self.optimizer, self.sharded = model, optimizer, sharded

    def state_dict(self) -> dict[str, Any]:
        if not self.sharded:
            return self.optimizer.state_dict()
        return self.named_state_dict()

    def named_state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return get_optimizer_state_dict(self.model, self.optimizer)

    def load_state_dict(self, state: dict[str, Any] | Whole) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_optimizer_state_dict,
        )

        if isinstance(state, Whole):
            named = self.by_name(state.state)
            # The other kind of run chose its own kernels (FSDP: no fused AdamW); this run
            # keeps its own, and the step counters land where they need them.
            own = [{k: g[k] for k in KERNEL_KEYS if k in g} for g in self.optimizer.param_groups]
            groups = [{**g, **o} for g, o in zip(named["param_groups"], own, strict=True)]
            named = {**named, "param_groups": groups}
            options = StateDictOptions(full_state_dict=True)
            set_optimizer_state_dict(self.model, self.optimizer, named, options=options)
        elif not self.sharded:
            self.optimizer.load_state_dict(state)
        else:
            set_optimizer_state_dict(self.model, self.optimizer, state)

    def by_name(self, state: dict[str, Any]) -> dict[str, Any]:
        """A plain `optimizer.state_dict()` (by parameter index) keyed by parameter name, as
        torch.distributed.checkpoint keys it; state keyed by name comes back as it is. The
        indices follow this optimizer's parameter groups: the same builder made both."""
        groups = state["param_groups"]
        if not all(isinstance(i, int) for g in groups for i in g["params"]):
            return state
        names = {id(p): name for name, p in self.model.named_parameters()}
        index: dict[int, str] = {}
        for saved, group in zip(groups, self.optimizer.param_groups, strict=True):
            for i, param in zip(saved["params"], group["params"], strict=True):
                index[i] = names[id(param)]
        return {
            "state": {index[i]: value for i, value in state["state"].items()},
            "param_groups": [{**g, "params": [index[i] for i in g["params"]]} for g in groups],
        }


class ScheduleState:
    """A `LambdaLR`'s position; its shape (the multiplier) comes from the config."""

    def __init__(self, scheduler: torch.optim.lr_scheduler.LambdaLR) -> None:
        self.scheduler = scheduler

    def state_dict(self) -> dict[str, Any]:
        state = self.scheduler.state_dict()
        state.pop("lr_lambdas", None)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = {**state, "lr_lambdas": [None] * len(self.scheduler.lr_lambdas)}
        self.scheduler.load_state_dict(state)


class OptionalState:
    """A part that may be absent (the loss scaler outside fp16), looked up at each save and
    load: None is saved, and a saved state is restored only where the part exists."""

    def __init__(self, find: Callable[[], Stateful | None]) -> None:
        self.find = find

    def state_dict(self) -> Any:
        part = self.find()
        return None if part is None else part.state_dict()

    def load_state_dict(self, state: Any) -> None:
        part = self.find()
        if part is not None and state:
            part.load_state_dict(state)


class RngState:
    """Every RNG the run draws from: Python, NumPy, torch CPU and CUDA."""

    def state_dict(self) -> dict[str, Any]:
        return capture_rng()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        restore_rng(state)


def loader_workers_check(loader: Any) -> Callable[[Path, Any], None]:
    """A `check` for a loader's saved position: it is kept per worker process, so another
    worker count cannot continue it (torchdata would fail later with an internal assertion)."""
    from trainforge.errors import UserError

    def check(folder: Path, saved: Any) -> None:
        have = getattr(loader, "num_workers", None)
        if have is None or not isinstance(saved, dict):
            return
        if "_num_yielded" in saved:
            was = 0
        else:
            snapshot = saved.get("_snapshot")
            workers = snapshot.get("_worker_snapshots") if isinstance(snapshot, dict) else None
            was = len(workers) if isinstance(workers, dict) else None
        if was is not None and was != have:
            raise UserError(
                f"checkpoint {folder} was written with data.dataloader_num_workers={was}, "
                f"this run has {have}",
                f"resume with --set data.dataloader_num_workers={was} (the loader position "
                "is kept per worker)",
            )

    return check
