"""A small in-memory train set is gathered a whole epoch at a time and augmented once per
epoch: every batch must hold, bit for bit and with the same strides, what the batch-at-a-time
path gives it, for every split of a step over processes and micro-batches, mid-epoch
resumes included."""

from __future__ import annotations

import pytest
import torch

from trainforge.data.augment import BatchAugment
from trainforge.data.memory import TensorImageDataset
from trainforge.data.sampling import EpochBatch, KeyedDataset, StepBatchSampler
from trainforge.tasks.vision import ImageClassification

SPLITS = [(64, 1, 1), (16, 4, 1), (32, 1, 2), (5, 3, 2), (7, 1, 3)]


def _dataset(num_items: int = 103) -> TensorImageDataset:
    generator = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (num_items, 3, 6, 6), dtype=torch.uint8, generator=generator)
    return TensorImageDataset(images, torch.arange(num_items) % 10)


def _task(augment: BatchAugment) -> ImageClassification:
    return ImageClassification(
        model=torch.nn.Identity(), train_loader=None, val_loader=None, augment=augment,
        num_train_samples=0, num_classes=10, class_names=[], label_smoothing=0.0,
    )  # fmt: skip


def _batches(keyed: KeyedDataset, sampler: StepBatchSampler, epochs: int):
    for _ in range(epochs):
        for keys in sampler:
            yield keyed.__getitems__(keys)


@pytest.mark.parametrize(("micro", "accumulation", "world"), SPLITS)
def test_every_batch_of_a_gathered_epoch_equals_the_batch_gathered_alone(
    micro, accumulation, world
):
    data = _dataset()
    augment = BatchAugment([0.4, 0.5, 0.6], [0.2, 0.25, 0.3], 2, horizontal_flip=True)
    whole_task, alone_task = _task(augment), _task(augment)
    cpu = torch.device("cpu")
    for rank in range(world):
        samplers = [StepBatchSampler(len(data), 9, micro, accumulation, rank, world, keyed=True)
                    for _ in range(2)]  # fmt: skip
        whole = KeyedDataset(data, 9, batched=True, whole_epochs=True)
        alone = KeyedDataset(data, 9, batched=True)
        pairs = zip(_batches(whole, samplers[0], 3), _batches(alone, samplers[1], 3), strict=True)
        for fast, slow in pairs:
            assert isinstance(fast, EpochBatch), "a run of the epoch's order is a view"
            assert not isinstance(slow, EpochBatch)
            for got, want in zip(fast, slow, strict=True):
                assert torch.equal(got, want)
            images, labels = whole_task.to_device(fast, cpu, train=True)
            images_alone, labels_alone = alone_task.to_device(slow, cpu, train=True)
            assert torch.equal(images, images_alone) and torch.equal(labels, labels_alone)
            assert images.stride() == images_alone.stride(), "the layout is part of the results"
        assert whole_task._epoch_augmented[0].number == 2  # one epoch kept at a time


def test_a_resume_mid_epoch_and_keys_off_the_run_are_served_the_same():
    data = _dataset()
    whole = KeyedDataset(data, 4, batched=True, whole_epochs=True)
    alone = KeyedDataset(data, 4, batched=True)
    sampler = StepBatchSampler(len(data), 4, 8, keyed=True)
    sampler.start_at(1, 5)  # a resume: epoch 1, optimizer step 5
    keys = next(iter(sampler))
    assert keys[0] // len(data) == 1
    for got, want in zip(whole.__getitems__(keys), alone.__getitems__(keys), strict=True):
        assert torch.equal(got, want)
    # Keys that are no run of the epoch's order (or span two epochs) are gathered alone.
    scattered = [keys[3], keys[0], keys[5]]
    two_epochs = [keys[0], keys[1] + len(data)]
    for odd in (scattered, two_epochs):
        batch = whole.__getitems__(odd)
        assert not isinstance(batch, EpochBatch)
        for got, want in zip(batch, alone.__getitems__(odd), strict=True):
            assert torch.equal(got, want)


def test_the_loader_gathers_whole_epochs_only_for_small_sets_read_in_process(monkeypatch):
    from types import SimpleNamespace

    from trainforge.data.loaders import make_loader

    cfg = SimpleNamespace(dataloader_num_workers=0, pin_memory=False, prefetch_factor=None,
                          persistent_workers=False)  # fmt: skip
    options = {"batch_size": 8, "train": True, "seed": 0, "batched_fetch": True, "keyed": True}
    data = _dataset()
    loader = make_loader(data, cfg, **options)
    assert loader.dataset.whole_epochs
    assert isinstance(next(iter(loader)), EpochBatch)
    monkeypatch.setattr("trainforge.data.loaders.WHOLE_EPOCH_MAX_BYTES", data.nbytes - 1)
    assert not make_loader(data, cfg, **options).dataset.whole_epochs
    monkeypatch.undo()
    workers = SimpleNamespace(**{**vars(cfg), "dataloader_num_workers": 1})
    assert not make_loader(data, workers, **options).dataset.whole_epochs
