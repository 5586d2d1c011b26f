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
    # SeedSequence mixes (seed, epoch) so nearby seeds/epochs give unrelated permutations.
    epoch_seed = int(np.random.SeedSequence([int(seed), int(epoch)]).generate_state(1)[0])
    generator = torch.Generator().manual_seed(epoch_seed)
    return torch.randperm(num_items, generator=generator).tolist()


class EpochShuffleSampler(Sampler[int]):
    """Shuffles 0..num_items-1 anew each epoch; each `iter()` starts the next epoch."""

    def __init__(self, num_items: int, seed: int) -> None:
        self.num_items = int(num_items)
        self.seed = int(seed)
        self.next_epoch = 0

    def __len__(self) -> int:
        return self.num_items

    def __iter__(self) -> Iterator[int]:
        iterator = _EpochIterator(self, self.next_epoch)
        self.next_epoch += 1
        return iterator


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
            self._order = epoch_permutation(self.sampler.num_items, self.sampler.seed, self.epoch)
        index = self._order[self.num_yielded]
        self.num_yielded += 1
        return index

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "num_yielded": self.num_yielded}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.num_yielded = int(state["num_yielded"])
        self._order = None
        # The next iter() on the sampler must start the epoch after the restored one.
        self.sampler.next_epoch = self.epoch + 1
