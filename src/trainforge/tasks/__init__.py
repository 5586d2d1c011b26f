"""Tasks: what the one training loop trains. A task supplies model, batches, loss and metrics."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from trainforge.config.schema import RunConfig
    from trainforge.engine.task import Task


def build_task(config: RunConfig, device: torch.device | None = None) -> Task:
    """The task `config.task.kind` names; `device` lets in-memory data move to it."""
    kind = config.task.kind
    if kind == "image-classification":
        from trainforge.tasks.vision import ImageClassification

        return ImageClassification.from_config(config, device)
    if kind == "causal-lm":
        from trainforge.tasks.causal_lm import CausalLM

        return CausalLM.from_config(config)
    raise AssertionError(f"task {kind} passed validation but has no builder")
