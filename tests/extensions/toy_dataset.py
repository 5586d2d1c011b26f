"""A toy dataset added through the dataset registry alone: 4x4 grey stripes, two classes.

Class 0 is horizontal stripes, class 1 vertical ones, with a little seeded noise: a tiny ViT
learns it in a few steps. Its own options (`data.options`): how many training images and how
much noise. Importing this file registers `toy-stripes`; nothing else in trainforge names it.
"""

from __future__ import annotations

import torch
from pydantic import Field

from trainforge.data.catalog import AugmentDefaults, DatasetEntry
from trainforge.data.memory import LoadedSplits, TensorImageDataset
from trainforge.options import Options
from trainforge.registry import DATASETS

NAME = "toy-stripes"
SIDE = 4
LOADED: list[tuple[int, int]] = []  # (training, validation) images of every load


class StripesOptions(Options):
    count: int = Field(64, ge=4, description="Training images (validation: a quarter).")
    noise: int = Field(40, ge=1, le=100, description="Noise amplitude, of 255.")


def _images(n: int, seed: int, noise_max: int) -> TensorImageDataset:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 2
    rows = (torch.arange(SIDE) % 2).float().view(SIDE, 1).expand(SIDE, SIDE)
    stripes = torch.stack([rows, rows.T])[labels] * 200  # [n, 4, 4]
    noise = torch.randint(0, noise_max, (n, SIDE, SIDE), generator=generator).float()
    images = (stripes + noise).clamp(0, 255).to(torch.uint8).unsqueeze(1)
    return TensorImageDataset(images, labels)


def load_stripes(cfg) -> LoadedSplits:
    o: StripesOptions = cfg.options
    train, val = _images(o.count, 0, o.noise), _images(o.count // 4, 1, o.noise)
    LOADED.append((len(train), len(val)))
    return LoadedSplits(
        train=train,
        val=val,
        class_names=["horizontal", "vertical"],
        channels=1,
        image_size=SIDE,
        batched_fetch=True,
    )


DATASETS.register(
    NAME,
    DatasetEntry(
        "4x4 grey stripes, horizontal or vertical (a test's toy)",
        load_stripes,
        channels=1,
        image_size=SIDE,
        num_classes=2,
        augment=AugmentDefaults(0, False, (0.5,), (0.5,)),
        options=StripesOptions,
    ),
)
