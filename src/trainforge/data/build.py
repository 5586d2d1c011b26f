"""Entry point of `trainforge.data`: config `data` section -> loaders + augmentation + metadata.

Owns `ImageData`, `build_image_data`, picking the dataset by name and resolving the
augmentation fields the config leaves as None to each dataset's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchdata.stateful_dataloader import StatefulDataLoader

from trainforge.data.augment import BatchAugment
from trainforge.data.loaders import make_loader
from trainforge.data.memory import LoadedSplits
from trainforge.errors import UserError

DATASET_NAMES = ("cifar10", "digits", "image-folder")


@dataclass
class ImageData:
    """Everything the trainer needs from the data section."""

    train_loader: StatefulDataLoader  # (images uint8 [B,C,H,W], labels int64 [B]), shuffled, seeded
    val_loader: StatefulDataLoader  # same, in order, never drops the last batch
    num_classes: int
    channels: int
    image_size: int
    class_names: list[str]
    augment: BatchAugment
    num_train: int
    num_val: int


def build_image_data(cfg: Any, *, batch_size: int, eval_batch_size: int, seed: int) -> ImageData:
    """Load the dataset named by `cfg.dataset` and wrap it in resumable loaders.

    In-memory datasets (cifar10, digits) honour `cfg.dataloader_num_workers`, but 0 is fastest
    for them: a batch is one tensor gather, cheaper than shipping it from a worker process.
    """
    splits = _load_splits(cfg)
    common = {"cfg": cfg, "seed": seed, "batched_fetch": splits.batched_fetch}
    train_loader = make_loader(splits.train, batch_size=batch_size, train=True, **common)
    val_loader = make_loader(splits.val, batch_size=eval_batch_size, train=False, **common)
    return ImageData(
        train_loader=train_loader,
        val_loader=val_loader,
        num_classes=len(splits.class_names),
        channels=splits.channels,
        image_size=splits.image_size,
        class_names=list(splits.class_names),
        augment=build_augment(cfg, splits),
        num_train=len(splits.train),
        num_val=len(splits.val),
    )


def _load_splits(cfg: Any) -> LoadedSplits:
    name = cfg.dataset
    if name == "digits":
        from trainforge.data.digits import load_digits_splits

        return load_digits_splits(cfg.val_fraction)
    if name == "cifar10":
        from trainforge.data.cifar import load_cifar10_splits

        return load_cifar10_splits(cfg.root, bool(cfg.download))
    if name == "image-folder":
        from trainforge.data.image_folder import load_image_folder_splits

        return load_image_folder_splits(cfg.root, cfg.image_size, cfg.val_fraction)
    raise UserError(
        f"data.dataset is {name!r}, which is not a known dataset",
        f"use one of: {', '.join(DATASET_NAMES)}",
    )


def build_augment(cfg: Any, splits: LoadedSplits) -> BatchAugment:
    """BatchAugment from the config, falling back to the dataset's defaults field by field."""
    defaults = splits.defaults
    padding_px = defaults.crop_padding_px
    if cfg.random_crop_padding is not None:
        padding_px = int(cfg.random_crop_padding)
    if padding_px < 0:
        raise UserError(
            f"data.random_crop_padding is {padding_px}, it must be 0 or more",
            "set it to 0 to turn random cropping off",
        )
    flip = defaults.horizontal_flip if cfg.horizontal_flip is None else bool(cfg.horizontal_flip)
    mean = _per_channel("normalize_mean", cfg.normalize_mean, defaults.mean, splits.channels)
    std = _per_channel("normalize_std", cfg.normalize_std, defaults.std, splits.channels)
    if any(value <= 0 for value in std):
        raise UserError(f"data.normalize_std is {list(std)}, every value must be positive")
    return BatchAugment(mean, std, crop_padding_px=padding_px, horizontal_flip=flip)


def _per_channel(
    field: str, values: list[float] | None, default: tuple[float, ...], channels: int
) -> tuple[float, ...]:
    if values is None:
        return default
    if len(values) != channels:
        raise UserError(
            f"data.{field} has {len(values)} value(s) {list(values)}, the {channels}-channel "
            f"dataset needs {channels}",
            f"give {channels} value(s) or leave data.{field} unset for the dataset default",
        )
    return tuple(float(value) for value in values)
