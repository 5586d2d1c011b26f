"""The sample stream is a function of (seed, epoch, sample) alone: every split of a step
over processes, micro-batches and accumulation holds the same samples, and every sample
draws the same random bits wherever it lands."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainforge.data.augment import BatchAugment
from trainforge.data.sampling import (
    GROUP_MEGABATCH,
    StepBatchSampler,
    StepLayout,
    epoch_permutation,
    length_grouped_order,
    sample_keys,
)

SPLITS = [(64, 1, 1), (16, 4, 1), (32, 1, 2), (8, 4, 2), (1, 4, 4), (3, 2, 3), (5, 3, 2)]
# (micro, accumulation, world, step batch): steps whose slots differ by one sample, or hold
# fewer samples than slots (stand-ins in every step)
UNEVEN = [(22, 1, 3, 64), (13, 1, 5, 64), (10, 1, 7, 64), (9, 2, 2, 33), (1, 3, 4, 10)]


def steps_of(num_items, micro, accumulation, world, epoch, step_batch=None):
    """(order, {step: samples}, padding count) over every rank's micro-batches of one epoch."""
    order = epoch_permutation(num_items, 11, epoch)
    layouts = [
        StepLayout(num_items, micro, accumulation, r, world, step_batch) for r in range(world)
    ]
    counts = {layout.batches_per_epoch for layout in layouts}
    assert len(counts) == 1, "every rank runs the same number of micro-batches"
    steps: dict[int, list[int]] = {}
    padding = 0
    for layout in layouts:
        step = 0
        for index in range(layout.batches_per_epoch):
            batch = layout.batch(order, index)
            assert 1 <= len(batch) <= micro
            step = min(index // accumulation, layout.full_steps)
            assert (index in layout.padding) == layout.is_padding(index)
            if layout.is_padding(index):
                padding += 1
                continue
            steps.setdefault(step, []).extend(batch)
    return order, steps, padding


@pytest.mark.parametrize("num_items", [64, 100, 129, 7, 1])
@pytest.mark.parametrize(("micro", "accumulation", "world"), SPLITS)
def test_every_split_gives_each_step_the_same_samples(num_items, micro, accumulation, world):
    batch = micro * accumulation * world
    for epoch in (0, 3):
        order, steps, _ = steps_of(num_items, micro, accumulation, world, epoch)
        assert sorted(steps) == list(range(-(-num_items // batch)))
        for step, samples in steps.items():
            assert sorted(samples) == sorted(order[step * batch : (step + 1) * batch])


@pytest.mark.parametrize("num_items", [64, 100, 129, 7, 1, 1437])
@pytest.mark.parametrize(("micro", "accumulation", "world", "batch"), UNEVEN)
def test_an_uneven_split_keeps_each_steps_samples(num_items, micro, accumulation, world, batch):
    for epoch in (0, 3):
        order, steps, _ = steps_of(num_items, micro, accumulation, world, epoch, batch)
        assert sorted(steps) == list(range(-(-num_items // batch)))
        for step, samples in steps.items():
            assert sorted(samples) == sorted(order[step * batch : (step + 1) * batch])


def test_a_step_of_64_on_3_processes_is_cut_22_21_21():
    order = epoch_permutation(200, 11, 0)
    layouts = [StepLayout(200, 22, 1, rank, 3, 64) for rank in range(3)]
    assert [len(layout.batch(order, 0)) for layout in layouts] == [22, 21, 21]
    assert [len(layout.batch(order, 2)) for layout in layouts] == [22, 21, 21]
    # the last step holds 200 - 3 x 64 = 8 samples: 3, 3 and 2, no stand-in
    assert [len(layout.batch(order, 3)) for layout in layouts] == [3, 3, 2]
    assert all(layout.batches_per_epoch == 4 and not layout.padding for layout in layouts)


def test_a_step_with_fewer_samples_than_slots_gets_stand_ins_in_every_step():
    """10 samples in 4 processes x 3 micro-batches of 1: slots 10 and 11 of every step are
    zero-weight stand-ins (ranks 2 and 3, third micro-batch)."""
    _, steps, padding = steps_of(40, 1, 3, 4, 0, 10)
    assert padding == 4 * 2 and all(len(s) == 10 for s in steps.values())
    layouts = [StepLayout(40, 1, 3, rank, 4, 10) for rank in range(4)]
    padded = [sorted(layout.padding) for layout in layouts]
    assert padded == [[], [], [2, 5, 8, 11], [2, 5, 8, 11]]


def test_padding_only_fills_slots_a_short_last_step_leaves_empty():
    assert steps_of(100, 8, 4, 2, 0)[2] == 0  # a tail of 36 fills 3 micro-batches per rank
    _, steps, padding = steps_of(65, 16, 2, 2, 0)  # a tail of 1 sample, 2 processes
    assert padding == 1 and steps[1] and len(steps[1]) == 1


def test_start_at_a_step_continues_the_same_samples_on_another_split():
    whole = StepBatchSampler(100, 5, 10, 2)  # 1 process, 10 x 2: 5 steps of 20
    assert len(list(whole)) == 10
    moved = [StepBatchSampler(100, 5, 5, 2, rank, 2) for rank in (0, 1)]  # 2 processes 5 x 2
    for sampler in moved:
        sampler.start_at(0, 3)  # three steps of 20 done
    later = sorted(i for sampler in moved for batch in sampler for i in batch)
    assert later == sorted(epoch_permutation(100, 5, 0)[60:])
    assert all(len(list(sampler)) == 10 for sampler in moved)  # then whole epochs again


def test_a_stop_at_an_epochs_end_moved_to_another_split_starts_the_next_epoch():
    """A checkpoint taken after an epoch's short last step (1,437 samples, steps of 64: 23
    steps, the last of 29), resumed on another split: nothing of that epoch is trained
    again, and the next epoch starts at its first step."""
    assert StepLayout(1437, 64).steps_per_epoch == 23
    for world in (1, 2, 3):
        moved = [StepBatchSampler(1437, 5, 64 // world + 1, 1, rank, world, step_batch=64)
                 for rank in range(world)]  # fmt: skip
        for sampler in moved:
            sampler.start_at(8, 23)  # every step of epoch 8 done
            assert list(sampler) == []
        first = sorted(i for sampler in moved for i in next(iter(sampler)))
        assert first == sorted(epoch_permutation(1437, 5, 9)[:64])


def test_a_samples_bits_depend_on_seed_epoch_and_index_only():
    indices = np.arange(10)
    bits = sample_keys(7, np.zeros(10, dtype=np.int64), indices)
    again = sample_keys(7, np.zeros(3, dtype=np.int64), indices[[4, 2, 9]])
    assert (again == bits[[4, 2, 9]]).all()
    assert len(set(bits.tolist())) == 10
    assert not (sample_keys(7, np.ones(10, dtype=np.int64), indices) == bits).any()
    assert not (sample_keys(8, np.zeros(10, dtype=np.int64), indices) == bits).any()


def test_an_images_crop_and_flip_follow_it_into_any_micro_batch():
    augment = BatchAugment([0.5], [0.25], crop_padding_px=2, horizontal_flip=True)
    images = torch.randint(0, 256, (12, 1, 8, 8), dtype=torch.uint8)
    bits = torch.from_numpy(sample_keys(3, np.zeros(12, dtype=np.int64), np.arange(12)))
    whole = augment(images, train=True, sample_bits=bits)
    torch.manual_seed(0)  # the global RNG plays no part
    halves = [
        augment(images[s], train=True, sample_bits=bits[s]) for s in (slice(0, 5), slice(5, 12))
    ]
    assert torch.equal(torch.cat(halves), whole)
    flips = ((bits >> 32) & 1).bool()
    assert 0 < int(flips.sum()) < 12


def _lengths(num_items: int) -> list[int]:
    return torch.randint(3, 60, (num_items,), generator=torch.Generator().manual_seed(4)).tolist()


def _grouped_steps(lengths, micro, accumulation, world, epoch, step_batch):
    """{step: sorted samples} and the padded tokens of every micro-batch, all ranks."""
    samplers = [
        StepBatchSampler(len(lengths), 11, micro, accumulation, r, world, step_batch=step_batch,
                         lengths=lengths)
        for r in range(world)
    ]  # fmt: skip
    steps: dict[int, list[int]] = {}
    padded = 0
    for sampler in samplers:
        sampler.start_at(epoch, 0)
        for index, batch in enumerate(sampler):
            if sampler.layout.is_padding(index):
                continue
            padded += len(batch) * max(lengths[i] for i in batch)
            step = min(index // accumulation, sampler.layout.full_steps)
            steps.setdefault(step, []).extend(batch)
    return {k: sorted(v) for k, v in steps.items()}, padded


@pytest.mark.parametrize(("micro", "accumulation", "world"), [(8, 1, 1), (2, 2, 2), (3, 1, 3)])
def test_length_grouped_steps_are_the_same_on_every_split(micro, accumulation, world):
    lengths = _lengths(1000)
    reference, _ = _grouped_steps(lengths, 8, 1, 1, 2, 8)
    steps, _ = _grouped_steps(lengths, micro, accumulation, world, 2, 8)
    assert steps == reference and sorted(i for s in steps.values() for i in s) == list(range(1000))


def test_length_grouping_cuts_padding_and_keeps_the_epochs_random():
    lengths = _lengths(1000)
    _, grouped = _grouped_steps(lengths, 16, 1, 1, 0, 16)
    plain = StepBatchSampler(1000, 11, 16)
    padded = sum(len(b) * max(lengths[i] for i in b) for b in plain)
    real = sum(lengths)
    assert (grouped - real) / grouped < 0.1 < 0.3 < (padded - real) / padded
    first = length_grouped_order(epoch_permutation(1000, 11, 0), lengths, 16, 11, 0)
    second = length_grouped_order(epoch_permutation(1000, 11, 1), lengths, 16, 11, 1)
    assert first != second and sorted(first) == list(range(1000))
    # Steps are shuffled as wholes: the longest step does not always come first.
    step_max = [max(lengths[i] for i in first[k * 16 : (k + 1) * 16]) for k in range(62)]
    assert step_max != sorted(step_max, reverse=True) and GROUP_MEGABATCH * 16 < 1000
