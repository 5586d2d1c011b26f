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
    images, labels, _bits = next(iter(data.train_loader))
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
    with pytest.raises(UserError, match=re.escape(f"{empty} has 0 class folder(s)")):
        _build(make_cfg(dataset="image-folder", root=str(empty)))
    _write_png(empty / "dog" / "a.png", value=3)
    (empty / "cat").mkdir()
    (empty / "cat" / "readme.txt").write_text("no images here")
    with pytest.raises(UserError, match=re.escape(f"class folder {empty / 'cat'} has no images")):
        _build(make_cfg(dataset="image-folder", root=str(empty)))


def test_corrupt_image_is_refused_before_loading_or_skipped_on_request(make_cfg, tmp_path, capsys):
    _write_classes(tmp_path, images_per_class=3)
    bad = tmp_path / "dog" / "broken.png"
    bad.write_bytes(b"\x89PNG garbage")
    cfg = make_cfg(dataset="image-folder", root=str(tmp_path))
    with pytest.raises(UserError) as caught:
        _build(cfg)
    message = str(caught.value)
    assert f"image file {bad} could not be read" in message and "1 of 10 checked" in message
    assert "data.skip_bad_images=true" in message
    data = _build(make_cfg(dataset="image-folder", root=str(tmp_path), skip_bad_images=True))
    assert data.num_train + data.num_val == 9
    assert f"skipped 1 of 10 checked images as unreadable (data.skip_bad_images), first {bad}" in (
        capsys.readouterr().out
    )


def test_hidden_and_non_image_files_are_ignored_modes_and_sizes_converted(
    make_cfg, tmp_path, capsys
) -> None:
    _write_classes(tmp_path, images_per_class=2)
    (tmp_path / ".cache").mkdir()  # a hidden folder is not a class
    _write_png(tmp_path / ".cache" / "x.png", value=1)
    (tmp_path / "cat" / "._0.png").write_bytes(b"macOS metadata")  # hidden: never decoded
    (tmp_path / "cat" / "labels.csv").write_text("a,b")
    Image.new("L", (20, 9), 128).save(tmp_path / "owl" / "gray.png")
    Image.new("RGBA", (7, 7), (1, 2, 3, 4)).save(tmp_path / "owl" / "alpha.png")
    data = _build(make_cfg(dataset="image-folder", root=str(tmp_path), image_size=8))
    assert data.class_names == CLASS_NAMES and data.num_train + data.num_val == 8
    out = capsys.readouterr().out
    assert "ignored 1 non-image file(s)" in out
    assert "mode(s) L, RGBA converted to RGB" in out and "resized to 8x8" in out
    images = torch.cat([batch[0] for batch in data.train_loader])
    assert images.shape[1:] == (3, 8, 8)


def test_large_folder_is_checked_on_a_stated_sample(tmp_path) -> None:
    from trainforge.data.validate import validate_image_folder

    _write_classes(tmp_path, images_per_class=4)
    scan = validate_image_folder(tmp_path, 8, sample_limit=5)
    assert len(scan.train) == 12
    assert any("decoded a seeded sample of 5 of 12 images" in note for note in scan.notes)


@pytest.mark.parametrize("num_workers", [0, 1])
def test_unreadable_image_met_while_training_names_the_file(
    make_cfg, tmp_path, num_workers: int
) -> None:
    """An image outside validation's sample still stops the run in one line."""
    from trainforge.data.image_folder import ImageFileDataset
    from trainforge.data.loaders import make_loader, park_workers

    _write_png(tmp_path / "cat" / "good.png", value=10)
    bad = tmp_path / "cat" / "broken.png"
    bad.write_bytes(b"\x89PNG garbage")
    dataset = ImageFileDataset([(str(tmp_path / "cat" / "good.png"), 0), (str(bad), 0)], 8)
    cfg = make_cfg(dataset="image-folder", root=str(tmp_path), dataloader_num_workers=num_workers)
    loader = make_loader(dataset, batch_size=2, train=False, cfg=cfg, seed=0, batched_fetch=False)
    with pytest.raises(UserError) as caught:
        list(loader)
    park_workers(loader)  # the worker that raised goes now, not inside a later collection
    message = str(caught.value)
    assert str(bad) in message and "could not be read" in message
    assert "\n" not in message  # still one line when raised inside a worker process
