"""The contract between the one training loop and a task (vision, language, ...).

A task supplies the model, the loaders, how a loader batch becomes device tensors, the loss,
and the evaluation metrics, and may override the declared hooks (`Task`'s defaults). The
loop never asks which task it runs. What differs by task kind before a task is built (what
the web dialog shows, what `trainforge evaluate` scores, what export writes) is a property of
the kind's registry entry (`tasks.catalog.TaskEntry`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
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
    """What the loop trains. The members without a body are required; the hooks below them
    have defaults, which a task class gets by naming `Task` as its base (the run calls every
    hook on every task: nothing is looked up by name)."""

    name: str
    model: nn.Module
    train_loader: Any
    val_loader: Any
    num_train_samples: int
    items_name: str  # what `weight` counts: "samples" or "tokens"

    def to_device(self, batch: Any, device: torch.device, train: bool) -> Any:
        """Move a loader batch to the device and apply batched on-device transforms."""
        ...

    def batch_size(self, batch: Any) -> int:
        """Samples in a batch (for samples/s)."""
        ...

    def step(self, model: nn.Module, batch: Any) -> StepOutput:
        """Forward pass and loss; used for training and evaluation alike."""
        ...

    def metrics(self, loss_sum: float, weight: int, sums: dict[str, float]) -> dict[str, float]:
        """Final metrics from accumulated sums, e.g. {"loss": ..., "accuracy": ...}."""
        ...

    # ------------------------------------------------- optional hooks, with defaults
    # The held-out test split's loader (`trainforge evaluate` scores it), or None.
    test_loader: Any = None
    # The final model's metrics on the test split, once `save_final` scored it (summary.json).
    test_metrics: dict[str, float] | None = None
    # Its final model evaluation (`save_final`) validates the whole split, so the loop does
    # not validate once more at the end of a finished run.
    validates_at_end: bool = False
    # The signal that cut the task's own closing evaluation short (`save_final`), else None:
    # the run then ends with that signal's exit code although its model is saved.
    final_stop: str | None = None
    # The base model the task's model was built from, as provenance names it (the folder
    # actually loaded where that differs from the config's name), else None.
    base_model: str | None = None

    def save_final(
        self,
        run_dir: Path,
        *,
        model: nn.Module,
        metrics: dict[str, float],
        config_hash: str,
        global_step: int,
    ) -> Path | None:
        """Write the task's own final artifact (e.g. a Hugging Face folder) and return it;
        None (the default): the run writes model.safetensors."""
        return None

    def confusion_matrix(
        self, model: nn.Module, device: torch.device
    ) -> tuple[list[list[int]], list[str]] | None:
        """(matrix, class names) over the validation split for the run report; None (the
        default): the task has no classes."""
        return None

    def evaluate_split(self, model: nn.Module, loader: Any) -> dict[str, float] | None:
        """The task's own metrics on a loader's whole data set (e.g. every prompt decoded);
        None (the default): the loss-and-sums pass (`engine.evaluate.evaluate_batches`)."""
        return None
