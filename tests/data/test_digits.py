"""digits dataset: shapes, dtypes, split sizes and a split that ignores the run seed."""

from __future__ import annotations

import pytest
import torch

from trainforge.data import BatchAugment, build_image_data
from trainforge.errors import UserError


def _all_batches(loader) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = zip(*list(loader), strict=True)
    return torch.cat(images), torch.cat(labels)


def test_digits_shapes_dtypes_and_split_sizes(make_cfg) -> None:
    data = build_image_data(make_cfg(), batch_size=64, eval_batch_size=100, seed=1)
    assert (data.num_classes, data.channels, data.image_size) == (10, 1, 8)
    assert data.class_names == [str(digit) for digit in range(10)]
    assert (data.num_train, data.num_val) == (1438, 359)
    images, labels, _bits = next(iter(data.train_loader))
    assert images.shape == (64, 1, 8, 8) and images.dtype == torch.uint8
    assert labels.shape == (64,) and labels.dtype == torch.int64
    val_images, val_labels = _all_batches(data.val_loader)
    assert val_images.shape == (359, 1, 8, 8)  # last partial batch kept
    assert int(val_images.max()) == 255 and int(val_images.min()) == 0
    assert set(val_labels.tolist()) == set(range(10))
    assert isinstance(data.augment, BatchAugment)
    assert data.augment.horizontal_flip is False and data.augment.crop_padding_px == 1


def test_digits_split_is_fixed_and_independent_of_seed(make_cfg) -> None:
    first = build_image_data(make_cfg(), batch_size=32, eval_batch_size=64, seed=1)
    second = build_image_data(make_cfg(), batch_size=32, eval_batch_size=64, seed=999)
    images_a, labels_a = _all_batches(first.val_loader)
    images_b, labels_b = _all_batches(second.val_loader)
    assert torch.equal(images_a, images_b) and torch.equal(labels_a, labels_b)
    train_a = first.train_loader.dataset.images
    val_a = first.val_loader.dataset.images
    # No validation image is also a training image (same pixels can repeat, so compare counts).
    assert train_a.shape[0] + val_a.shape[0] == 1797
    # The train order does depend on the seed.
    batch_a = next(iter(first.train_loader))[1]
    batch_b = next(iter(second.train_loader))[1]
    assert not torch.equal(batch_a, batch_b)


def test_bad_val_fraction_and_unknown_dataset_are_user_errors(make_cfg) -> None:
    with pytest.raises(UserError, match=r"data\.val_fraction is 1\.5"):
        build_image_data(make_cfg(val_fraction=1.5), batch_size=8, eval_batch_size=8, seed=0)
    with pytest.raises(UserError, match=r"data\.dataset is 'mnist'"):
        build_image_data(make_cfg(dataset="mnist"), batch_size=8, eval_batch_size=8, seed=0)
    with pytest.raises(UserError, match="normalize_mean"):
        cfg = make_cfg(normalize_mean=[0.5, 0.5, 0.5], normalize_std=[0.5])
        build_image_data(cfg, batch_size=8, eval_batch_size=8, seed=0)


def test_digits_read_from_the_shipped_file_equal_load_digits() -> None:
    import numpy as np
    from sklearn.datasets import load_digits

    from trainforge.data.digits import digits_file, read_digits

    assert digits_file() is not None  # else the fallback would hide a slower start-up
    pixels, labels = read_digits()
    bunch = load_digits()
    assert np.array_equal(pixels, bunch.images) and np.array_equal(labels, bunch.target)
    assert labels.dtype == np.int64


def test_loading_the_digits_does_not_import_scikit_learn() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from trainforge.data.digits import load_digits_splits; "
        "load_digits_splits(0.2); print('sklearn' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
