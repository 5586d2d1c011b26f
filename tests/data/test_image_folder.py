"""image-folder: both layouts, decoding + resize, and one-line errors for bad input."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from trainforge.data import build_image_data
from trainforge.errors import UserError

CLASS_NAMES = ["cat", "dog", "owl"]


def _write_png(path: Path, value: int, size_px: int = 12) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.full((size_px, size_px + 4, 3), value, dtype=np.uint8)
    pixels[..., 1] = 255 - value  # make channels differ to catch channel-order mistakes
    Image.fromarray(pixels).save(path)


def _write_classes(folder: Path, images_per_class: int) -> None:
    for label, name in enumerate(CLASS_NAMES):
        for index in range(images_per_class):
            _write_png(folder / name / f"{index}.png", value=40 * label + index)


def _build(cfg, batch_size: int = 4):
    return build_image_data(cfg, batch_size=batch_size, eval_batch_size=batch_size, seed=0)


def test_class_folders_in_root_are_split_by_val_fraction(make_cfg, tmp_path) -> None:
    _write_classes(tmp_path, images_per_class=5)
    (tmp_path / "dog" / "notes.txt").write_text("not an image, ignored by ImageFolder")
    data = _build(make_cfg(dataset="image-folder", root=str(tmp_path), image_size=10))
    assert data.class_names == CLASS_NAMES and data.num_classes == 3
    assert (data.num_train, data.num_val, data.channels, data.image_size) == (12, 3, 3, 10)
    images, labels = next(iter(data.train_loader))
    assert images.shape == (4, 3, 10, 10) and images.dtype == torch.uint8
    assert labels.dtype == torch.int64
    # Solid-colour images survive the resize unchanged: pixel value identifies the file.
    for image, label in zip(images, labels, strict=True):
        assert int(image[0, 0, 0]) // 40 == int(label)
        assert int(image[1, 0, 0]) == 255 - int(image[0, 0, 0])
    again = _build(make_cfg(dataset="image-folder", root=str(tmp_path), image_size=10))
    assert again.val_loader.dataset.samples == data.val_loader.dataset.samples
    assert data.augment.mean.flatten().tolist() == pytest.approx([0.485, 0.456, 0.406])


def test_train_and_val_subfolders(make_cfg, tmp_path) -> None:
    _write_classes(tmp_path / "train", images_per_class=3)
    _write_png(tmp_path / "val" / "dog" / "a.png", value=40)
    _write_png(tmp_path / "val" / "owl" / "b.png", value=80)
    data = _build(make_cfg(dataset="image-folder", root=str(tmp_path)))
    assert (data.num_train, data.num_val, data.image_size) == (9, 2, 32)
    images, labels = next(iter(data.val_loader))
    assert images.shape == (2, 3, 32, 32)
    # val/ lacks "cat", yet labels still use the train class indices.
    assert labels.tolist() == [1, 2]


def test_val_class_missing_from_train_is_user_error(make_cfg, tmp_path) -> None:
    _write_classes(tmp_path / "train", images_per_class=1)
    _write_png(tmp_path / "val" / "fox" / "a.png", value=1)
    with pytest.raises(UserError, match="fox"):
        _build(make_cfg(dataset="image-folder", root=str(tmp_path)))


def test_missing_root_no_classes_and_no_images(make_cfg, tmp_path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(UserError, match=re.escape(f"data.root {missing} does not exist")):
        _build(make_cfg(dataset="image-folder", root=str(missing)))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match=re.escape(f"no class folders in {empty}")):
        _build(make_cfg(dataset="image-folder", root=str(empty)))
    (empty / "cat").mkdir()
    (empty / "cat" / "readme.txt").write_text("no images here")
    with pytest.raises(UserError, match="no images found"):
        _build(make_cfg(dataset="image-folder", root=str(empty)))


@pytest.mark.parametrize("num_workers", [0, 1])
def test_corrupt_image_names_the_file(make_cfg, tmp_path, num_workers: int) -> None:
    _write_png(tmp_path / "cat" / "good.png", value=10)
    bad = tmp_path / "cat" / "broken.png"
    bad.write_bytes(b"\x89PNG garbage")
    cfg = make_cfg(dataset="image-folder", root=str(tmp_path), dataloader_num_workers=num_workers)
    data = build_image_data(cfg, batch_size=2, eval_batch_size=2, seed=0)
    with pytest.raises(UserError) as caught:
        list(data.train_loader) + list(data.val_loader)
    message = str(caught.value)
    assert str(bad) in message and "could not be read" in message
    assert "\n" not in message  # still one line when raised inside a worker process
