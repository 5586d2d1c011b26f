"""Datasets (one module each, registered in `data.catalog`), batched on-device augmentation
and resumable loaders for trainforge.

`build_image_data(cfg.data, ...)` is the entry point; `BatchAugment` turns loader batches into
normalized float tensors on the training device. Names are imported on first use, so reading
the dataset registry (`trainforge.data.catalog`, config validation) imports no torch.
"""

from __future__ import annotations

from trainforge.registry import lazy_attributes

_MODULES = {
    "trainforge.data.augment": ("BatchAugment", "crop_flip"),
    "trainforge.data.build": ("ImageData", "build_image_data"),
}
__all__ = sorted(name for names in _MODULES.values() for name in names)
__getattr__ = lazy_attributes(__name__, _MODULES)
