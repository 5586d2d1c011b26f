"""The contract between the one training loop and a task (vision, language, ...).

A task supplies the model, the loaders, how a loader batch becomes device tensors, the loss,
and the evaluation metrics. The loop never asks which task it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor, nn


@dataclass
class StepOutput:
    """What one forward pass returns to the loop.

    `loss` is the mean over the batch's `weight` items (samples, or target tokens); the loop
    weights it by `weight` so that accumulation windows of any shape give the same update
    as one big batch. `sums` are per-batch metric numerators (e.g. correct predictions),
    kept as tensors so the loop never synchronises the device outside logging points.
    """

    loss: Tensor
    weight: int
    sums: dict[str, Tensor] = field(default_factory=dict)


class Task(Protocol):
    name: str
    model: nn.Module
    train_loader: Any
    val_loader: Any
    num_train_samples: int
    items_name: str  # what `weight` counts: "samples" or "tokens"
    # The signal that cut the task's own closing evaluation short (`save_final`), else None:
    # the run then ends with that signal's exit code although its model is saved.
    final_stop: str | None

    def to_device(self, batch: Any, device: torch.device, train: bool) -> Any:
        """Move a loader batch to the device and apply batched on-device transforms."""

    def batch_size(self, batch: Any) -> int:
        """Samples in a batch (for samples/s)."""

    def step(self, model: nn.Module, batch: Any) -> StepOutput:
        """Forward pass and loss; used for training and evaluation alike."""

    def metrics(self, loss_sum: float, weight: int, sums: dict[str, float]) -> dict[str, float]:
        """Final metrics from accumulated sums, e.g. {"loss": ..., "accuracy": ...}."""

    # Optional hooks, looked up with getattr by the run:
    #   save_final(run_dir, *, model, metrics, config_hash, global_step) -> writes the task's
    #       own final artifact (e.g. a Hugging Face folder) instead of model.safetensors;
    #   confusion_matrix(model, device) -> (matrix, class_names) for the run report.
