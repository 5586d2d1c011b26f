"""Batched, on-device image augmentation: the ViT guide's per-sample transforms on a whole batch.

Owns `BatchAugment` (random crop with zero padding, horizontal flip, uint8 -> float, normalize)
and `crop_flip`, the deterministic core that takes explicit per-image offsets and flip decisions
so tests can compare it pixel for pixel with torchvision's per-sample functions.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor


def crop_flip(
    images: Tensor, offsets_y: Tensor, offsets_x: Tensor, flip_mask: Tensor, padding: int
) -> Tensor:
    """Zero-pad every image by `padding`, crop back to its size at per-image offsets, then flip.

    `images` is [B,C,H,W] (any dtype); `offsets_y`/`offsets_x` are int64 [B] in [0, 2*padding];
    `flip_mask` is bool [B]. Equivalent to torchvision's pad + crop(top=oy, left=ox) + hflip per
    image, but done with one gather instead of a Python loop over the batch.
    """
    num_images, _, height, width = images.shape
    device = images.device
    padded = F.pad(images, (padding, padding, padding, padding)) if padding else images
    row_steps = torch.arange(height, device=device)
    col_steps = torch.arange(width, device=device)
    # Flipping after cropping reads column (W-1-j) of the crop, so fold it into the column index
    # and gather once rather than materialising a flipped copy of the batch.
    col_steps = torch.where(flip_mask.to(device)[:, None], col_steps.flip(0), col_steps)
    rows = offsets_y.to(device)[:, None] + row_steps  # [B,H]
    cols = offsets_x.to(device)[:, None] + col_steps  # [B,W]
    batch_index = torch.arange(num_images, device=device)[:, None, None]
    channels_last = padded.permute(0, 2, 3, 1)  # index [b, row, col] -> [B,H,W,C]
    cropped = channels_last[batch_index, rows[:, :, None], cols[:, None, :]]
    return cropped.permute(0, 3, 1, 2)


class BatchAugment(torch.nn.Module):
    """Batched, on-device version of the ViT guide's transforms, applied to a whole uint8 batch.

    train: RandomCrop(size, padding=p) (zero padding, an independent random offset per image),
    RandomHorizontalFlip(p=0.5) per image, ToTensor (/255 -> float32), Normalize(mean, std).
    eval: ToTensor + Normalize only.

    Randomness comes from torch's global RNG for the images' device unless a generator is passed,
    so checkpointing torch's RNG state makes training augmentation reproducible.
    """

    def __init__(
        self,
        mean: Sequence[float],
        std: Sequence[float],
        crop_padding_px: int = 0,
        horizontal_flip: bool = False,
    ) -> None:
        super().__init__()
        assert len(mean) == len(std), "mean and std need one value per channel"
        assert crop_padding_px >= 0
        self.crop_padding_px = int(crop_padding_px)
        self.horizontal_flip = bool(horizontal_flip)
        # Buffers follow the module across .to(device) and stay out of the optimizer.
        self.register_buffer("mean", torch.tensor(list(mean), dtype=torch.float32).view(-1, 1, 1))
        self.register_buffer("std", torch.tensor(list(std), dtype=torch.float32).view(-1, 1, 1))

    def forward(
        self, images_uint8: Tensor, train: bool, generator: torch.Generator | None = None
    ) -> Tensor:
        """Return float32 [B,C,H,W] on the images' device, augmented when `train` is true."""
        assert images_uint8.dim() == 4, f"expected [B,C,H,W], got {tuple(images_uint8.shape)}"
        assert images_uint8.dtype == torch.uint8, f"expected uint8, got {images_uint8.dtype}"
        images = images_uint8
        if train and (self.crop_padding_px or self.horizontal_flip):
            images = self._random_crop_flip(images, generator)
        # Same op order as ToTensor (float then /255) and Normalize (sub then div): bit-identical.
        # The dtype change makes a fresh tensor, so the in-place ops below cannot touch the input.
        floats = images.to(torch.float32).div_(255)
        return floats.sub_(self.mean.to(floats.device)).div_(self.std.to(floats.device))

    def _random_crop_flip(self, images: Tensor, generator: torch.Generator | None) -> Tensor:
        num_images = images.shape[0]
        device = images.device
        max_offset = 2 * self.crop_padding_px
        offsets_y = torch.randint(
            0, max_offset + 1, (num_images,), device=device, generator=generator
        )
        offsets_x = torch.randint(
            0, max_offset + 1, (num_images,), device=device, generator=generator
        )
        if self.horizontal_flip:
            flip_mask = torch.rand(num_images, device=device, generator=generator) < 0.5
        else:
            flip_mask = torch.zeros(num_images, dtype=torch.bool, device=device)
        return crop_flip(images, offsets_y, offsets_x, flip_mask, self.crop_padding_px)

    def extra_repr(self) -> str:
        return f"crop_padding_px={self.crop_padding_px}, horizontal_flip={self.horizontal_flip}"
