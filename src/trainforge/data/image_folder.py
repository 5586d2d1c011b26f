"""The `image-folder` dataset: class-per-folder images on disk, decoded per sample.

Owns the two layouts (root/train + root/val, or class folders directly under root with a fixed
validation split) and decoding + square resize with PIL inside `__getitem__` (this is the
dataset where loader workers pay off). Which files count, and the one-line errors for a bad
folder or image, are `trainforge.data.validate`'s, run before any loader exists; an unreadable
image that validation's sample did not reach still stops the run in one line naming it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor
from torch.utils.data import Dataset

from trainforge.data.memory import LoadedSplits, fixed_split_indices
from trainforge.data.options.image_folder import DEFAULT_IMAGE_SIZE
from trainforge.errors import UserError

if TYPE_CHECKING:
    from trainforge.config.schema import DataConfig


class UnreadableImageError(UserError):
    """An image file PIL cannot decode.

    A worker process re-raises dataset errors in the main process as `type(err)(traceback_text)`,
    which would make the CLI's one line a whole traceback; this class keeps only the original
    message (the traceback's last line) so the user still sees one line naming the file.
    """

    def __init__(self, message: str, fix: str | None = None) -> None:
        if "\n" in message:
            last_line = message.strip().splitlines()[-1]
            prefix = f"{type(self).__module__}.{type(self).__name__}: "
            message = last_line.removeprefix(prefix)
        super().__init__(message, fix)


class ImageFileDataset(Dataset):
    """(path, label) samples decoded to uint8 RGB [3,size,size] tensors on access."""

    def __init__(self, samples: list[tuple[str, int]], image_size: int) -> None:
        self.samples = samples
        self.image_size = image_size

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        path, label = self.samples[index]
        try:
            with Image.open(path) as image:
                rgb = image.convert("RGB").resize(
                    (self.image_size, self.image_size), Image.Resampling.BILINEAR
                )
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
            raise UnreadableImageError(
                f"image file {path} could not be read ({' '.join(str(err).split())})",
                "delete or replace that file",
            ) from err
        pixels = torch.from_numpy(np.asarray(rgb, dtype=np.uint8).copy())  # [H,W,3]
        return pixels.permute(2, 0, 1).contiguous(), label


def splits_from_config(cfg: DataConfig) -> LoadedSplits:
    """The `image-folder` entry's loader (see `trainforge.data.catalog`)."""
    o = cfg.options
    return load_image_folder_splits(cfg.root, o.image_size, o.val_fraction, o.skip_bad_images)


def load_image_folder_splits(
    root: str, image_size: int | None, val_fraction: float, skip_bad_images: bool = False
) -> LoadedSplits:
    """Check the images under `root` (`trainforge.data.validate`) and build train/val datasets
    that decode on access."""
    from trainforge.data.validate import validate_image_folder

    size = DEFAULT_IMAGE_SIZE if image_size is None else int(image_size)
    if size < 1:
        raise UserError(
            f"data.image_size is {image_size!r}, it must be a positive number of pixels"
        )
    scan = validate_image_folder(root, size, skip_bad=skip_bad_images)
    for note in scan.notes:
        print(note)
    if scan.val is None:
        train_index, val_index = fixed_split_indices(len(scan.train), val_fraction)
        train_samples = [scan.train[i] for i in train_index]
        val_samples = [scan.train[i] for i in val_index]
    else:
        train_samples, val_samples = scan.train, scan.val
    return LoadedSplits(
        train=ImageFileDataset(train_samples, size),
        val=ImageFileDataset(val_samples, size),
        class_names=scan.class_names,
        channels=3,
        image_size=size,
        batched_fetch=False,
    )
