"""Input pipeline: the ViT guide's per-sample torchvision augmentation vs trainforge's batched
augmentation of the same transforms, side by side in one run; then the data-wait share of a
short trainforge training run on its default input path.

- seed pipeline: a torchvision-style dataset over uint8 HWC arrays (CIFAR10's `__getitem__`:
  `Image.fromarray`, then the transform per sample) with RandomCrop(32, padding=4),
  RandomHorizontalFlip, ToTensor, Normalize; DataLoader with 2 worker processes, shuffle,
  persistent workers, prefetch 2 (the guide's and the training-optimisation notes' settings).
- trainforge: the data set held as one uint8 NCHW tensor (`TensorImageDataset`), trainforge's
  loader (`make_loader` with the CPU profile's settings: one gather per batch, no workers) and
  `BatchAugment` with CIFAR-10's defaults (the same four transforms on the whole batch), as
  the image task runs it on CPU, with as many torch threads as the seed has worker processes
  (equal cores; a diagnostic row shows one thread).
Both deliver normalised float32 [B,3,32,32] batches to the training process; images/s is
wall clock over `timed_batches` batches after `warmup_batches`, median of alternating rounds.
Target: >= 8x on 2 CPU cores.

Data wait: the real Trainer trains a small ViT on the image task built from the same pieces
(`ImageClassification` with trainforge's loader and augmentation); after warm-up steps,
`Trainer.pop_train_metrics()` reports `data_wait_share` (loader + transfer + augmentation time
over step time). Target: under 2%.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import transforms
from torchvision.datasets import VisionDataset
from torchvision.transforms import functional as TF

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    PeakMemory,
    alternate,
    bench_threads,
    measure_memory,
    median,
    memory_note,
    table,
    torch_threads,
)

from trainforge.config.loading import load
from trainforge.data.augment import BatchAugment, crop_flip
from trainforge.data.catalog import CIFAR10_MEAN, CIFAR10_STD
from trainforge.data.loaders import make_loader
from trainforge.data.memory import TensorImageDataset
from trainforge.engine.callbacks import Callback
from trainforge.engine.trainer import Trainer
from trainforge.models.vit import build_vit
from trainforge.tasks.vision import ImageClassification

TARGET_SPEEDUP = 8.0
TARGET_DATA_WAIT = 0.02
MEAN, STD = CIFAR10_MEAN, CIFAR10_STD


class SeedCIFAR(VisionDataset):
    """torchvision.datasets.CIFAR10's item access over arrays already in memory."""

    def __init__(self, data_hwc: np.ndarray, targets: list[int], transform: Any) -> None:
        super().__init__(root="", transform=transform)
        self.data = data_hwc
        self.targets = targets

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image = Image.fromarray(self.data[index])
        return self.transform(image), self.targets[index]


def seed_transform() -> transforms.Compose:
    return transforms.Compose(
        [
            transforms.RandomCrop(32, padding=4),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD),
        ]
    )


def synthetic_uint8(num_images: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-shaped uint8 images as torchvision keeps them (NHWC) and labels."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (num_images, 32, 32, 3), dtype=np.uint8)
    return images, rng.integers(0, 10, num_images)


def crop_flip_gather(
    images: torch.Tensor,
    offsets_y: torch.Tensor,
    offsets_x: torch.Tensor,
    flip_mask: torch.Tensor,
    padding: int,
) -> torch.Tensor:
    """The earlier `crop_flip` (diagnostic: the same bytes and layout): one advanced-index gather
    of every pixel, the flip folded into the column index, channels-last strides."""
    num_images, _, height, width = images.shape
    padded = F.pad(images, (padding, padding, padding, padding)) if padding else images
    col_steps = torch.arange(width)
    col_steps = torch.where(flip_mask[:, None], col_steps.flip(0), col_steps)
    rows = offsets_y[:, None] + torch.arange(height)
    cols = offsets_x[:, None] + col_steps
    batch_index = torch.arange(num_images)[:, None, None]
    cropped = padded.permute(0, 2, 3, 1)[batch_index, rows[:, :, None], cols[:, None, :]]
    return cropped.permute(0, 3, 1, 2)


class GatherAugment(BatchAugment):
    """The earlier BatchAugment train path (diagnostic row): the same draws, `crop_flip_gather`,
    then float, /255, -mean, /std on the channels-last result."""

    def forward(self, images: torch.Tensor, train: bool, generator: Any = None) -> torch.Tensor:
        num_images = images.shape[0]
        high = 2 * self.crop_padding_px + 1
        offsets_y = torch.randint(0, high, (num_images,), generator=generator)
        offsets_x = torch.randint(0, high, (num_images,), generator=generator)
        flip_mask = torch.rand(num_images, generator=generator) < 0.5
        cropped = crop_flip_gather(images, offsets_y, offsets_x, flip_mask, self.crop_padding_px)
        return cropped.to(torch.float32).div_(255).sub_(self.mean).div_(self.std)


def cpu_config(**sets: Any):
    base = {
        "logging.tensorboard": "false",
        "logging.jsonl": "false",
        "logging.progress_bar": "false",
        "checkpoint.save_every_epochs": "null",
        "checkpoint.save_best": "false",
        "checkpoint.save_final_model": "false",
        "hardware.telemetry": "false",
    }
    base.update({key: str(value) for key, value in sets.items()})
    return load(None, overrides=[f"{k}={v}" for k, v in base.items()], profile="cpu").config


class Pipelines:
    """The pipelines over the same images; each call runs one full epoch and returns seconds.

    An epoch runs to its end so the seed loader's workers are idle when another pipeline is
    timed (mid-epoch they would keep prefetching on the same cores).
    """

    def __init__(self, num_images: int, batch_size: int, workers: int) -> None:
        data_hwc, labels = synthetic_uint8(num_images)
        self.seed_loader = DataLoader(
            SeedCIFAR(data_hwc, labels.tolist(), seed_transform()),
            batch_size=batch_size,
            shuffle=True,
            num_workers=workers,
            persistent_workers=workers > 0,
            prefetch_factor=2 if workers > 0 else None,
        )
        nchw = torch.from_numpy(data_hwc).permute(0, 3, 1, 2).contiguous()
        dataset = TensorImageDataset(nchw, torch.from_numpy(labels))
        self.loader = make_loader(
            dataset, cpu_config().data, batch_size=batch_size, train=True, seed=0,
            batched_fetch=True,
        )  # fmt: skip
        self.augment = BatchAugment(MEAN, STD, crop_padding_px=4, horizontal_flip=True)
        self.gather_augment = GatherAugment(MEAN, STD, crop_padding_px=4, horizontal_flip=True)

    def seed(self) -> float:
        start = time.perf_counter()
        for images, _ in self.seed_loader:
            assert images.dtype == torch.float32 and images.shape[1:] == (3, 32, 32)
        return time.perf_counter() - start

    def trainforge(self, augment: BatchAugment | None = None) -> float:
        augment = augment or self.augment
        start = time.perf_counter()
        for images, _ in self.loader:
            out = augment(images, train=True)
            assert out.dtype == torch.float32 and out.shape[1:] == (3, 32, 32)
        return time.perf_counter() - start

    def worker_pids(self) -> list[int]:
        """The seed loader's live worker processes (persistent, so alive between epochs)."""
        iterator = self.seed_loader._iterator  # DataLoader keeps it while workers persist
        return [worker.pid for worker in getattr(iterator, "_workers", [])]

    def close(self) -> None:
        del self.seed_loader  # stops the persistent workers


def same_transforms(num_images: int = 16) -> float:
    """Largest difference between the pipelines on the same images and the same random
    choices (crop offsets, flips): torchvision's functional ops per image vs `crop_flip` (and
    the earlier `crop_flip_gather`) + `BatchAugment`'s ToTensor/Normalize on the batch; and
    BatchAugment's train output vs the earlier formula's for the same draws (values and
    layout: a different layout would change the model's rounding)."""
    data_hwc, _ = synthetic_uint8(num_images, seed=1)
    generator = torch.Generator().manual_seed(0)
    offsets_y = torch.randint(0, 9, (num_images,), generator=generator)
    offsets_x = torch.randint(0, 9, (num_images,), generator=generator)
    flips = torch.rand(num_images, generator=generator) < 0.5
    expected = []
    for i in range(num_images):
        image = TF.pad(Image.fromarray(data_hwc[i]), [4])
        image = TF.crop(image, int(offsets_y[i]), int(offsets_x[i]), 32, 32)
        image = TF.hflip(image) if flips[i] else image
        expected.append(TF.normalize(TF.to_tensor(image), MEAN, STD))
    expected = torch.stack(expected)
    nchw = torch.from_numpy(data_hwc).permute(0, 3, 1, 2)
    normalize = BatchAugment(MEAN, STD)
    worst = 0.0
    for crop in (crop_flip, crop_flip_gather):
        got = normalize(crop(nchw, offsets_y, offsets_x, flips, 4).contiguous(), train=False)
        worst = max(worst, float((got - expected).abs().max()))
    augment = BatchAugment(MEAN, STD, crop_padding_px=4, horizontal_flip=True)
    earlier = GatherAugment(MEAN, STD, crop_padding_px=4, horizontal_flip=True)
    now = augment(nchw, train=True, generator=torch.Generator().manual_seed(1))
    before = earlier(nchw, train=True, generator=torch.Generator().manual_seed(1))
    worst = max(worst, float((now - before).abs().max()))
    return worst if now.stride() == before.stride() else float("inf")


class WindowProbe(Callback):
    """Starts a fresh metrics window after the warm-up steps and keeps the last one."""

    def __init__(self, warmup_steps: int) -> None:
        self.warmup_steps = warmup_steps
        self.metrics: dict[str, float] = {}

    def on_step_end(self, trainer: Trainer) -> None:
        if trainer.state.global_step == self.warmup_steps:
            trainer.pop_train_metrics()

    def on_fit_end(self, trainer: Trainer) -> None:
        self.metrics = trainer.pop_train_metrics()


def data_wait_run(
    warmup_steps: int = 3, timed_steps: int = 20, batch_size: int = 64, dim: int = 64
) -> dict[str, float]:
    """One short training run on trainforge's default input path; the timed window's metrics."""
    config = cpu_config(
        **{
            "training.max_steps": warmup_steps + timed_steps,
            "training.per_device_train_batch_size": batch_size,
            "model.embedding_dim": dim,
            "model.num_layers": 4,
            "model.num_heads": 4,
            "model.mlp_size": 2 * dim,
        }
    )
    data_hwc, labels = synthetic_uint8(batch_size * 40)
    nchw = torch.from_numpy(data_hwc).permute(0, 3, 1, 2).contiguous()
    dataset = TensorImageDataset(nchw, torch.from_numpy(labels))
    common = {"seed": config.training.seed, "batched_fetch": True}
    train = make_loader(dataset, config.data, batch_size=batch_size, train=True, **common)
    torch.manual_seed(config.training.seed)
    task = ImageClassification(
        model=build_vit(config.model, image_size=32, channels=3, num_classes=10),
        train_loader=train,
        val_loader=None,
        augment=BatchAugment(MEAN, STD, crop_padding_px=4, horizontal_flip=True),
        num_train_samples=len(dataset),
        num_classes=10,
        class_names=[str(i) for i in range(10)],
        label_smoothing=config.task.label_smoothing,
    )
    probe = WindowProbe(warmup_steps)
    with tempfile.TemporaryDirectory(prefix="trainforge-bench-") as run_dir:
        trainer = Trainer(task, config, run_dir=Path(run_dir), device=torch.device("cpu"),
                          callbacks=[probe])  # fmt: skip
        trainer.fit()
    return probe.metrics


def memory_cells(runs: list[tuple[float, PeakMemory]]) -> list[str]:
    """Median peak RSS, growth and workers' peak over the rounds of one pipeline."""
    memories = [memory for _, memory in runs]
    workers = [m.children_mib for m in memories if m.children_mib is not None]
    return [
        f"{median([m.rss_mib for m in memories]):,.0f}",
        f"+{median([m.rss_growth_mib for m in memories]):,.0f}",
        f"{median(workers):,.0f}" if workers else "no workers",
    ]


def run(
    repeats: int = 5,
    batch_size: int = 128,
    batches_per_epoch: int = 40,
    workers: int = 2,
    train_steps: tuple[int, int] = (3, 20),
    threads: int | None = None,
) -> tuple[str, dict[str, float]]:
    count = threads or bench_threads()
    num_images = batch_size * batches_per_epoch
    with torch_threads(count):
        pipelines = Pipelines(num_images, batch_size, workers)
        pipelines.seed()  # warm-up: workers started
        pipelines.trainforge()
        # Equal cores: the guide pipeline's workers run one thread each, so trainforge, whose
        # augmentation runs in the training process, gets as many intra-op threads (what a
        # run does: `training.num_threads` defaults to all cores). The one-thread row shows
        # what a single core gives.
        cores = max(1, workers)

        def on_cores(fn, n: int = cores):
            def call():
                with torch_threads(n):
                    return measure_memory(fn)

            return call

        cases = alternate(
            {
                "seed": lambda: measure_memory(pipelines.seed, children=pipelines.worker_pids),
                "trainforge": on_cores(pipelines.trainforge),
                "one_thread": on_cores(pipelines.trainforge, 1),
                "gather": on_cores(lambda: pipelines.trainforge(pipelines.gather_augment)),
            },
            repeats,
        )
        pipelines.close()
        rates = {name: num_images / median([s for s, _ in runs]) for name, runs in cases.items()}
        max_diff = same_transforms()
        metrics = data_wait_run(*train_steps)
    seed_rate = rates["seed"]
    rows = [
        [f"seed: torchvision per sample, {workers} worker processes", "seed"],
        [f"trainforge: uint8 in memory + BatchAugment, {cores} thread(s)", "trainforge"],
        ["(diag) trainforge on 1 thread (one core)", "one_thread"],
        [
            f"(diag) trainforge with the earlier crop_flip (per-pixel gather), {cores} thread(s)",
            "gather",
        ],
    ]
    rows = [
        [label, f"{rates[key]:,.0f}", f"{rates[key] / seed_rate:.2f}x", *memory_cells(cases[key])]
        for label, key in rows
    ]
    share = metrics["data_wait_share"]
    text = table(
        f"input pipeline: RandomCrop(32, padding=4) + RandomHorizontalFlip + ToTensor + Normalize,"
        f" batch {batch_size}, one {num_images}-image epoch per round, median of {repeats} "
        f"alternating rounds (target >= {TARGET_SPEEDUP:g}x)",
        ["pipeline", "images/s", "vs seed", "peak RSS MiB", "+MiB", "workers' peak RSS MiB"],
        rows,
    )
    text += (
        "\n"
        + memory_note(cases["seed"][0][1])
        + (
            "; workers' peak RSS = the sum of the worker processes' VmHWM over the case "
            "(each reset at its start; pages shared with the main process count in each, "
            "so an upper bound)"
        )
    )
    text += (
        f"\nsame transforms: max |difference| {max_diff:.2e} on 16 images with the same crop "
        "offsets and flips, and the same layout as the earlier crop"
        f"\ndata wait in training (trainforge default input path, small ViT, batch 64, "
        f"{train_steps[1]} steps after {train_steps[0]} warm-up): {share:.2%} of step time "
        f"({metrics['step_time_s'] * 1000:.0f} ms/step, {metrics['samples_per_s']:,.0f} "
        f"samples/s; target < {TARGET_DATA_WAIT:.0%})"
    )
    return text, {
        "input_pipeline_speedup": rates["trainforge"] / seed_rate,
        "input_pipeline_one_thread_speedup": rates["one_thread"] / seed_rate,
        "input_pipeline_gather_speedup": rates["gather"] / seed_rate,
        "data_wait_share": share,
        "input_transform_max_diff": max_diff,
    }


if __name__ == "__main__":
    print(run()[0])
