"""Train loaders resume exactly from `state_dict()`, mid-epoch and across epoch boundaries."""

from __future__ import annotations

import pytest
import torch

from trainforge.data import build_image_data

BATCH_SIZE = 300  # digits: 1438 train images -> 5 batches per epoch, the last one partial


def _train_loader(make_cfg, seed: int = 7, num_workers: int = 0):
    cfg = make_cfg(dataloader_num_workers=num_workers)
    data = build_image_data(cfg, batch_size=BATCH_SIZE, eval_batch_size=500, seed=seed)
    return data.train_loader


def _batches(loader, num_epochs: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Batches of `num_epochs` epochs in order, as a training loop would draw them."""
    return [batch for _ in range(num_epochs) for batch in loader]


def _assert_same(left, right) -> None:
    assert len(left) == len(right)
    for batch_a, batch_b in zip(left, right, strict=True):
        assert len(batch_a) == len(batch_b) == 3  # images, labels, each sample's random bits
        assert all(torch.equal(a, b) for a, b in zip(batch_a, batch_b, strict=True))


def test_same_seed_same_order_and_epochs_differ(make_cfg) -> None:
    first = _batches(_train_loader(make_cfg), num_epochs=2)
    _assert_same(first, _batches(_train_loader(make_cfg), num_epochs=2))
    assert len(first) == 10 and first[4][1].shape == (1438 - 4 * BATCH_SIZE,)
    assert not torch.equal(first[0][1], first[5][1])  # each epoch reshuffles
    epoch_labels = torch.cat([batch[1] for batch in first[:5]])
    assert epoch_labels.shape == (1438,)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_mid_epoch(make_cfg, num_workers: int) -> None:
    loader = _train_loader(make_cfg, num_workers=num_workers)
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)
    state = loader.state_dict()
    expected = [next(iterator) for _ in range(2)]  # rest of epoch 1
    resumed = _train_loader(make_cfg, num_workers=num_workers)
    resumed.load_state_dict(state)
    _assert_same(list(resumed), expected)


@pytest.mark.parametrize("persistent", [False, True])
def test_a_parked_loader_ends_its_workers_and_continues_exactly(make_cfg, persistent) -> None:
    """`park_workers` mid-epoch and after an epoch's end: the workers are gone at once, the
    position is answered without starting new ones, and the batches go on unchanged."""
    import multiprocessing

    from trainforge.data.loaders import LoaderPosition, park_workers

    def loader():
        cfg = make_cfg(dataloader_num_workers=2, persistent_workers=persistent)
        return build_image_data(cfg, batch_size=BATCH_SIZE, eval_batch_size=500, seed=7)

    straight = _batches(loader().train_loader, num_epochs=2)
    before = set(multiprocessing.active_children())
    data = loader()
    train, parked = data.train_loader, []
    iterator = iter(train)
    parked += [next(iterator) for _ in range(3)]
    state = train.state_dict()
    park_workers(train)
    del iterator
    assert set(multiprocessing.active_children()) <= before
    assert LoaderPosition(train).state_dict() == state
    assert set(multiprocessing.active_children()) <= before
    parked += list(train)  # the rest of epoch 1
    park_workers(train)
    parked += list(train)  # epoch 2
    _assert_same(parked, straight)
    list(data.val_loader)
    for each in (train, data.val_loader):
        park_workers(each)
    assert set(multiprocessing.active_children()) <= before


def test_the_order_does_not_depend_on_the_number_of_loader_workers(make_cfg) -> None:
    """A multi-process loader calls iter() on its sampler twice while starting; the epoch
    it yields must still be epoch 0 (found on a GPU machine: 6 workers trained another
    order than 0 workers, so the hardware profile changed what the run computed)."""
    plain = _batches(_train_loader(make_cfg, num_workers=0), num_epochs=2)
    _assert_same(_batches(_train_loader(make_cfg, num_workers=2), num_epochs=2), plain)


def test_a_moved_run_starts_mid_epoch_under_workers(make_cfg) -> None:
    """`start_at` (a run resumed on another layout) holds under a multi-process loader."""
    reference = _batches(_train_loader(make_cfg), num_epochs=2)
    loader = _train_loader(make_cfg, num_workers=2)
    loader.batch_sampler.start_at(1, 2)
    _assert_same(list(loader), reference[7:])


@pytest.mark.parametrize("batches_before_save", [5, 7])
def test_resume_across_epoch_boundary(make_cfg, batches_before_save: int) -> None:
    # 5 = saved exactly at the end of epoch 1; 7 = saved inside epoch 2.
    loader = _train_loader(make_cfg)
    reference = _batches(loader, num_epochs=3)
    loader = _train_loader(make_cfg)
    drawn = 0
    state = None
    for _ in range(3):
        for _batch in loader:
            drawn += 1
            if drawn == batches_before_save:
                state = loader.state_dict()
        if state is not None:
            break
    resumed = _train_loader(make_cfg)
    resumed.load_state_dict(state)
    continued = []
    while len(continued) < 3:
        continued.extend(resumed)  # the rest of the current epoch, then whole next epochs
    _assert_same(continued[:3], reference[batches_before_save : batches_before_save + 3])


def test_iterating_leaves_global_rng_alone(make_cfg) -> None:
    # Augmentation draws from the global RNG; the loader must not consume from it per epoch.
    loader = _train_loader(make_cfg)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    _batches(loader, num_epochs=2)
    assert torch.equal(torch.get_rng_state(), before)


def test_worker_options_only_with_workers(make_cfg) -> None:
    options = {"prefetch_factor": 3, "persistent_workers": True, "pin_memory": True}
    cfg = make_cfg(dataloader_num_workers=0, **options)
    data = build_image_data(cfg, batch_size=64, eval_batch_size=64, seed=0)
    assert data.train_loader.prefetch_factor is None  # torch rejects it without workers
    assert data.train_loader.persistent_workers is False
    assert data.train_loader.pin_memory is torch.cuda.is_available()
    cfg = make_cfg(dataloader_num_workers=1, **options)
    data = build_image_data(cfg, batch_size=64, eval_batch_size=64, seed=0)
    assert data.val_loader.prefetch_factor == 3 and data.val_loader.persistent_workers is True
    assert data.val_loader.num_workers == 1


def test_one_process_batches_equal_torchs_batch_sampler_over_the_same_order():
    from torch.utils.data import BatchSampler

    from trainforge.data.sampling import EpochShuffleSampler, StepBatchSampler

    for total, batch in ((100, 16), (101, 7), (5, 8)):
        ours = StepBatchSampler(total, 3, batch)
        torchs = BatchSampler(EpochShuffleSampler(total, 3), batch, False)
        assert len(ours) == len(torchs)
        for _epoch in range(3):
            assert list(ours) == list(torchs)


def test_a_loader_state_saved_by_the_per_index_iterator_still_resumes():
    """Checkpoints written before the step layout count samples, some inside torch's
    BatchSampler iterator state."""
    from trainforge.data.sampling import StepBatchSampler

    sampler = StepBatchSampler(50, 1, 10)
    reference = [list(sampler) for _ in range(3)]
    resumed = StepBatchSampler(50, 1, 10)
    iterator = iter(resumed)
    old = {"samples_yielded": 20, "sampler_iter_state": {"epoch": 1, "num_yielded": 20}}
    iterator.load_state_dict(old)
    assert list(iterator) == reference[1][2:]
    assert list(resumed) == reference[2]


def test_a_length_grouped_text_loader_resumes_mid_epoch_exactly(make_cfg) -> None:
    from trainforge.data.loaders import make_loader
    from trainforge.data.text import IGNORE, TokenDataset
    from trainforge.data.text.encode import Example

    g = torch.Generator().manual_seed(3)
    lengths = torch.randint(2, 40, (300,), generator=g).tolist()
    examples = [Example([1] * n, [IGNORE] + [1] * (n - 1), 1, "") for n in lengths]

    def loader():
        data = TokenDataset(examples, pad_id=0, group_by_length=True)
        return make_loader(data, make_cfg(), batch_size=16, train=True, seed=5,
                           batched_fetch=True)  # fmt: skip

    first = loader()
    iterator = iter(first)
    seen = [next(iterator) for _ in range(4)]
    state = first.state_dict()
    expected = [next(iterator)["input_ids"] for _ in range(3)]
    resumed = loader()
    resumed.load_state_dict(state)
    again = iter(resumed)
    assert all(torch.equal(next(again)["input_ids"], ids) for ids in expected)
    # Grouped: each batch pads to a width near its shortest row.
    widths = [b["attention_mask"].shape[1] - b["attention_mask"].sum(1).min() for b in seen]
    assert max(widths) <= 3
