"""Export hooks of the image-classification task (the ViT on digits, CIFAR-10, image folders).

The exported model is the pure ViT: float32 images [batch, C, H, W] that were scaled to 0..1
and normalised with the run's per-channel mean and std (the summary records both), logits out.
Validation and calibration batches go through the task's own eval preprocessing, so exported
models see exactly what the trained model saw at validation time.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from trainforge.config.schema import RunConfig


class ImageClassificationExport:
    kind: ClassVar[str] = "image-classification"
    metric: ClassVar[str] = "accuracy"
    input_name: ClassVar[str] = "images"
    output_name: ClassVar[str] = "logits"

    def __init__(self, config: RunConfig) -> None:
        self.config = config

    @cached_property
    def data(self):
        from trainforge.data import build_image_data

        c = self.config
        return build_image_data(
            c.data,
            batch_size=c.training.per_device_train_batch_size,
            eval_batch_size=c.evaluation.per_device_eval_batch_size,
            seed=c.training.seed,
        )

    def model_info(self) -> dict[str, Any]:
        d = self.data
        return {
            "image_size": d.image_size,
            "channels": d.channels,
            "num_classes": d.num_classes,
            "class_names": list(d.class_names),
            "normalize_mean": [float(v) for v in d.augment.mean.flatten()],
            "normalize_std": [float(v) for v in d.augment.std.flatten()],
        }

    @classmethod
    def build_model(cls, config: RunConfig, info: dict[str, Any]) -> nn.Module:
        from trainforge.models.vit import build_vit

        return build_vit(
            config.model,
            image_size=int(info["image_size"]),
            channels=int(info["channels"]),
            num_classes=int(info["num_classes"]),
        )

    @classmethod
    def input_spec(cls, info: dict[str, Any]) -> dict[str, Any]:
        size = int(info["image_size"])
        return {
            "name": cls.input_name,
            "shape": ["batch", int(info["channels"]), size, size],
            "dtype": "float32",
            "preprocess": "pixels / 255, then (x - normalize_mean) / normalize_std per channel",
            "normalize_mean": info["normalize_mean"],
            "normalize_std": info["normalize_std"],
            "output": {"name": cls.output_name, "shape": ["batch", int(info["num_classes"])]},
        }

    @classmethod
    def example_input(cls, info: dict[str, Any], batch_size: int, seed: int = 0) -> Tensor:
        size = int(info["image_size"])
        generator = torch.Generator().manual_seed(seed)
        shape = (batch_size, int(info["channels"]), size, size)
        return torch.randn(shape, generator=generator)

    @cached_property
    def _val(self) -> list[tuple[Tensor, Tensor]]:
        augment = self.data.augment
        return [(augment(images, train=False), labels) for images, labels in self.data.val_loader]

    def val_batches(self) -> list[tuple[Tensor, Tensor]]:
        return self._val

    def calibration_inputs(self, num_batches: int) -> list[Tensor]:
        # The training loader is shuffled from the run seed: the same batches every time.
        augment = self.data.augment
        inputs = []
        for images, *_ in self.data.train_loader:
            if len(inputs) >= num_batches:
                break
            inputs.append(augment(images, train=False))
        return inputs

    def score(self, outputs: np.ndarray, targets: np.ndarray) -> dict[str, float]:
        return {"accuracy": float((outputs.argmax(axis=1) == targets).mean())}

    def finetune_task(self, config: RunConfig, model: nn.Module):
        from trainforge.tasks import build_task

        task = build_task(config)
        task.model = model
        return task
