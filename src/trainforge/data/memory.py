"""In-memory uint8 image datasets, the fixed train/val split, and what a dataset loader returns.

Owns `TensorImageDataset` (whole dataset as one uint8 tensor, fetched a batch at a time),
`passthrough_collate`, `fixed_split_indices` (the seed-independent validation split) and
`LoadedSplits`, the common result of the digits / cifar10 / image-folder loaders.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from trainforge.errors import UserError

# The validation split must not move when the run seed changes, or "val accuracy" across runs
# would be measured on different images.
SPLIT_SEED = 0


@dataclass
class LoadedSplits:
    """Train and validation datasets plus what the model and augmentation need to know."""

    train: Dataset
    val: Dataset
    class_names: list[str]
    channels: int
    image_size: int
    # In-memory datasets hand back whole batches from __getitems__ and need passthrough_collate.
    batched_fetch: bool


class TensorImageDataset(Dataset):
    """A dataset held as uint8 images [N,C,H,W] and int64 labels [N].

    `__getitems__` returns one (images, labels) pair per batch with a single tensor index, so the
    loader does one gather per batch instead of one Python call per sample.
    """

    def __init__(self, images: Tensor, labels: Tensor) -> None:
        assert images.dtype == torch.uint8 and images.dim() == 4, "images must be uint8 [N,C,H,W]"
        assert labels.shape == (images.shape[0],), "labels must be [N]"
        self.images = images.contiguous()
        self.labels = labels.to(torch.int64)

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        return self.images[index], self.labels[index]

    def __getitems__(self, indices: list[int]) -> tuple[Tensor, Tensor]:
        index = torch.as_tensor(indices, dtype=torch.int64, device=self.images.device)
        # index_select copies whole images (a memcpy each on the CPU); advanced indexing
        # computes every byte's offset and is ~20x slower for a CIFAR batch.
        return self.images.index_select(0, index), self.labels.index_select(0, index)

    @property
    def nbytes(self) -> int:
        return self.images.nbytes + self.labels.nbytes

    def to(self, device: torch.device) -> TensorImageDataset:
        """Hold the whole data set on `device` (batches are then gathered there)."""
        self.images = self.images.to(device)
        self.labels = self.labels.to(device)
        return self


def passthrough_collate(batch: Any) -> Any:
    """Collate for datasets whose `__getitems__` already returns a batched (images, labels)."""
    return batch


def check_val_fraction(val_fraction: float) -> float:
    """Reject fractions that would leave either split empty."""
    if not 0.0 < float(val_fraction) < 1.0:
        raise UserError(
            f"data.val_fraction is {val_fraction!r}, it must be between 0 and 1 (exclusive)",
            "set data.val_fraction to e.g. 0.2",
        )
    return float(val_fraction)


def fixed_split_indices(num_items: int, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Split 0..num_items-1 into (train, val) with a permutation that ignores the run seed.

    The last `val_fraction` share of the permutation is validation; both sides get at least one
    item. Indices inside each side are sorted so the order follows the source order.
    """
    check_val_fraction(val_fraction)
    if num_items < 2:
        raise UserError(
            f"only {num_items} sample(s) found, need at least 2 to split off a validation set",
            "add more images or provide a separate val/ folder",
        )
    permutation = np.random.default_rng(SPLIT_SEED).permutation(num_items)
    num_val = min(max(1, round(num_items * val_fraction)), num_items - 1)
    num_train = num_items - num_val
    return np.sort(permutation[:num_train]), np.sort(permutation[num_train:])
