"""Entry point of `trainforge.data`: config `data` section -> loaders + augmentation + metadata.

Owns `ImageData`, `build_image_data`, loading the dataset `data.dataset` names through its
`trainforge.registry.DATASETS` entry (see `data.catalog`) and resolving the augmentation
fields the config leaves as None to that entry's defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torchdata.stateful_dataloader import StatefulDataLoader

from trainforge.data.augment import BatchAugment
from trainforge.data.catalog import AugmentDefaults, DatasetEntry, image_dataset_names
from trainforge.data.loaders import make_loader
from trainforge.data.memory import LoadedSplits, TensorImageDataset
from trainforge.errors import UserError
from trainforge.registry import DATASETS


@dataclass
class ImageData:
    """Everything the trainer needs from the data section."""

    # (images uint8 [B,C,H,W], labels int64 [B], random bits int64 [B]), shuffled, seeded
    train_loader: StatefulDataLoader
    val_loader: StatefulDataLoader  # same, in order, never drops the last batch
    num_classes: int
    channels: int
    image_size: int
    class_names: list[str]
    augment: BatchAugment
    num_train: int
    num_val: int


def build_image_data(
    cfg: Any,
    *,
    batch_size: int,
    eval_batch_size: int,
    seed: int,
    device: Any = None,
    accumulation: int = 1,
    step_batch: int | None = None,
) -> ImageData:
    """Load the dataset named by `cfg.dataset` and wrap it in resumable loaders.

    In-memory datasets (cifar10, digits) honour `cfg.dataloader_num_workers`, but 0 is fastest
    for them: a batch is one tensor gather, cheaper than shipping it from a worker process.
    On an accelerator they are held there whole, as uint8, when they fit (`hold_on_device`).
    """
    entry = dataset_entry(cfg)
    splits = entry.load_splits(cfg)
    on_device = device is not None and hold_on_device(splits, device)
    common = {
        "cfg": cfg,
        "seed": seed,
        "batched_fetch": splits.batched_fetch,
        "on_device": on_device,
    }
    # Train samples carry their own random bits: augmentation keyed by (seed, epoch, sample).
    train_loader = make_loader(
        splits.train, batch_size=batch_size, train=True, accumulation=accumulation, keyed=True,
        step_batch=step_batch, **common,
    )  # fmt: skip
    val_loader = make_loader(splits.val, batch_size=eval_batch_size, train=False, **common)
    return ImageData(
        train_loader=train_loader,
        val_loader=val_loader,
        num_classes=len(splits.class_names),
        channels=splits.channels,
        image_size=splits.image_size,
        class_names=list(splits.class_names),
        augment=build_augment(cfg, splits, entry.augment or _plain(splits.channels)),
        num_train=len(splits.train),
        num_val=len(splits.val),
    )


# An in-memory data set moves to the accelerator when it takes at most this share of the
# device's free memory; the rest stays for the model, activations and optimizer state.
DEVICE_SHARE = 0.25


def free_device_bytes(device: Any) -> int | None:
    """Free memory of a CUDA device in bytes (None where it cannot be asked)."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    free, _total = torch.cuda.mem_get_info(device)
    return int(free)


def hold_on_device(
    splits: LoadedSplits, device: Any, free_bytes: Callable[[Any], int | None] | None = None
) -> bool:
    """Move in-memory train and val sets onto `device` when they fit; True when moved."""
    if getattr(device, "type", "cpu") == "cpu":
        return False
    sets = (splits.train, splits.val)
    if not all(isinstance(part, TensorImageDataset) for part in sets):
        return False  # decoded from files per sample: stays with the loader's workers
    size = sum(part.nbytes for part in sets)
    free = (free_bytes or free_device_bytes)(device)
    if free is None or size > DEVICE_SHARE * free:
        why = "free device memory unknown" if free is None else "over 25% of free device memory"
        print(f"data: {size / 2**20:.0f} MiB stays in host memory ({why})")
        return False
    for part in sets:
        part.to(device)
    print(f"data: {size / 2**20:.0f} MiB held on {device} as uint8, batches gathered there")
    return True


def dataset_entry(cfg: Any) -> DatasetEntry:
    """The registered entry `cfg.dataset` names; an image dataset with a loader."""
    entry = DATASETS.find(cfg.dataset)
    if entry is None:
        raise UserError(
            f"data.dataset is {cfg.dataset!r}, which is not a known dataset",
            f"use one of: {', '.join(DATASETS.names())}",
        )
    if entry.load is None:
        raise UserError(
            f"data.dataset = {cfg.dataset!r} is read by task {entry.task}, not as images",
            f"set task.kind={entry.task}, or use an image dataset: "
            f"{', '.join(image_dataset_names())}",
        )
    return entry


def _plain(channels: int) -> AugmentDefaults:
    # A registered dataset without augmentation defaults: no crop, no flip, pixels in 0..1.
    return AugmentDefaults(0, False, (0.0,) * channels, (1.0,) * channels)


def build_augment(cfg: Any, splits: LoadedSplits, defaults: AugmentDefaults) -> BatchAugment:
    """BatchAugment from the config, falling back to the dataset's defaults field by field."""
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
