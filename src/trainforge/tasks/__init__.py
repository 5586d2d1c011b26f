"""Tasks: what the one training loop trains. A task supplies model, batches, loss and metrics.

Task kinds are registered in `trainforge.registry.TASKS` (built-ins: `tasks.catalog`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainforge.registry import TASKS

if TYPE_CHECKING:
    import torch

    from trainforge.config.schema import RunConfig
    from trainforge.engine.task import Task


def build_task(config: RunConfig, device: torch.device | None = None) -> Task:
    """The task `config.task.kind` names; `device` lets in-memory data move to it."""
    return TASKS.get(config.task.kind).build_task(config, device)
