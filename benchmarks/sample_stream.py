"""The cost of the invariant sample stream: training samples/s with each sample's crop and flip
keyed by (seed, epoch, sample index), against the same loop drawing them from torch's RNG per
micro-batch (the stream before it was made invariant), side by side in one run.

Two models, both trained by the same minimal loop (loader -> `ImageClassification.to_device`
-> forward, loss, backward, AdamW step) on one process:
- the digits ViT (config/vit_digits.yaml's model) on scikit-learn's digits, micro-batch 64;
- a CIFAR-shaped small ViT (32x32x3 images, crop padding 4 and flips, patch 4, width 128,
  4 layers) on synthetic uint8 images held in memory, micro-batch 64.
The two sides differ only in the loader: `make_loader(..., keyed=True)` (the product) or
`keyed=False` (bits absent: `BatchAugment` draws from the RNG). The sides' steps alternate one
by one; samples/s from each side's median step. Target: keyed >= 0.98 of unkeyed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import alternate, bench_threads, median, table, torch_threads

from trainforge.data.augment import BatchAugment
from trainforge.data.loaders import make_loader
from trainforge.data.memory import TensorImageDataset
from trainforge.models.vit import build_vit
from trainforge.tasks.vision import ImageClassification

LOADER_CFG = SimpleNamespace(dataloader_num_workers=0, pin_memory=False, prefetch_factor=None,
                             persistent_workers=False)  # fmt: skip


def _digits() -> tuple[TensorImageDataset, BatchAugment, SimpleNamespace]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.from_numpy(digits.images * 255 / 16).to(torch.uint8).unsqueeze(1)
    data = TensorImageDataset(images, torch.from_numpy(digits.target))
    model = SimpleNamespace(patch_size=4, embedding_dim=128, num_layers=4, num_heads=4,
                            mlp_size=256, attention_dropout=0.0, mlp_dropout=0.0)  # fmt: skip
    return data, BatchAugment([0.5], [0.25], crop_padding_px=1), model


def _cifar_shaped(
    num_images: int = 2048,
) -> tuple[TensorImageDataset, BatchAugment, SimpleNamespace]:
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (num_images, 3, 32, 32), dtype=torch.uint8, generator=generator)
    labels = torch.randint(0, 10, (num_images,), generator=generator)
    augment = BatchAugment([0.49, 0.48, 0.45], [0.25, 0.24, 0.26], 4, horizontal_flip=True)
    model = SimpleNamespace(patch_size=4, embedding_dim=128, num_layers=4, num_heads=4,
                            mlp_size=256, attention_dropout=0.0, mlp_dropout=0.0)  # fmt: skip
    return TensorImageDataset(images, labels), augment, model


def _side(case, keyed: bool):
    """A closure that trains one step and returns its seconds."""
    data, augment, model_cfg = case
    image_size, channels = data.images.shape[-1], data.images.shape[1]
    torch.manual_seed(0)
    model = build_vit(model_cfg, image_size=image_size, channels=channels, num_classes=10)
    loader = make_loader(data, LOADER_CFG, batch_size=64, train=True, seed=0,
                         batched_fetch=True, keyed=keyed)  # fmt: skip
    task = ImageClassification(model, loader, None, augment, len(data), 10, [], 0.1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    device = torch.device("cpu")

    def batches():
        while True:
            yield from loader

    stream = batches()

    def step() -> float:
        start = time.perf_counter()
        batch = task.to_device(next(stream), device, True)
        task.step(model, batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    return step


def run(steps: int = 200) -> tuple[str, dict[str, float]]:
    """Steps of the two sides alternate one by one (each pair in turn order), so both see
    the same machine; samples/s from the median step."""
    rows, ratios = [], {}
    with torch_threads(bench_threads()):
        for name, key, case in (("digits ViT", "sample_stream_digits", _digits()),
                                ("CIFAR-shaped small ViT", "sample_stream_cifar",
                                 _cifar_shaped())):  # fmt: skip
            sides = {"keyed": _side(case, True), "rng": _side(case, False)}
            alternate(sides, 6)  # warm-up
            times = alternate(sides, steps)
            rate = {side: 64 / median(values) for side, values in times.items()}
            ratios[key] = rate["keyed"] / rate["rng"]
            rows.append([name, f"{rate['rng']:.0f}", f"{rate['keyed']:.0f}",
                         f"{ratios[key]:.3f}"])  # fmt: skip
    title = (f"Invariant sample stream: samples/s of the median of {steps} alternating steps, "
             "micro-batch 64")  # fmt: skip
    header = ["model", "RNG per micro-batch", "keyed per sample", "keyed / RNG"]
    return table(title, header, rows), ratios


if __name__ == "__main__":
    text, _ = run()
    print(text)
