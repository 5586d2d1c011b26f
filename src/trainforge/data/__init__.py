"""Datasets (one module each, registered in `data.catalog`), batched on-device augmentation
and resumable loaders for trainforge.

`build_image_data(cfg.data, ...)` is the entry point; `BatchAugment` turns loader batches into
normalized float tensors on the training device. Names are imported on first use, so reading
the dataset registry (`trainforge.data.catalog`, config validation) imports no torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_NAMES = {
    "BatchAugment": "trainforge.data.augment",
    "crop_flip": "trainforge.data.augment",
    "ImageData": "trainforge.data.build",
    "build_image_data": "trainforge.data.build",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_NAMES[name]), name)
    globals()[name] = value
    return value
