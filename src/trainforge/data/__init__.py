"""Image datasets, batched on-device augmentation and resumable loaders for trainforge.

`build_image_data(cfg.data, ...)` is the entry point; `BatchAugment` turns loader batches into
normalized float tensors on the training device.
"""

from trainforge.data.augment import BatchAugment, crop_flip
from trainforge.data.build import ImageData, build_image_data

__all__ = ["BatchAugment", "ImageData", "build_image_data", "crop_flip"]
