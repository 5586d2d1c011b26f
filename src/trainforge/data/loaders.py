"""Resumable data loaders: `StatefulDataLoader` settings shared by every dataset.

Owns the train/val loader options (seeded shuffling whose position survives a checkpoint,
worker options that torch only accepts with workers, pinning only when CUDA exists), and the
one line that says when the loader workers outnumber the CPUs (torchdata's own warning, said
twice per loader with a site-packages path, is filtered in `observe.quiet`). It also owns
letting a loader's worker processes go once a loop is done with them (`park_workers`) and the
position the checkpointer saves (`LoaderPosition`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from trainforge.data.memory import passthrough_collate
from trainforge.data.sampling import (
    WHOLE_EPOCH_MAX_BYTES,
    KeyedDataset,
    StepBatchSampler,
    StridedSampler,
)
from trainforge.errors import UserError

_SAID_WORKERS: set[int] = set()  # worker counts already named, so the line comes once


def make_loader(
    dataset: Dataset,
    cfg: Any,
    *,
    batch_size: int,
    train: bool,
    seed: int,
    batched_fetch: bool,
    on_device: bool = False,
    accumulation: int = 1,
    keyed: bool = False,
    step_batch: int | None = None,
) -> StatefulDataLoader:
    """Build one loader: train reshuffles each epoch from `seed`, val keeps the dataset order.

    Train batches come from `StepBatchSampler` (step k of an epoch holds the same samples
    for any process count, micro-batch `batch_size` and `accumulation`; its position is in
    the loader's `state_dict()`). `step_batch`: the samples of one optimizer step (the
    recipe's effective batch), cut into micro-batches of at most `batch_size` that differ by
    at most one sample (None: `batch_size` x `accumulation` x processes). `keyed`: each
    train sample brings its random bits last.
    """
    if batch_size < 1:
        raise UserError(f"batch size is {batch_size}, it must be at least 1")
    num_workers = _num_workers(cfg, on_device)
    options: dict[str, Any] = {
        "batch_size": batch_size,
        "drop_last": False,  # val must see every sample; train keeps the tail batch too
        "num_workers": num_workers,
        # Pinning without CUDA only costs a copy (and warns); it helps only host->GPU transfers.
        "pin_memory": bool(cfg.pin_memory) and torch.cuda.is_available() and not on_device,
    }
    from trainforge.parallel import context

    dist = context()  # under torch.distributed each rank reads its own shard
    if train:
        # torch takes a batch sampler only without batch_size and drop_last.
        options["batch_sampler"] = StepBatchSampler(
            len(dataset), seed, batch_size, accumulation, dist.rank, dist.world_size, keyed,
            step_batch, lengths=getattr(dataset, "group_lengths", None),
        )  # fmt: skip
        del options["batch_size"], options["drop_last"]
        if keyed:
            dataset = _keyed(dataset, seed, batched_fetch, num_workers)
    elif dist.enabled:
        options["sampler"] = StridedSampler(len(dataset), dist.rank, dist.world_size)
    # The loader draws worker base seeds from this generator; without one it would draw from
    # torch's global RNG and shift the augmentation randomness by one draw per epoch.
    options["generator"] = torch.Generator().manual_seed(int(seed))
    if batched_fetch:
        # The dataset's __getitems__ already returns (images, labels) for the whole batch.
        options["collate_fn"] = passthrough_collate
    # torch rejects prefetch_factor / persistent_workers when there are no worker processes.
    if num_workers > 0:
        if cfg.prefetch_factor is not None:
            options["prefetch_factor"] = int(cfg.prefetch_factor)
        options["persistent_workers"] = bool(cfg.persistent_workers)
    return StatefulDataLoader(dataset, **options)


def _num_workers(cfg: Any, on_device: bool) -> int:
    """The loader's worker processes, checked (and said when they outnumber the CPUs)."""
    # A data set held on the device is gathered there: no worker processes, nothing to pin.
    num_workers = 0 if on_device else int(cfg.dataloader_num_workers)
    if num_workers < 0:
        raise UserError(
            f"data.dataloader_num_workers is {num_workers}, it must be 0 or more",
            "set it to 0 to load in the main process",
        )
    note_too_many_workers(num_workers)
    return num_workers


def _keyed(dataset: Dataset, seed: int, batched_fetch: bool, num_workers: int) -> KeyedDataset:
    """The train set read with each sample's random bits; gathered a whole epoch at a time
    when it is held in memory (`nbytes`, as `TensorImageDataset` says), small enough, and
    read in this process."""
    size = float(getattr(dataset, "nbytes", float("inf")))
    whole = num_workers == 0 and size <= WHOLE_EPOCH_MAX_BYTES
    return KeyedDataset(dataset, seed, batched_fetch, whole_epochs=whole)


def note_too_many_workers(num_workers: int) -> None:
    """One line (per process, from the main rank) when `num_workers` loader processes
    outnumber the CPUs this process may use (affinity and cgroup quota, as Slurm and
    containers set them): they then compete with training and can stall loading."""
    if num_workers <= 0 or num_workers in _SAID_WORKERS:
        return
    from trainforge.hardware.threads import usable_cores
    from trainforge.parallel import context

    cores = usable_cores()
    if num_workers <= cores:
        return
    _SAID_WORKERS.add(num_workers)
    if context().is_main:
        print(
            f"data: {num_workers} loader workers on {cores} usable CPU core"
            f"{'s' if cores != 1 else ''} can slow or stall loading; set "
            f"data.dataloader_num_workers={cores} or fewer (0 loads in the training process)",
            flush=True,
        )


def park_workers(*loaders: Any) -> None:
    """Let each loader's worker processes go now, keeping its position.

    A multi-process iterator that outlives its loop (a run stopped mid-epoch, or persistent
    workers after the last epoch) is otherwise shut down when the garbage collector frees
    it, and by then the collector may have closed its queues first: the workers never hear
    the shutdown, each is joined for torch's 5-second timeout and then killed. Loading the
    loader's own position back drops the iterator while its queues still work; the next
    `iter()` starts from the same sample, as a resume from a checkpoint does.
    """
    for loader in loaders:
        iterator = getattr(loader, "_iterator", None)  # torchdata's live iterator, if any
        # Only a multi-process iterator has workers to end (and this method).
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is None:
            continue
        try:
            position = loader.state_dict()
        except Exception:  # an iterator a worker's error ended has no position worth keeping
            position = {}  # and the error it raised must stay the one the user sees
        loader.load_state_dict(position)
        shutdown()  # now, even where a traceback still holds the iterator; idempotent


class LoaderPosition:
    """A loader's position as the checkpointer saves and restores it.

    A parked loader (`park_workers`) keeps its position for its next iterator; asking
    `StatefulDataLoader.state_dict()` then would start worker processes only to say it, so
    the kept position is answered instead."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def state_dict(self) -> Any:
        kept = getattr(self.loader, "next_iter_state", None)
        if kept is not None and getattr(self.loader, "_iterator", None) is None:
            return kept
        return self.loader.state_dict()

    def load_state_dict(self, state: Any) -> None:
        self.loader.load_state_dict(state)
