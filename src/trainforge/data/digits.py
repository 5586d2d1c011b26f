"""The `digits` dataset: scikit-learn's bundled 8x8 handwritten digits, fully offline.

Owns turning `load_digits()` (1797 images, values 0..16) into uint8 tensors and the fixed,
seed-independent train/validation split (the validation part doubles as the demo's test set).
"""

from __future__ import annotations

import numpy as np
import torch

from trainforge.data.memory import (
    AugmentDefaults,
    LoadedSplits,
    TensorImageDataset,
    fixed_split_indices,
)

DIGITS_IMAGE_SIZE = 8
DIGITS_MAX_VALUE = 16
# Mean/std of all 1797 images after scaling to 0..1, computed once; constants so the normalization
# does not depend on which split is loaded.
DIGITS_DEFAULTS = AugmentDefaults(
    crop_padding_px=1,
    horizontal_flip=False,  # digits are not mirror-symmetric: a flipped 2 is not a 2
    mean=(0.3053,),
    std=(0.3759,),
)


def load_digits_splits(val_fraction: float) -> LoadedSplits:
    """Load the digits as uint8 [N,1,8,8] and split off the last `val_fraction` share."""
    from sklearn.datasets import load_digits  # optional "vision" dependency, imported on use

    bunch = load_digits()
    scaled = np.rint(bunch.images * (255.0 / DIGITS_MAX_VALUE)).astype(np.uint8)
    images = torch.from_numpy(scaled).unsqueeze(1)  # [N,1,8,8]
    labels = torch.from_numpy(bunch.target.astype(np.int64))
    train_index, val_index = fixed_split_indices(len(labels), val_fraction)
    train_rows = torch.from_numpy(train_index)
    val_rows = torch.from_numpy(val_index)
    return LoadedSplits(
        train=TensorImageDataset(images[train_rows], labels[train_rows]),
        val=TensorImageDataset(images[val_rows], labels[val_rows]),
        class_names=[str(name) for name in bunch.target_names],
        channels=1,
        image_size=DIGITS_IMAGE_SIZE,
        defaults=DIGITS_DEFAULTS,
        batched_fetch=True,
    )
