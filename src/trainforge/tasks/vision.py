"""Image classification: a ViT on digits, CIFAR-10 or a folder of images.

Loader batches are uint8 images; `to_device` moves them to the device and runs the ViT
guide's augmentation there, batched (crop, flip, normalise), instead of per sample on CPU.
The loss is cross-entropy with label smoothing: -sum(y_smooth * log p),
y_smooth = (1 - α) y + α / K.

Validation steps also count (true, predicted) pairs on the device, so the end-of-run
confusion matrix reuses the last full validation instead of running the validation set
through the model a second time; it recomputes when that validation does not stand for the
final weights (a training step or a weight change since, a subset or several passes, or
several processes each validating a shard), with one pass of the engine's evaluation loop
(`engine.evaluate.evaluate_batches`) in which `step` counts the pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainforge.config.schema import RunConfig
from trainforge.data.sampling import EpochBatch, GatheredEpoch
from trainforge.engine.evaluate import evaluate_batches
from trainforge.engine.task import StepOutput, Task


@dataclass
class ImageClassification(Task):
    model: nn.Module
    train_loader: Any
    val_loader: Any
    augment: nn.Module
    num_train_samples: int
    num_classes: int
    class_names: list[str]
    label_smoothing: float
    channels_last: bool = False
    name: str = "image-classification"
    items_name: str = "samples"
    final_stop: str | None = None  # no closing pass of its own: never set
    # Confusion counts of the validation steps since the last training step, with the
    # number of samples counted and the weights' version counters they were counted at.
    _eval_counts: Tensor | None = field(default=None, repr=False)
    _eval_seen: int = field(default=0, repr=False)
    _eval_versions: tuple[int, ...] = field(default=(), repr=False)
    _augment_device: torch.device | None = field(default=None, repr=False)
    # The train epoch gathered whole (`EpochBatch`), augmented on its device.
    _epoch_augmented: tuple[Any, torch.device, Tensor, Tensor] | None = field(
        default=None, repr=False
    )

    @classmethod
    def from_config(
        cls, config: RunConfig, device: torch.device | None = None
    ) -> ImageClassification:
        from trainforge.data import build_image_data
        from trainforge.models.vit import build_vit

        data = build_image_data(
            config.data,
            batch_size=config.training.per_device_train_batch_size,
            eval_batch_size=config.evaluation.per_device_eval_batch_size,
            seed=config.training.seed,
            device=device,
            accumulation=config.training.gradient_accumulation_steps,
            step_batch=config.training.global_batch_size,
        )
        model = build_vit(
            config.model,
            image_size=data.image_size,
            channels=data.channels,
            num_classes=data.num_classes,
        )
        return cls(
            model=model,
            train_loader=data.train_loader,
            val_loader=data.val_loader,
            augment=data.augment,
            num_train_samples=data.num_train,
            num_classes=data.num_classes,
            class_names=list(data.class_names),
            label_smoothing=config.task.label_smoothing,
            channels_last=config.training.channels_last,
        )

    def to_device(self, batch: Any, device: torch.device, train: bool) -> tuple[Tensor, Tensor]:
        if train and isinstance(batch, EpochBatch):
            images, labels = self._augmented_epoch(batch.epoch, device)
            images, labels = images[batch.rows], labels[batch.rows]
        else:
            images, labels = self._augmented(batch, device, train)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return images, labels

    def _augmented(self, batch: Any, device: torch.device, train: bool) -> tuple[Tensor, Tensor]:
        images, labels, *bits = batch  # train batches carry each sample's random bits
        non_blocking = device.type == "cuda"
        images = images.to(device, non_blocking=non_blocking)
        labels = labels.to(device, non_blocking=non_blocking)
        if self._augment_device != images.device:  # moved once, not per batch
            self.augment.to(images.device)
            self._augment_device = images.device
        images = self.augment(images, train=train, sample_bits=bits[0] if bits else None)
        return images, labels

    def _augmented_epoch(self, epoch: GatheredEpoch, device: torch.device) -> tuple[Tensor, Tensor]:
        """The whole gathered epoch augmented at once, kept while its batches are read: each
        image's crop and flip come from its own bits and the arithmetic is per value, so a
        batch's rows hold the values it would get augmented alone. The per-step data path
        shrinks to two views (the digits job spent about 0.7 ms a step there)."""
        kept = self._epoch_augmented
        if kept is None or kept[0] is not epoch or kept[1] != device:
            self._epoch_augmented = None  # the last epoch's floats go first
            images, labels = self._augmented((epoch.images, epoch.labels, epoch.bits), device, True)
            self._epoch_augmented = kept = (epoch, device, images, labels)
        return kept[2], kept[3]

    def batch_size(self, batch: Any) -> int:
        return int(batch[1].shape[0])

    def step(self, model: nn.Module, batch: tuple[Tensor, Tensor]) -> StepOutput:
        images, labels = batch
        logits = model(images)
        loss = F.cross_entropy(logits.float(), labels, label_smoothing=self.label_smoothing)
        predicted = logits.argmax(dim=1)
        correct = (predicted == labels).sum()
        if getattr(model, "training", True):  # a plain function: no eval counting
            self._eval_counts = None
        else:
            self._count_eval(labels, predicted)
        return StepOutput(loss=loss, weight=int(labels.shape[0]), sums={"correct": correct})

    def metrics(self, loss_sum: float, weight: int, sums: dict[str, float]) -> dict[str, float]:
        return {"loss": loss_sum / weight, "accuracy": sums.get("correct", 0.0) / weight}

    def _count_eval(self, labels: Tensor, predicted: Tensor) -> None:
        size = self.num_classes * self.num_classes
        if self._eval_counts is None:
            self._eval_counts = torch.zeros(size, dtype=torch.long, device=labels.device)
            self._eval_seen = 0
        pairs = labels * self.num_classes + predicted
        self._eval_counts += torch.bincount(pairs, minlength=size)
        self._eval_seen += int(labels.shape[0])
        self._eval_versions = _versions(self.model)

    def _last_eval_counts(self) -> Tensor | None:
        """The last validation's counts when they are those of the whole validation set
        for the current weights, on one process; else None."""
        if self._eval_counts is None or torch.distributed.is_initialized():
            return None
        if self._eval_seen != len(self.val_loader.dataset):
            return None  # a fast-validation subset, or a subset plus a full pass
        return self._eval_counts if self._eval_versions == _versions(self.model) else None

    @torch.no_grad()
    def confusion_matrix(
        self, model: nn.Module, device: torch.device
    ) -> tuple[list[list[int]], list[str]]:
        """Counts over the validation set: rows are true classes, columns predictions."""
        num_classes = len(self.class_names)
        cached = self._last_eval_counts()
        if cached is not None:
            return cached.view(num_classes, num_classes).tolist(), list(self.class_names)
        # One pass of the evaluation loop, in fp32: `step` counts the pairs in eval mode.
        # The counts are taken out after it, so the next validation counts afresh.
        self._eval_counts = None
        evaluate_batches(self, model, self.val_loader, device=device)
        counts, self._eval_counts = self._eval_counts, None
        if counts is None:  # an empty validation set
            counts = torch.zeros(num_classes * num_classes, dtype=torch.long)
        return counts.view(num_classes, num_classes).tolist(), list(self.class_names)


def _versions(model: nn.Module) -> tuple[int, ...]:
    """In-place version counters of the weights: any optimizer step or load changes one."""
    return tuple(p._version for p in model.parameters())
