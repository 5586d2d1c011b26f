"""Batched, on-device image augmentation: the ViT guide's per-sample transforms on a whole batch.

Owns `BatchAugment` (random crop with zero padding, horizontal flip, uint8 -> float, normalize)
and `crop_flip`, the deterministic core that takes explicit per-image offsets and flip decisions
so tests can compare it pixel for pixel with torchvision's per-sample functions.

Layout: a train-mode batch (and `crop_flip`'s result) is [B,C,H,W] with channels-last strides
(the bytes lie in [B,H,W,C] order); eval mode keeps the input's layout. Convolutions round
differently for the two layouts, so the layout is part of the contract: training results and
exact resume depend on it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def _crop_flip_nchw(
    images: Tensor, offsets_y: Tensor, offsets_x: Tensor, flip_mask: Tensor | None, padding: int
) -> Tensor:
    """`crop_flip`'s pixels as a [B,C,H,W] view (`flip_mask` None: no flips).

    Flipping a crop equals cropping the flipped padded image at the mirrored offset
    (flip(crop(x, ox)) == crop(flip(x), 2*padding - ox)), so the batch and its mirror image are
    padded into one flat buffer side by side. In a padded channel plane the crop's H rows
    starting at row oy are one contiguous run of H * (W + 2p) values; starting that run at
    column ox instead, the first W values of each of its rows are the crop. So the whole crop
    is one `index_select` of B*C contiguous runs (a memcpy each on the CPU, no per-pixel
    offsets, no host synchronisation) from an overlapping view whose row r starts at value r;
    the result is a view with row stride W + 2p, read once by the float conversion.
    """
    num_images, channels, height, width = images.shape
    device = images.device
    padded_h, padded_w = height + 2 * padding, width + 2 * padding
    copies = 2 if flip_mask is not None else 1
    planes = copies * num_images * channels * padded_h * padded_w
    # Slack at the end: the last run, started at column ox, may reach 2p values past its plane.
    flat = images.new_zeros(planes + 2 * padding)
    padded = flat[:planes].view(copies * num_images, channels, padded_h, padded_w)
    rows, cols = slice(padding, padding + height), slice(padding, padding + width)
    padded[:num_images, :, rows, cols] = images
    source = torch.arange(num_images, device=device)
    offsets_x = offsets_x.to(device)
    if flip_mask is not None:
        flip_mask = flip_mask.to(device)
        padded[num_images:, :, rows, cols] = images.flip(-1)  # the mirror images
        source = source + num_images * flip_mask.long()
        offsets_x = torch.where(flip_mask, 2 * padding - offsets_x, offsets_x)
    run = height * padded_w
    plane_index = source[:, None] * channels + torch.arange(channels, device=device)
    starts = (plane_index * padded_h + offsets_y.to(device)[:, None]) * padded_w
    starts = (starts + offsets_x[:, None]).reshape(-1)
    runs = flat.as_strided((flat.numel() - run + 1, run), (1, 1))  # row r = flat[r : r + run]
    cropped = runs.index_select(0, starts)
    return cropped.view(num_images, channels, height, padded_w)[..., :width]


def _channels_last_copy(images: Tensor, dtype: torch.dtype) -> Tensor:
    """`images` [B,C,H,W] converted to `dtype` into [B,H,W,C] memory, returned as that buffer.

    One strided copy per channel: on CPU several times faster than a whole-tensor permuted
    copy (whose innermost dimension would be the 3 channels).
    """
    num_images, channels, height, width = images.shape
    out = torch.empty(num_images, height, width, channels, dtype=dtype, device=images.device)
    for channel in range(channels):
        out[..., channel].copy_(images[:, channel])
    return out


def crop_flip(
    images: Tensor, offsets_y: Tensor, offsets_x: Tensor, flip_mask: Tensor, padding: int
) -> Tensor:
    """Zero-pad every image by `padding`, crop back to its size at per-image offsets, then flip.

    `images` is [B,C,H,W] (any dtype); `offsets_y`/`offsets_x` are int64 [B] in [0, 2*padding];
    `flip_mask` is bool [B]. Equivalent to torchvision's pad + crop(top=oy, left=ox) + hflip per
    image, without a Python loop over the batch. The result has channels-last strides.
    """
    cropped = _crop_flip_nchw(images, offsets_y, offsets_x, flip_mask, padding)
    return _channels_last_copy(cropped, cropped.dtype).permute(0, 3, 1, 2)


class BatchAugment(torch.nn.Module):
    """Batched, on-device version of the ViT guide's transforms, applied to a whole uint8 batch.

    train: RandomCrop(size, padding=p) (zero padding, an independent random offset per image),
    RandomHorizontalFlip(p=0.5) per image, ToTensor (/255 -> float32), Normalize(mean, std).
    eval: ToTensor + Normalize only.

    Training batches bring each sample's random bits (keyed by seed, epoch and sample index,
    `data.sampling.sample_keys`), so an image's crop and flip do not depend on the process,
    the micro-batch or a resume. Without them randomness comes from a passed generator or
    torch's global RNG for the images' device.
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
        self,
        images_uint8: Tensor,
        train: bool,
        generator: torch.Generator | None = None,
        sample_bits: Tensor | None = None,
    ) -> Tensor:
        """Return float32 [B,C,H,W] on the images' device, augmented when `train` is true.

        `sample_bits` (int64 [B], the train loader's per-sample random bits) decide each
        image's crop and flip; without them they are drawn from `generator` / torch's RNG."""
        assert images_uint8.dim() == 4, f"expected [B,C,H,W], got {tuple(images_uint8.shape)}"
        assert images_uint8.dtype == torch.uint8, f"expected uint8, got {images_uint8.dtype}"
        if train and (self.crop_padding_px or self.horizontal_flip):
            cropped = self._random_crop_flip(images_uint8, generator, sample_bits)
            # ToTensor's float conversion straight into [B,H,W,C] memory (crop_flip's layout),
            # then the same ops as below on that buffer: the same values, bit for bit.
            floats = _channels_last_copy(cropped, torch.float32)
            _, height, width, channels = floats.shape
            mean, std = (
                value.to(floats.device).view(channels).repeat(height * width)
                for value in (self.mean, self.std)
            )
            # Per-pixel copies of mean/std make both operands contiguous, so the arithmetic
            # runs in long vector loops instead of loops over the 3 channels.
            floats = floats.view(-1, height * width * channels).div_(255).sub_(mean).div_(std)
            return floats.view(-1, height, width, channels).permute(0, 3, 1, 2)
        # Same op order as ToTensor (float then /255) and Normalize (sub then div): bit-identical.
        # The dtype change makes a fresh tensor, so the in-place ops below cannot touch the input.
        floats = images_uint8.to(torch.float32).div_(255)
        return floats.sub_(self.mean.to(floats.device)).div_(self.std.to(floats.device))

    def _random_crop_flip(
        self, images: Tensor, generator: torch.Generator | None, bits: Tensor | None
    ) -> Tensor:
        """Crop offsets and flips, then the crop as a [B,C,H,W] view. From per-sample bits:
        y offset from bits 0-15, x offset from bits 16-31, flip from bit 32 (a fixed map:
        changing it would change every run). Else drawn in a fixed order (y offsets, x
        offsets, flips)."""
        num_images = images.shape[0]
        device = images.device
        max_offset = 2 * self.crop_padding_px
        if bits is not None:
            bits = bits.to(device)
            offsets_y = (bits & 0xFFFF) % (max_offset + 1)
            offsets_x = ((bits >> 16) & 0xFFFF) % (max_offset + 1)
            flips = ((bits >> 32) & 1).bool() if self.horizontal_flip else None
            return _crop_flip_nchw(images, offsets_y, offsets_x, flips, self.crop_padding_px)
        offsets_y = torch.randint(
            0, max_offset + 1, (num_images,), device=device, generator=generator
        )
        offsets_x = torch.randint(
            0, max_offset + 1, (num_images,), device=device, generator=generator
        )
        flip_mask = None  # no flips: no mirror images to pad
        if self.horizontal_flip:
            flip_mask = torch.rand(num_images, device=device, generator=generator) < 0.5
        return _crop_flip_nchw(images, offsets_y, offsets_x, flip_mask, self.crop_padding_px)

    def extra_repr(self) -> str:
        return f"crop_padding_px={self.crop_padding_px}, horizontal_flip={self.horizontal_flip}"
