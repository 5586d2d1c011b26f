"""The `digits` dataset: scikit-learn's bundled 8x8 handwritten digits, fully offline.

Owns turning scikit-learn's digits (1797 images, values 0..16) into uint8 tensors and the
fixed, seed-independent train/validation split (the validation part doubles as the demo's
test set).

The numbers are the file scikit-learn ships (`sklearn/datasets/data/digits.csv.gz`, what
`load_digits()` reads: 64 pixels and the label per row), read with numpy: importing
`sklearn.datasets` imports most of scikit-learn and scipy, about 0.7 s of the main job's
start-up for one small file. When the file is not where it is expected (another scikit-learn
layout), `load_digits()` is used as before.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from trainforge.data.memory import LoadedSplits, TensorImageDataset, fixed_split_indices

if TYPE_CHECKING:
    from trainforge.config.schema import DataConfig

DIGITS_IMAGE_SIZE = 8
DIGITS_MAX_VALUE = 16


def digits_file() -> Path | None:
    """scikit-learn's digits.csv.gz, found without importing scikit-learn."""
    spec = importlib.util.find_spec("sklearn")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            return path
    return None


def read_digits() -> tuple[np.ndarray, np.ndarray]:
    """(images float [1797,8,8] with values 0..16, labels int64 [1797]), as `load_digits()`."""
    path = digits_file()
    if path is None:
        from sklearn.datasets import load_digits  # optional "vision" dependency

        bunch = load_digits()
        return bunch.images, bunch.target.astype(np.int64)
    with gzip.open(path, "rt") as text:
        data = np.loadtxt(text, delimiter=",")
    return data[:, :-1].reshape(-1, DIGITS_IMAGE_SIZE, DIGITS_IMAGE_SIZE), data[:, -1].astype(
        np.int64
    )


def splits_from_config(cfg: DataConfig) -> LoadedSplits:
    """The `digits` entry's loader (see `trainforge.data.catalog`)."""
    return load_digits_splits(cfg.option("val_fraction", 0.2))


def load_digits_splits(val_fraction: float) -> LoadedSplits:
    """Load the digits as uint8 [N,1,8,8] and split off the last `val_fraction` share."""
    pixels, targets = read_digits()
    scaled = np.rint(pixels * (255.0 / DIGITS_MAX_VALUE)).astype(np.uint8)
    images = torch.from_numpy(scaled).unsqueeze(1)  # [N,1,8,8]
    labels = torch.from_numpy(targets)
    train_index, val_index = fixed_split_indices(len(labels), val_fraction)
    train_rows = torch.from_numpy(train_index)
    val_rows = torch.from_numpy(val_index)
    return LoadedSplits(
        train=TensorImageDataset(images[train_rows], labels[train_rows]),
        val=TensorImageDataset(images[val_rows], labels[val_rows]),
        class_names=[str(name) for name in range(10)],
        channels=1,
        image_size=DIGITS_IMAGE_SIZE,
        batched_fetch=True,
    )
