"""One validation pass over the user's data, before anything is written.

Owns the rules for what a run accepts as input, and the one-line `UserError` for each thing it
refuses (the file, and the line or record where there is one):

- image folders (`validate_image_folder`): class folders are the non-hidden folders of the
  root (or of root/train and root/val); hidden files and folders (names starting with `.`)
  are ignored, and so are files whose suffix is not an image suffix (torchvision's list) and
  files lying outside a class folder. Fewer than two classes, a class folder with no image,
  or an image that does not decode is refused. Every image is decoded once here (a seeded
  sample of `SAMPLE_LIMIT` when there are more, and the line says so); unreadable images are
  refused naming the first and the count, or left out with `data.skip_bad_images=true`, which
  reports the count. Images of any mode (grayscale, palette, RGBA, CMYK) are converted to RGB
  and every size is resized to the square `data.image_size`: both are stated, not refused.
- text files (`validate_text_data`): every split read by `trainforge.data.text.records`,
  which checks the file (a file, not a folder, non-empty, UTF-8 with the line of the first
  bad byte named, one of the text formats) and names the line or record of a malformed
  line, a missing field or a wrong column count.
- CIFAR-10: a partial or corrupt archive or batch file is refused by `trainforge.data.cifar`
  while it loads, which also happens before the run folder exists.

torchvision's `ImageFolder` was considered for the image scan (the loader used it before): it
takes hidden folders such as `.ipynb_checkpoints` for classes and hidden `._name.jpg` files
for images, and reports nothing about empty classes, so the scan is a few lines here.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainforge.errors import UserError

# Images decoded to check a folder; a larger folder is checked on a seeded sample this big.
SAMPLE_LIMIT = 2000
SKIP_FIX = "delete or replace them, or set data.skip_bad_images=true to train without them"


@dataclass
class ImageFolderScan:
    """Samples that passed the checks, as (path, label) pairs with labels in class order."""

    train: list[tuple[str, int]]
    val: list[tuple[str, int]] | None  # None: no val/ folder, split train by val_fraction
    class_names: list[str]
    notes: list[str] = field(default_factory=list)  # one printed line each


def _visible(entries: list[os.DirEntry]) -> list[os.DirEntry]:
    return [e for e in entries if not e.name.startswith(".")]


def image_suffixes() -> tuple[str, ...]:
    from torchvision.datasets.folder import IMG_EXTENSIONS

    return tuple(IMG_EXTENSIONS)


def _class_folders(folder: Path) -> list[str]:
    with os.scandir(folder) as found:
        return sorted(e.name for e in _visible(list(found)) if e.is_dir())


def _class_images(folder: Path, suffixes: tuple[str, ...]) -> tuple[list[str], int]:
    """(image paths under `folder`, recursively, sorted; count of ignored non-image files)."""
    images, ignored = [], 0
    for current, dirs, files in os.walk(folder, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            if name.lower().endswith(suffixes):
                images.append(os.path.join(current, name))
            else:
                ignored += 1
    return images, ignored


def _scan_split(
    folder: Path, class_names: list[str] | None
) -> tuple[list[tuple[str, int]], list[str], int]:
    """(samples, class names, ignored files) of one split folder, checked for class rules."""
    found = _class_folders(folder)
    if class_names is None:
        if len(found) < 2:
            raise UserError(
                f"{folder} has {len(found)} class folder(s) {found}: a classifier needs at "
                "least two",
                "put one folder per class in it, each holding that class's images",
            )
        class_names = found
    unknown = sorted(set(found) - set(class_names))
    if unknown:
        raise UserError(
            f"{folder} has class folder(s) {unknown} that the train folder does not have",
            "use the same class folder names in train/ and val/",
        )
    suffixes = image_suffixes()
    samples: list[tuple[str, int]] = []
    ignored = 0
    for name in found:
        images, skipped = _class_images(folder / name, suffixes)
        ignored += skipped
        if not images:
            raise UserError(
                f"class folder {folder / name} has no images",
                f"add image files ({', '.join(suffixes)}) or remove the folder",
            )
        samples += [(path, class_names.index(name)) for path in images]
    return samples, class_names, ignored


def _decode_problem(path: str, size: int) -> tuple[str | None, str, tuple[int, int]]:
    """(None or why it does not decode, mode, size) of one image, decoded as training will."""
    from PIL import Image, UnidentifiedImageError

    errors = (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError)
    try:
        with Image.open(path) as image:
            mode, dims = image.mode, image.size
            if image.format == "JPEG":
                image.draft("RGB", (size, size))  # decode JPEGs at reduced scale: faster
            image.convert("RGB")
    except (*errors, SyntaxError) as err:
        return " ".join(str(err).split()) or type(err).__name__, "", (0, 0)
    return None, mode, dims


@dataclass
class _DecodeTally:
    checked: int = 0
    bad: list[tuple[str, str]] = field(default_factory=list)
    modes: set[str] = field(default_factory=set)
    sizes: set[tuple[int, int]] = field(default_factory=set)


def _decode_all(paths: list[str], size: int, limit: int) -> _DecodeTally:
    chosen = paths
    if len(paths) > limit:
        chosen = sorted(random.Random(0).sample(paths, limit))
    tally = _DecodeTally(checked=len(chosen))
    for path in chosen:
        problem, mode, dims = _decode_problem(path, size)
        if problem is not None:
            tally.bad.append((path, problem))
        else:
            tally.modes.add(mode)
            tally.sizes.add(dims)
    return tally


def _decode_notes(tally: _DecodeTally, total: int, size: int) -> list[str]:
    notes = []
    if tally.checked < total:
        notes.append(
            f"data: decoded a seeded sample of {tally.checked} of {total} images to check them "
            "(an unreadable image outside it stops the run when it is reached)"
        )
    other_modes = sorted(tally.modes - {"RGB"})
    if other_modes:
        notes.append(f"data: images in mode(s) {', '.join(other_modes)} converted to RGB")
    if tally.sizes - {(size, size)}:
        widths = sorted(tally.sizes, key=lambda wh: wh[0] * wh[1])
        low, high = widths[0], widths[-1]
        notes.append(
            f"data: images of {len(tally.sizes)} size(s), {low[0]}x{low[1]} to "
            f"{high[0]}x{high[1]}, resized to {size}x{size}"
        )
    return notes


def validate_image_folder(
    root: str | Path, image_size: int, *, skip_bad: bool = False, sample_limit: int = SAMPLE_LIMIT
) -> ImageFolderScan:
    """Check an image-folder data set (both layouts) and return its usable samples."""
    root_path = Path(root).expanduser()
    if not root_path.is_dir():
        what = "is a file, not a folder" if root_path.exists() else "does not exist"
        raise UserError(
            f"data.root {root_path} {what}",
            "point data.root at a folder of class folders (or with train/ and val/ inside)",
        )
    train_dir, val_dir = root_path / "train", root_path / "val"
    layout = train_dir.is_dir()
    train, names, ignored = _scan_split(train_dir if layout else root_path, None)
    val = None
    if layout and val_dir.is_dir():
        val, _, more = _scan_split(val_dir, names)
        ignored += more
    everything = train + (val or [])
    tally = _decode_all([path for path, _ in everything], image_size, sample_limit)
    notes = []
    if ignored:
        notes.append(f"data: ignored {ignored} non-image file(s) in the class folders")
    if tally.bad:
        first, why = tally.bad[0]
        count = f"{len(tally.bad)} of {tally.checked} checked images"
        if not skip_bad:
            raise UserError(
                f"image file {first} could not be read ({why}); {count} are unreadable", SKIP_FIX
            )
        bad = {path for path, _ in tally.bad}
        train = [s for s in train if s[0] not in bad]
        val = None if val is None else [s for s in val if s[0] not in bad]
        notes.append(f"data: skipped {count} as unreadable (data.skip_bad_images), first {first}")
        if not train:
            raise UserError(f"every image in {root_path} is unreadable (first {first})", SKIP_FIX)
    notes += _decode_notes(tally, len(everything), image_size)
    return ImageFolderScan(train=train, val=val, class_names=names, notes=notes)


# ------------------------------------------------------------------------------- text
def validate_text_data(cfg: Any) -> dict[str, list]:
    """Every text file of the data section read and checked: {"train", "val"[, "test"]}."""
    from trainforge.data.memory import fixed_split_indices
    from trainforge.data.text.records import read_records

    opts = cfg.options  # the text dataset's options (`data.options`)
    header = opts.header
    train = read_records(opts.train_file, "data.options.train_file", header)
    if opts.validation_file:
        val = read_records(opts.validation_file, "data.options.validation_file", header)
    else:
        train_idx, val_idx = fixed_split_indices(len(train), opts.val_fraction)
        train, val = [train[i] for i in train_idx], [train[i] for i in val_idx]
    splits = {"train": train, "val": val}
    if opts.test_file:
        splits["test"] = read_records(opts.test_file, "data.options.test_file", header)
    return splits
