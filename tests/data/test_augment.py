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
