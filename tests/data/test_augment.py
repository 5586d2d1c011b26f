"""BatchAugment equals torchvision's per-sample transforms, and its randomness is reproducible."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms as T
import torchvision.transforms.functional as TF

from trainforge.data import BatchAugment, crop_flip

MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2023, 0.1994, 0.2010)


def _images(num_images: int = 6, channels: int = 3, size: int = 9, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    shape = (num_images, channels, size, size)
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator)


@pytest.mark.parametrize("padding", [0, 1, 4])
def test_crop_flip_matches_torchvision_per_image(padding: int) -> None:
    images = _images(num_images=8, size=9)
    generator = torch.Generator().manual_seed(3)
    offsets_y = torch.randint(0, 2 * padding + 1, (8,), generator=generator)
    offsets_x = torch.randint(0, 2 * padding + 1, (8,), generator=generator)
    flip_mask = torch.tensor([True, False] * 4)
    batched = crop_flip(images, offsets_y, offsets_x, flip_mask, padding)
    for index, image in enumerate(images):
        expected = TF.pad(image, [padding], fill=0)  # zero padding, as RandomCrop(padding=p)
        expected = TF.crop(expected, int(offsets_y[index]), int(offsets_x[index]), 9, 9)
        if flip_mask[index]:
            expected = TF.hflip(expected)
        assert torch.equal(batched[index], expected), f"image {index} differs"


def test_crop_flip_with_nonsquare_images() -> None:
    images = torch.randint(0, 256, (3, 2, 5, 7), dtype=torch.uint8)
    offsets = torch.tensor([0, 2, 4])
    batched = crop_flip(images, offsets, offsets.flip(0), torch.tensor([False, True, True]), 2)
    for index, image in enumerate(images):
        expected = TF.crop(TF.pad(image, [2]), int(offsets[index]), int(offsets[2 - index]), 5, 7)
        expected = TF.hflip(expected) if index else expected
        assert torch.equal(batched[index], expected)


def test_eval_mode_equals_totensor_normalize() -> None:
    images = _images(num_images=5, size=8)
    augment = BatchAugment(MEAN, STD, crop_padding_px=4, horizontal_flip=True)
    batched = augment(images, train=False)
    reference = T.Compose([T.ToTensor(), T.Normalize(MEAN, STD)])
    for index, image in enumerate(images):
        hwc = image.permute(1, 2, 0).numpy()  # ToTensor's ndarray/PIL input is HWC
        expected = reference(np.ascontiguousarray(hwc))
        assert batched.dtype == torch.float32
        torch.testing.assert_close(batched[index], expected, atol=1e-6, rtol=0)


def test_train_mode_is_random_but_reproducible_with_torch_seed() -> None:
    images = _images(num_images=16, size=8)
    augment = BatchAugment(MEAN, STD, crop_padding_px=4, horizontal_flip=True)
    torch.manual_seed(123)
    first = augment(images, train=True)
    second = augment(images, train=True)
    assert not torch.equal(first, second)
    torch.manual_seed(123)
    assert torch.equal(augment(images, train=True), first)
    generator_a = torch.Generator().manual_seed(5)
    generator_b = torch.Generator().manual_seed(5)
    from_a = augment(images, train=True, generator=generator_a)
    assert torch.equal(from_a, augment(images, train=True, generator=generator_b))
    assert first.shape == images.shape and first.dtype == torch.float32


def test_train_mode_without_crop_or_flip_is_just_normalize() -> None:
    images = _images(num_images=4, channels=1, size=8)
    augment = BatchAugment((0.3,), (0.4,), crop_padding_px=0, horizontal_flip=False)
    torch.testing.assert_close(augment(images, train=True), augment(images, train=False))


def test_train_mode_output_is_a_padded_crop_of_the_input() -> None:
    # Each augmented image must equal crop_flip of the input for SOME offset/flip choice.
    images = _images(num_images=4, size=6)
    augment = BatchAugment((0.0,) * 3, (1.0,) * 3, crop_padding_px=1, horizontal_flip=True)
    torch.manual_seed(0)
    output = augment(images, train=True)
    restored = (output * 255).round().to(torch.uint8)
    for index, image in enumerate(images):
        candidates = [
            crop_flip(image[None], torch.tensor([y]), torch.tensor([x]), torch.tensor([f]), 1)[0]
            for y in range(3)
            for x in range(3)
            for f in (False, True)
        ]
        assert any(torch.equal(restored[index], candidate) for candidate in candidates)


def _reference_crop_flip(
    images: torch.Tensor,
    offsets_y: torch.Tensor,
    offsets_x: torch.Tensor,
    flip_mask: torch.Tensor,
    padding: int,
) -> torch.Tensor:
    """The earlier `crop_flip`, kept as the reference: one gather of every pixel with the flip
    folded into the column index; the result has channels-last strides."""
    num_images, _, height, width = images.shape
    padded = torch.nn.functional.pad(images, (padding,) * 4) if padding else images
    col_steps = torch.arange(width)
    col_steps = torch.where(flip_mask[:, None], col_steps.flip(0), col_steps)
    rows = offsets_y[:, None] + torch.arange(height)
    cols = offsets_x[:, None] + col_steps
    batch_index = torch.arange(num_images)[:, None, None]
    cropped = padded.permute(0, 2, 3, 1)[batch_index, rows[:, :, None], cols[:, None, :]]
    return cropped.permute(0, 3, 1, 2)


def _reference_augment(
    images: torch.Tensor, augment: BatchAugment, generator: torch.Generator | None
) -> torch.Tensor:
    """The earlier BatchAugment train path: the same draws in the same order (y offsets,
    x offsets, flips), the reference crop, then float, /255, -mean, /std."""
    num_images = images.shape[0]
    high = 2 * augment.crop_padding_px + 1
    offsets_y = torch.randint(0, high, (num_images,), generator=generator)
    offsets_x = torch.randint(0, high, (num_images,), generator=generator)
    if augment.horizontal_flip:
        flips = torch.rand(num_images, generator=generator) < 0.5
    else:
        flips = torch.zeros(num_images, dtype=torch.bool)
    cropped = _reference_crop_flip(images, offsets_y, offsets_x, flips, augment.crop_padding_px)
    return cropped.to(torch.float32).div_(255).sub_(augment.mean).div_(augment.std)


@pytest.mark.parametrize(
    "shape, padding, flip",
    [
        ((64, 3, 32, 32), 4, True),
        ((5, 1, 7, 9), 2, True),
        ((3, 4, 8, 8), 0, True),
        ((6, 3, 10, 6), 3, False),
        ((1, 3, 5, 5), 1, True),
    ],
)
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_train_mode_is_bitwise_the_earlier_gather_for_the_same_draws(shape, padding, flip, seed):
    """Values, strides (layout) and the RNG stream afterwards all match the earlier formula,
    so training results and exact resume are unchanged."""
    channels = shape[1]
    images = torch.randint(0, 256, shape, dtype=torch.uint8)
    mean = [0.1 + 0.2 * c for c in range(channels)]
    std = [0.3 - 0.05 * c for c in range(channels)]
    augment = BatchAugment(mean, std, crop_padding_px=padding, horizontal_flip=flip)
    torch.manual_seed(seed)
    expected = _reference_augment(images, augment, None)
    expected_next = torch.rand(3)
    torch.manual_seed(seed)
    got = augment(images, train=True)
    assert torch.equal(torch.rand(3), expected_next), "a different number of draws"
    assert torch.equal(got, expected)
    assert got.stride() == expected.stride() and got.dtype == expected.dtype == torch.float32
    generator = torch.Generator().manual_seed(seed)
    expected = _reference_augment(images, augment, torch.Generator().manual_seed(seed))
    assert torch.equal(augment(images, train=True, generator=generator), expected)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float64, torch.int16])
@pytest.mark.parametrize("seed", [0, 3])
def test_crop_flip_is_bitwise_the_earlier_gather_for_any_dtype(dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    for shape, padding in [((16, 3, 12, 12), 4), ((4, 2, 5, 8), 1), ((3, 1, 4, 4), 0)]:
        images = (torch.rand(shape, generator=generator) * 200).to(dtype)
        offsets_y = torch.randint(0, 2 * padding + 1, (shape[0],), generator=generator)
        offsets_x = torch.randint(0, 2 * padding + 1, (shape[0],), generator=generator)
        flips = torch.rand(shape[0], generator=generator) < 0.5
        expected = _reference_crop_flip(images, offsets_y, offsets_x, flips, padding)
        got = crop_flip(images, offsets_y, offsets_x, flips, padding)
        assert torch.equal(got, expected) and got.dtype == dtype
        assert got.stride() == expected.stride()


def test_train_batch_equals_torchvision_random_crop_and_flip_for_the_drawn_offsets(monkeypatch):
    """RandomCrop(32, padding=4) + RandomHorizontalFlip + ToTensor + Normalize per image, with
    torchvision's own get_params replaced by the offsets and flips BatchAugment drew."""
    images = _images(num_images=12, size=32, seed=4)
    augment = BatchAugment(MEAN, STD, crop_padding_px=4, horizontal_flip=True)
    torch.manual_seed(11)
    offsets_y = torch.randint(0, 9, (12,))
    offsets_x = torch.randint(0, 9, (12,))
    flips = torch.rand(12) < 0.5
    torch.manual_seed(11)
    batched = augment(images, train=True)
    crop = T.RandomCrop(32, padding=4)
    to_float = T.Compose([T.ToTensor(), T.Normalize(MEAN, STD)])
    for index, image in enumerate(images):
        top, left = int(offsets_y[index]), int(offsets_x[index])
        draw = staticmethod(lambda img, size, t=top, s=left: (t, s, *size))
        monkeypatch.setattr(T.RandomCrop, "get_params", draw)
        expected = crop(image)  # pads with zeros, then crops at (top, left)
        flip = T.RandomHorizontalFlip(p=1.0 if flips[index] else 0.0)
        expected = flip(expected)
        hwc = np.ascontiguousarray(expected.permute(1, 2, 0).numpy())
        assert torch.equal(batched[index], to_float(hwc)), f"image {index} differs"
