"""The `image-folder` dataset: class-per-folder images on disk, decoded per sample.

Owns the two layouts (root/train + root/val, or class folders directly under root with a fixed
validation split), discovery through torchvision's ImageFolder, decoding + square resize with PIL
inside `__getitem__` (this is the dataset where loader workers pay off), and the `UserError`s for
a missing root, no class folders, no images and unreadable image files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor
from torch.utils.data import Dataset

from trainforge.data.memory import AugmentDefaults, LoadedSplits, fixed_split_indices
from trainforge.errors import UserError

DEFAULT_IMAGE_SIZE = 32
IMAGENET_DEFAULTS = AugmentDefaults(
    crop_padding_px=4,
    horizontal_flip=True,
    mean=(0.485, 0.456, 0.406),
    std=(0.229, 0.224, 0.225),
)


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


def load_image_folder_splits(
    root: str, image_size: int | None, val_fraction: float
) -> LoadedSplits:
    """Find the images under `root` and build train/val datasets that decode on access."""
    size = DEFAULT_IMAGE_SIZE if image_size is None else int(image_size)
    if size < 1:
        raise UserError(
            f"data.image_size is {image_size!r}, it must be a positive number of pixels"
        )
    root_path = Path(root).expanduser()
    if not root_path.is_dir():
        raise UserError(
            f"data.root {root_path} does not exist or is not a folder",
            "point data.root at a folder of class folders (or with train/ and val/ inside)",
        )
    train_dir, val_dir = root_path / "train", root_path / "val"
    if train_dir.is_dir():
        train_samples, class_names = _scan(train_dir, class_names=None)
        if val_dir.is_dir():
            val_samples, _ = _scan(val_dir, class_names=class_names)
        else:
            train_samples, val_samples = _split(train_samples, val_fraction)
    else:
        all_samples, class_names = _scan(root_path, class_names=None)
        train_samples, val_samples = _split(all_samples, val_fraction)
    return LoadedSplits(
        train=ImageFileDataset(train_samples, size),
        val=ImageFileDataset(val_samples, size),
        class_names=class_names,
        channels=3,
        image_size=size,
        defaults=IMAGENET_DEFAULTS,
        batched_fetch=False,
    )


def _split(
    samples: list[tuple[str, int]], val_fraction: float
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    train_index, val_index = fixed_split_indices(len(samples), val_fraction)
    return [samples[i] for i in train_index], [samples[i] for i in val_index]


def _scan(folder: Path, class_names: list[str] | None) -> tuple[list[tuple[str, int]], list[str]]:
    """List (path, label) with torchvision's ImageFolder (sorted classes, image suffixes only).

    With `class_names` given (the val/ folder), labels follow the train classes so the same index
    means the same class; a val class the train side does not have is an error.
    """
    from torchvision.datasets import ImageFolder
    from torchvision.datasets.folder import IMG_EXTENSIONS

    try:
        found = ImageFolder(str(folder), allow_empty=True)
    except FileNotFoundError as err:
        raise UserError(
            f"no class folders in {folder}",
            "put one folder per class in it, each holding that class's images",
        ) from err
    if class_names is None:
        class_names = list(found.classes)
    unknown = sorted(set(found.classes) - set(class_names))
    if unknown:
        raise UserError(
            f"{folder} has class folder(s) {unknown} that the train folder does not have",
            "use the same class folder names in train/ and val/",
        )
    class_to_idx = {name: index for index, name in enumerate(class_names)}
    samples = [(path, class_to_idx[found.classes[label]]) for path, label in found.samples]
    if not samples:
        raise UserError(
            f"no images found in the class folders of {folder}",
            f"add image files ({', '.join(IMG_EXTENSIONS)}) inside each class folder",
        )
    return samples, class_names
