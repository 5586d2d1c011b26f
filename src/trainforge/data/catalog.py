"""The dataset registry's entry type and the built-in datasets (`data.dataset` in the config).

This module owns what the rest of trainforge knows about a dataset before loading it: its
image shape (channels, side, classes where fixed), its augmentation defaults, which task
reads it, whether the web dialog offers it as an image dataset, its own options and its
loader. The config checks, the web dialog, the docs and `data.build` read these entries;
nothing else lists dataset names. Adding a dataset is one file that defines a loader
(`DataConfig -> LoadedSplits`), optionally an options model (an `Options` subclass: the
keys `data.options` takes, read back with `cfg.option(name)` or `cfg.options.NAME`), and
calls `DATASETS.register(name, DatasetEntry(...))`. The built-ins' options classes stand
in their own modules, one per dataset (`trainforge.data.options`).

Loaders of the built-ins are named as "module:function" strings and imported on use: this
module imports no torch, so `trainforge validate` stays light. Library considered: the
registry itself is `trainforge.registry` (see there for catalogue / entry points).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainforge.data.options.cifar10 import CifarOptions
from trainforge.data.options.digits import DigitsOptions
from trainforge.data.options.image_folder import DEFAULT_IMAGE_SIZE, ImageFolderOptions
from trainforge.data.options.text import TextOptions
from trainforge.options import Options
from trainforge.registry import DATASETS, load_object

if TYPE_CHECKING:
    from trainforge.config.schema import DataConfig
    from trainforge.data.memory import LoadedSplits

CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class AugmentDefaults:
    """Per-dataset augmentation defaults, used where the config leaves a field as None."""

    crop_padding_px: int
    horizontal_flip: bool
    mean: tuple[float, ...]
    std: tuple[float, ...]


@dataclass(frozen=True)
class DatasetEntry:
    """What trainforge knows about one dataset before loading it."""

    description: str  # one line for the docs and `data.dataset`'s description
    # Loader: DataConfig -> LoadedSplits, or "module:function" imported on use; None for
    # datasets a task reads itself (text records: the causal-LM task).
    load: str | Callable[[DataConfig], LoadedSplits] | None
    task: str = "image-classification"  # the task.kind that trains on it
    image: bool = True  # an image dataset: offered by the web dialog's dataset choice
    channels: int | None = None  # image channels (None: not an image dataset)
    image_size: int | None = None  # fixed square side in pixels (None: the image_size option)
    num_classes: int | None = None  # fixed class count (None: read from the files)
    augment: AugmentDefaults | None = None  # None: no augmentation defaults (not images)
    options: type[Options] | None = None  # what `data.options` takes (None: nothing)

    def load_splits(self, cfg: DataConfig) -> LoadedSplits:
        assert self.load is not None, "load_splits on a dataset without a loader"
        return load_object(self.load)(cfg)

    def side(self, configured: int | None = None) -> int:
        """The square side of the images the model sees, given the `image_size` option."""
        return self.image_size or configured or DEFAULT_IMAGE_SIZE


def image_dataset_names() -> list[str]:
    """The datasets the web dialog offers for image classification, in registration order
    (digits first: it trains offline in seconds)."""
    return [name for name, entry in DATASETS.items() if entry.image]


DATASETS.register(
    "digits",
    DatasetEntry(
        "scikit-learn's bundled 8x8 handwritten digits, 10 classes, fully offline",
        "trainforge.data.digits:splits_from_config",
        channels=1,
        image_size=8,
        num_classes=10,
        # Mean/std of all 1797 images scaled to 0..1, computed once, so normalisation does not
        # depend on the split; no flips: a mirrored 2 is not a 2.
        augment=AugmentDefaults(
            crop_padding_px=1, horizontal_flip=False, mean=(0.3053,), std=(0.3759,)
        ),
        options=DigitsOptions,
    ),
)
DATASETS.register(
    "cifar10",
    DatasetEntry(
        "torchvision's CIFAR-10: 32x32 RGB, 10 classes, downloaded into data.root if allowed",
        "trainforge.data.cifar:splits_from_config",
        # The ViT guide's augmentation: RandomCrop(32, padding=4), flips, CIFAR-10 statistics.
        augment=AugmentDefaults(4, True, CIFAR10_MEAN, CIFAR10_STD),
        channels=3,
        image_size=32,
        num_classes=10,
        options=CifarOptions,
    ),
)
DATASETS.register(
    "image-folder",
    DatasetEntry(
        "class-per-subfolder images under data.root (train/ and val/, or one folder split "
        "by val_fraction), resized to image_size",
        "trainforge.data.image_folder:splits_from_config",
        channels=3,
        # ImageNet statistics: the usual choice for photos of unknown origin.
        augment=AugmentDefaults(4, True, IMAGENET_MEAN, IMAGENET_STD),
        options=ImageFolderOptions,
    ),
)
DATASETS.register(
    "text",
    DatasetEntry(
        "JSON/JSONL prompt/response or chat messages, TSV source<TAB>target or CSV "
        "prompt,response, read by the causal-lm task from data.options.train_file",
        None,
        task="causal-lm",
        image=False,
        options=TextOptions,
    ),
)
