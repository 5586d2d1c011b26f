"""Image classification: a ViT on digits, CIFAR-10 or a folder of images.

Loader batches are uint8 images; `to_device` moves them to the device and runs the ViT
guide's augmentation there, batched (crop, flip, normalise), instead of per sample on CPU.
The loss is cross-entropy with label smoothing: -sum(y_smooth * log p),
y_smooth = (1 - α) y + α / K.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainforge.config.schema import RunConfig
from trainforge.engine.task import StepOutput


@dataclass
class ImageClassification:
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

    @classmethod
    def from_config(
        cls, config: RunConfig, device: torch.device | None = None
    ) -> ImageClassification:
        from trainforge.data import build_image_data
        from trainforge.models import build_vit

        data = build_image_data(
            config.data,
            batch_size=config.training.per_device_train_batch_size,
            eval_batch_size=config.evaluation.per_device_eval_batch_size,
            seed=config.training.seed,
            device=device,
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
        images, labels = batch
        non_blocking = device.type == "cuda"
        images = images.to(device, non_blocking=non_blocking)
        labels = labels.to(device, non_blocking=non_blocking)
        self.augment.to(device)
        images = self.augment(images, train=train)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return images, labels

    def batch_size(self, batch: Any) -> int:
        return int(batch[1].shape[0])

    def step(self, model: nn.Module, batch: tuple[Tensor, Tensor]) -> StepOutput:
        images, labels = batch
        logits = model(images)
        loss = F.cross_entropy(logits.float(), labels, label_smoothing=self.label_smoothing)
        correct = (logits.argmax(dim=1) == labels).sum()
        return StepOutput(loss=loss, weight=int(labels.shape[0]), sums={"correct": correct})

    def metrics(self, loss_sum: float, weight: int, sums: dict[str, float]) -> dict[str, float]:
        return {"loss": loss_sum / weight, "accuracy": sums.get("correct", 0.0) / weight}

    @torch.no_grad()
    def confusion_matrix(
        self, model: nn.Module, device: torch.device
    ) -> tuple[list[list[int]], list[str]]:
        """Counts over the validation set: rows are true classes, columns predictions."""
        num_classes = len(self.class_names)
        counts = torch.zeros(num_classes * num_classes, dtype=torch.long, device=device)
        was_training = model.training
        model.eval()
        for raw in self.val_loader:
            images, labels = self.to_device(raw, device, False)
            predicted = model(images).argmax(dim=1)
            counts += torch.bincount(labels * num_classes + predicted, minlength=counts.numel())
        model.train(was_training)
        return counts.view(num_classes, num_classes).tolist(), list(self.class_names)
