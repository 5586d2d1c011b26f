"""Seeded, resumable shuffling for the train loader.

Owns `EpochShuffleSampler`: epoch k's order is a pure function of (seed, k), and its iterator
saves (epoch, samples yielded), so a loader restored with `load_state_dict()` continues at the
exact next batch, mid-epoch or at an epoch boundary.

Why not `shuffle=True, generator=...`: torchdata 0.11's stateful RandomSampler restores the shared
generator to its state at the start of the saved epoch, but the original run also drew a worker
base seed from that generator before the next epoch; after a resume the following epochs
therefore come out in a different order than in the uninterrupted run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Sampler


def epoch_permutation(num_items: int, seed: int, epoch: int) -> list[int]:
    """The shuffled order of epoch `epoch` (0-based) for run seed `seed`."""
    # SeedSequence mixes (seed, epoch) so nearby seed or epoch values give unrelated permutations.
    epoch_seed = int(np.random.SeedSequence([int(seed), int(epoch)]).generate_state(1)[0])
    generator = torch.Generator().manual_seed(epoch_seed)
    return torch.randperm(num_items, generator=generator).tolist()


class EpochShuffleSampler(Sampler[int]):
    """Shuffles 0..num_items-1 anew each epoch; each `iter()` starts the next epoch.

    Under torch.distributed each rank takes every `world_size`-th index of the epoch's order
    (starting at its rank), after padding the order by wrapping so every rank gets the same
    number of samples (and DDP the same number of steps). Rank r's k-th batch and the other
    ranks' k-th batches then hold exactly the samples of a single process's k-th batch of
    `world_size` times the size, whenever the data set divides evenly.
    """

    def __init__(self, num_items: int, seed: int, rank: int = 0, world_size: int = 1) -> None:
        self.total = int(num_items)
        self.seed = int(seed)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.num_items = -(-self.total // self.world_size)  # this rank's share, rounded up
        self.next_epoch = 0

    def __len__(self) -> int:
        return self.num_items

    def order(self, epoch: int) -> list[int]:
        full = epoch_permutation(self.total, self.seed, epoch)
        if self.world_size == 1:
            return full
        padded = full + full[: self.num_items * self.world_size - self.total]
        return padded[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[int]:
        iterator = _EpochIterator(self, self.next_epoch)
        self.next_epoch += 1
        return iterator


class EpochShuffleBatchSampler(Sampler[list[int]]):
    """Whole batches of an EpochShuffleSampler's order, cut as slices of it.

    The same batches as torch's `BatchSampler(sampler, batch_size, drop_last=False)`, without
    a Python call per index: one list slice per batch. Its iterator saves the same
    (epoch, samples yielded) as the per-index iterator, so resume stays exact.
    """

    def __init__(self, sampler: EpochShuffleSampler, batch_size: int) -> None:
        self.sampler = sampler
        self.batch_size = int(batch_size)

    def __len__(self) -> int:
        return -(-len(self.sampler) // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        iterator = _EpochBatchIterator(self.sampler, self.sampler.next_epoch, self.batch_size)
        self.sampler.next_epoch += 1
        return iterator


class StridedSampler(Sampler[int]):
    """Validation under torch.distributed: rank r reads indices r, r + W, ... (no padding:
    metrics are summed over ranks, so every sample counts exactly once)."""

    def __init__(self, num_items: int, rank: int, world_size: int) -> None:
        self.indices = list(range(rank, int(num_items), world_size))

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)


class _EpochIterator(Iterator[int]):
    """One epoch of an EpochShuffleSampler; `state_dict()` makes StatefulDataLoader resumable."""

    def __init__(self, sampler: EpochShuffleSampler, epoch: int) -> None:
        self.sampler = sampler
        self.epoch = epoch
        self.num_yielded = 0
        # Built on first use: the loader creates (and then replaces) iterators while restoring.
        self._order: list[int] | None = None

    def __iter__(self) -> _EpochIterator:
        return self

    def __next__(self) -> int:
        if self.num_yielded >= self.sampler.num_items:
            raise StopIteration
        if self._order is None:
            self._order = self.sampler.order(self.epoch)
        index = self._order[self.num_yielded]
        self.num_yielded += 1
        return index

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "num_yielded": self.num_yielded}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # Checkpoints from before batch slicing hold torch's BatchSampler iterator state,
        # with this iterator's state inside it.
        state = state.get("sampler_iter_state", state)
        self.epoch = int(state["epoch"])
        self.num_yielded = int(state["num_yielded"])
        self._order = None
        # The next iter() on the sampler must start the epoch after the restored one.
        self.sampler.next_epoch = self.epoch + 1


class _EpochBatchIterator(_EpochIterator):
    """One epoch of an EpochShuffleBatchSampler: batches as slices of the epoch's order."""

    def __init__(self, sampler: EpochShuffleSampler, epoch: int, batch_size: int) -> None:
        super().__init__(sampler, epoch)
        self.batch_size = batch_size

    def __next__(self) -> list[int]:  # type: ignore[override]
        start = self.num_yielded
        if start >= self.sampler.num_items:
            raise StopIteration
        if self._order is None:
            self._order = self.sampler.order(self.epoch)
        batch = self._order[start : min(start + self.batch_size, self.sampler.num_items)]
        self.num_yielded = start + len(batch)
        return batch
