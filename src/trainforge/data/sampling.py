"""The training sample stream: which samples make up each optimizer step, on any hardware.

Owns `epoch_permutation` (epoch k's order, a pure function of (seed, k)), `StepLayout` (how
one optimizer step's samples are cut into micro-batches over processes) and
`StepBatchSampler`, the train loader's batch sampler built from both. Its iterator saves
(epoch, batches yielded), so a loader restored with `load_state_dict()` continues at the
exact next batch; `start_at(epoch, step)` puts a new loader at the start of an optimizer
step of any layout, which is how a run moves to another process count or micro-batch.

The invariant: optimizer step k of epoch e holds the samples at positions [k*B, (k+1)*B) of
epoch e's order, B being the recipe's effective batch, whatever the number of processes, the
micro-batch or the accumulation. Each step is cut into `world_size x accumulation` slots
sized within one sample of each other (64 on 3 processes: 22, 21, 21), so any process count
keeps the recipe's batch; rank r's m-th micro-batch is slot m*W + r. The epoch's last step
may be short: it is cut into as few micro-batches per rank as hold it (the same number on
every rank, as DDP and FSDP need), sized the same way. A slot left empty (a step of fewer
samples than slots) is filled with a stand-in sample whose loss weight is zero
(`StepLayout.is_padding`). No sample is repeated and none is dropped.

Length grouping (`lengths`, text without packing; HF's `group_by_length` /
`LengthGroupedSampler`): epoch e's order is cut into megabatches of `GROUP_MEGABATCH` steps,
each sorted longest first, and its full steps are then shuffled as whole steps (the short last
step stays last). A step then holds samples of similar length, and its micro-batches (runs of
it) pad little; the order is still a pure function of (seed, epoch, sample index, lengths)
and is cut in steps of the recipe's batch, so every split and every resume sees the same steps.

Why not `DistributedSampler` + `BatchSampler`: they pad an epoch by repeating samples and
split it per rank before cutting batches, so the step's samples change with the process
count and the micro-batch. torchdata 0.11's stateful RandomSampler restores its generator to
the start of the saved epoch but the original run drew a worker base seed from it too, so a
resumed run's later epochs come out in another order; the order here is a pure function.
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


# Steps per length-sorted megabatch: HF's LengthGroupedSampler sorts 50 batches at a time.
GROUP_MEGABATCH = 50


def length_grouped_order(
    order: list[int], lengths: list[int], step_size: int, seed: int, epoch: int
) -> list[int]:
    """`order` (an epoch's permutation) regrouped by length in steps of `step_size`: each run
    of GROUP_MEGABATCH steps sorted longest first, then the full steps shuffled as wholes."""
    mega = GROUP_MEGABATCH * step_size
    # Python's sort is stable: samples of equal length keep their shuffled order.
    grouped = [
        i for m in range(0, len(order), mega)
        for i in sorted(order[m : m + mega], key=lambda i: -lengths[i])
    ]  # fmt: skip
    full = len(grouped) // step_size
    state = np.random.SeedSequence([int(seed), int(epoch), 1]).generate_state(1)[0]
    generator = torch.Generator().manual_seed(int(state))
    steps = torch.randperm(full, generator=generator).tolist()
    out = [i for s in steps for i in grouped[s * step_size : (s + 1) * step_size]]
    return out + grouped[full * step_size :]


class EpochShuffleSampler(Sampler[int]):
    """0..num_items-1 in a new shuffled order each epoch; each `iter()` starts the next epoch.
    One process, one index at a time (the train loader uses `StepBatchSampler`)."""

    def __init__(self, num_items: int, seed: int) -> None:
        self.total = self.num_items = int(num_items)
        self.seed = int(seed)
        self.next_epoch = 0

    def __len__(self) -> int:
        return self.num_items

    def order(self, epoch: int) -> list[int]:
        return epoch_permutation(self.total, self.seed, epoch)

    def __iter__(self) -> Iterator[int]:
        # The epoch is claimed by the iterator's first next(), not here (see _StepIterator).
        return _EpochIterator(self, self.next_epoch)


class StepLayout:
    """Where each sample of an epoch goes: optimizer step, process, micro-batch (module doc).

    A pure function of (num_items, micro_batch, accumulation, world_size, rank, step_batch):
    the same on every epoch, since only the order changes between epochs. `micro_batch` is
    the largest micro-batch; `step_batch` the samples of a full step (None: every slot full,
    micro_batch x accumulation x world_size).
    """

    def __init__(
        self, num_items: int, micro_batch: int, accumulation: int = 1, rank: int = 0,
        world_size: int = 1, step_batch: int | None = None,
    ) -> None:  # fmt: skip
        self.num_items = int(num_items)
        self.accumulation, self.rank, self.world = int(accumulation), int(rank), int(world_size)
        slots = self.accumulation * self.world
        self.step_size = int(step_batch) if step_batch else int(micro_batch) * slots
        # A run's config read back on fewer processes than it was planned for (evaluate,
        # export, a throwaway probe task) never trains from this loader; its micro-batches
        # grow to hold the recipe's step rather than change it.
        self.micro = max(int(micro_batch), -(-self.step_size // slots))
        self.full_steps, self.tail = divmod(self.num_items, self.step_size)
        # Micro-batches per rank in the short last step: as few as hold it.
        self.tail_micro = -(-self.tail // (self.world * self.micro)) if self.tail else 0
        # This rank's zero-weight stand-ins of an epoch, by batch index (the loop asks for
        # every batch, so a set, not a call): empty slots of every full step (only where a
        # step has fewer samples than slots) and of the short last step.
        full = [self._slot(m, self.step_size, slots)[1] for m in range(self.accumulation)]
        empty = [m for m, size in enumerate(full) if size == 0]
        tail_start = self.full_steps * self.accumulation
        tail_slots = self.world * self.tail_micro
        self.padding = frozenset(
            [s * self.accumulation + m for s in range(self.full_steps) for m in empty]
            + [tail_start + m for m in range(self.tail_micro)
               if self._slot(m, self.tail, tail_slots)[1] == 0]
        )  # fmt: skip

    @property
    def steps_per_epoch(self) -> int:
        return self.full_steps + (1 if self.tail else 0)

    @property
    def batches_per_epoch(self) -> int:
        """This rank's micro-batches per epoch (the same on every rank)."""
        return self.full_steps * self.accumulation + self.tail_micro

    def step_start(self, step: int) -> int:
        """The batch index (in this rank's epoch) where optimizer step `step` begins; past
        the last step (an epoch whose every step is done, a stop at its end), the epoch's
        end: the short last step is not to be trained again."""
        if step >= self.steps_per_epoch:
            return self.batches_per_epoch
        return step * self.accumulation

    def batch(self, order: list[int], index: int) -> list[int]:
        """This rank's `index`-th micro-batch of the epoch whose order is `order`."""
        step, micro = divmod(index, self.accumulation)
        if step < self.full_steps:
            base = step * self.step_size
            start, size = self._slot(micro, self.step_size, self.accumulation * self.world)
        else:
            base = self.full_steps * self.step_size
            micro = index - self.full_steps * self.accumulation
            start, size = self._slot(micro, self.tail, self.world * self.tail_micro)
        if size == 0:
            return order[base : base + 1]  # stand-in with zero loss weight (is_padding)
        return order[base + start : base + start + size]

    def is_padding(self, index: int) -> bool:
        """Whether this rank's `index`-th micro-batch is a zero-weight stand-in."""
        return index in self.padding

    def _slot(self, micro: int, samples: int, slots: int) -> tuple[int, int]:
        """(offset in its step, size) of this rank's `micro`-th micro-batch of a step of
        `samples` cut into `slots` slots within one sample of each other."""
        slot = micro * self.world + self.rank
        base, extra = divmod(samples, slots)
        return slot * base + min(slot, extra), base + (1 if slot < extra else 0)


class StepBatchSampler(Sampler[list[int]]):
    """This rank's micro-batches of each epoch, in order (see `StepLayout`).

    Each `iter()` starts the next epoch; `start_at` makes the next one start mid-epoch at an
    optimizer step boundary. The iterator's state is (epoch, batches yielded). `keyed`:
    yield `epoch * num_items + index` for a `KeyedDataset`. `step_batch`: the samples of a
    full optimizer step, the recipe's effective batch (None: micro x accumulation x world).
    `lengths`: each sample's length, to group steps by length (`length_grouped_order`).
    """

    def __init__(
        self, num_items: int, seed: int, micro_batch: int, accumulation: int = 1,
        rank: int = 0, world_size: int = 1, keyed: bool = False, step_batch: int | None = None,
        lengths: list[int] | None = None,
    ) -> None:  # fmt: skip
        self.seed, self.keyed = int(seed), keyed
        self.lengths = list(lengths) if lengths is not None else None
        self.layout = StepLayout(num_items, micro_batch, accumulation, rank, world_size, step_batch)
        self.next_epoch = 0
        self.next_batch = 0  # where the next iter() starts in its epoch

    def __len__(self) -> int:
        return self.layout.batches_per_epoch

    def order(self, epoch: int) -> list[int]:
        """Epoch `epoch`'s sample order: shuffled, and grouped by length where lengths are
        given."""
        order = epoch_permutation(self.layout.num_items, self.seed, epoch)
        if self.lengths is None:
            return order
        return length_grouped_order(order, self.lengths, self.layout.step_size, self.seed, epoch)

    def start_at(self, epoch: int, step: int) -> None:
        """The next `iter()` starts epoch `epoch` at optimizer step `step` of this layout."""
        self.next_epoch, self.next_batch = int(epoch), self.layout.step_start(int(step))

    @property
    def padding(self) -> frozenset[int]:
        """The batch indices of an epoch that are zero-weight stand-ins (`StepLayout`)."""
        return self.layout.padding

    def __iter__(self) -> Iterator[list[int]]:
        # The epoch is claimed by the iterator's first next(), not here: a multi-process
        # loader calls iter() twice while starting and drops the first iterator unused.
        return _StepIterator(self, self.next_epoch, self.next_batch)


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
    """One epoch of an EpochShuffleSampler."""

    def __init__(self, sampler: EpochShuffleSampler, epoch: int) -> None:
        self.sampler, self.epoch, self.num_yielded = sampler, epoch, 0
        self._order: list[int] | None = None
        self._claimed = False

    def __iter__(self) -> _EpochIterator:
        return self

    def __next__(self) -> int:
        if not self._claimed:  # the next iter() on the sampler starts the epoch after this
            self._claimed, self.sampler.next_epoch = True, self.epoch + 1
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
        self.epoch, self.num_yielded = int(state["epoch"]), int(state["num_yielded"])
        self._order, self._claimed = None, True
        self.sampler.next_epoch = self.epoch + 1


class _StepIterator(Iterator[list[int]]):
    """One epoch of a StepBatchSampler; `state_dict()` makes StatefulDataLoader resumable."""

    def __init__(self, sampler: StepBatchSampler, epoch: int, batch: int) -> None:
        self.sampler, self.epoch, self.batches = sampler, epoch, batch
        # Built on first use: the loader creates (and then replaces) iterators while restoring.
        self._order: list[int] | None = None
        self._claimed = False

    def __iter__(self) -> _StepIterator:
        return self

    def __next__(self) -> list[int]:
        if not self._claimed:  # the next iter() on the sampler starts the epoch after this
            self._claimed = True
            self.sampler.next_epoch, self.sampler.next_batch = self.epoch + 1, 0
        layout = self.sampler.layout
        if self.batches >= layout.batches_per_epoch:
            raise StopIteration
        if self._order is None:
            self._order = self.sampler.order(self.epoch)
        batch = layout.batch(self._order, self.batches)
        self.batches += 1
        if self.sampler.keyed:
            offset = self.epoch * layout.num_items
            return [offset + index for index in batch]
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "batches": self.batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # Checkpoints from before the step layout count samples (`num_yielded`), some inside
        # torch's BatchSampler iterator state.
        state = state.get("sampler_iter_state", state)
        self.epoch = int(state["epoch"])
        if "batches" in state:
            self.batches = int(state["batches"])
        else:
            self.batches = -(-int(state["num_yielded"]) // self.sampler.layout.micro)
        self._order, self._claimed = None, True
        # The next iter() on the sampler must start the epoch after the restored one.
        self.sampler.next_epoch, self.sampler.next_batch = self.epoch + 1, 0


# ------------------------------------------------------------------ per-sample randomness
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijection of uint64 that spreads every input bit."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def sample_keys(seed: int, epochs: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """64 random bits per (seed, epoch, sample index), as int64: counter-based randomness.

    The same sample in the same epoch of a run gets the same bits on any process, in any
    micro-batch, after any resume; nothing is drawn from a generator stream.
    """
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps by design
        x = _mix64(np.uint64(seed & (2**64 - 1)) * _GOLDEN + np.uint64(0x632BE59BD9B4E019))
        x = _mix64(x ^ (epochs.astype(np.uint64) * _GOLDEN))
        x = _mix64(x ^ indices.astype(np.uint64))
    return x.view(np.int64)


# A train set held in memory up to this size is gathered a whole epoch at a time
# (`KeyedDataset(whole_epochs=True)`): one copy of it, and its augmented floats (4 bytes a
# value) in the vision task, stay in memory beside it.
WHOLE_EPOCH_MAX_BYTES = 16 * 2**20


class EpochBatch(tuple):
    """One train batch (images, labels, bits) cut as views from its epoch's gathered tensors:
    `epoch` holds the whole epoch in its order, `rows` is this batch's run of it. A consumer
    may do per-sample work on the whole epoch once and take the same rows of its result."""

    epoch: GatheredEpoch
    rows: slice

    def __new__(cls, epoch: GatheredEpoch, rows: slice) -> EpochBatch:
        batch = super().__new__(cls, (epoch.images[rows], epoch.labels[rows], epoch.bits[rows]))
        batch.epoch, batch.rows = epoch, rows
        return batch


class GatheredEpoch:
    """Every sample of epoch `number` in that epoch's order, with its random bits; `row` maps
    a sample index to its row."""

    def __init__(self, dataset: Any, seed: int, number: int) -> None:
        order = np.asarray(epoch_permutation(len(dataset), seed, number), dtype=np.int64)
        self.number = number
        self.images, self.labels = dataset.__getitems__(order.tolist())
        epochs = np.full(len(order), number, dtype=np.int64)
        self.bits = torch.from_numpy(sample_keys(seed, epochs, order))
        self.row = np.empty_like(order)
        self.row[order] = np.arange(len(order))


class KeyedDataset(torch.utils.data.Dataset):
    """A train set read through keys `epoch * len + index` (what `StepBatchSampler(keyed=
    True)` yields): each sample comes back with its 64 random bits (`sample_keys`) appended,
    so augmentation can draw per sample without a generator.

    `batched`: the wrapped set returns whole (images, labels) batches from `__getitems__`;
    else its samples are returned one by one for the loader's collate. `whole_epochs` (a
    batched set in memory, read in the training process): an epoch's first batch gathers the
    whole epoch in its order at once (`GatheredEpoch`); every batch of the epoch, a run of
    that order whatever the process count or micro-batch, is then a view of it
    (`EpochBatch`), with the same values as a batch gathered on its own."""

    def __init__(self, dataset: Any, seed: int, batched: bool, whole_epochs: bool = False) -> None:
        self.dataset, self.seed, self.batched = dataset, int(seed), batched
        self.num_items = len(dataset)
        self.whole_epochs = whole_epochs and batched
        self._epoch: GatheredEpoch | None = None

    def __len__(self) -> int:
        return self.num_items

    def __getattr__(self, name: str) -> Any:
        # The wrapped set's own attributes (images, examples, ...); never while unpickling.
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def _split(self, keys: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        epochs, indices = np.divmod(np.asarray(keys, dtype=np.int64), self.num_items)
        return indices, epochs, sample_keys(self.seed, epochs, indices)

    def __getitem__(self, key: int) -> tuple[Any, ...]:
        indices, _, bits = self._split([key])
        return (*self.dataset[int(indices[0])], int(bits[0]))

    def __getitems__(self, keys: list[int]) -> Any:
        if self.whole_epochs and keys:
            batch = self._from_epoch(keys)
            if batch is not None:
                return batch
        indices, _, bits = self._split(keys)
        if self.batched:
            batch = self.dataset.__getitems__(indices.tolist())
            return (*batch, torch.from_numpy(bits))
        samples = [self.dataset[int(i)] for i in indices.tolist()]
        return [(*sample, int(b)) for sample, b in zip(samples, bits.tolist(), strict=True)]

    def _from_epoch(self, keys: list[int]) -> EpochBatch | None:
        """The batch as a view of its gathered epoch; None where its keys are not one run of
        one epoch's order (then it is gathered on its own)."""
        number = keys[0] // self.num_items
        if self._epoch is None or self._epoch.number != number:
            self._epoch = None  # the last epoch's tensors go before the next ones are made
            self._epoch = GatheredEpoch(self.dataset, self.seed, number)
        indices = np.asarray(keys, dtype=np.int64) - number * self.num_items
        if indices.min() < 0 or indices.max() >= self.num_items:
            return None  # keys of two epochs
        rows = self._epoch.row[indices]
        start = int(rows[0])
        if not np.array_equal(rows, np.arange(start, start + len(keys))):
            return None
        return EpochBatch(self._epoch, slice(start, start + len(keys)))
