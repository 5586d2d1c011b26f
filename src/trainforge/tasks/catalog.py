"""The task registry's entry type and the built-in task kinds (`task.kind` in the config).

This module owns what trainforge knows about a task kind before building it: a one-line
description (schema, docs, web dialog), its builder (`RunConfig, device -> Task`, the object
the one training loop trains) and, for a plugin kind, its export kind (what `trainforge
export` needs from it, a `trainforge.export.kinds.ExportKind`); the built-in kinds' export
kinds are attached by `trainforge.export.kinds`, so this module names nothing above it.
Adding a task kind is one file that defines the task and calls
`TASKS.register(name, TaskEntry(...))`.

Builders are imported on use, so reading the names (config validation) imports no torch.
The registry type is `trainforge.registry` (catalogue and entry points were considered
there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainforge.registry import TASKS, load_object

if TYPE_CHECKING:
    import torch

    from trainforge.config.schema import RunConfig
    from trainforge.engine.task import Task


@dataclass(frozen=True)
class TaskEntry:
    """One task kind: how to build it and how to export what it trained."""

    description: str
    # (config, device or None) -> Task, or "module:function" imported on use.
    build: str | Callable[[RunConfig, torch.device | None], Task]
    # A plugin kind's ExportKind class (or "module:Class"); None: the export package's own
    # (`trainforge.export.kinds.BUILT_IN`, the built-in kinds), else not exported.
    export: str | type | None = None

    def build_task(self, config: RunConfig, device: torch.device | None) -> Task:
        return load_object(self.build)(config, device)

    def export_kind(self) -> Any:
        """The ExportKind class, or None."""
        return None if self.export is None else load_object(self.export)


def _image_classification(config: RunConfig, device: torch.device | None) -> Task:
    from trainforge.tasks.vision import ImageClassification

    return ImageClassification.from_config(config, device)


def _causal_lm(config: RunConfig, device: torch.device | None) -> Task:
    from trainforge.tasks.causal_lm import CausalLM

    return CausalLM.from_config(config)


TASKS.register(
    "image-classification",
    TaskEntry(
        "a ViT classifying images of an image dataset (cross-entropy, accuracy)",
        _image_classification,
    ),
)
TASKS.register(
    "causal-lm",
    TaskEntry(
        "Hugging Face causal language model fine-tuning on text records (loss, perplexity)",
        _causal_lm,
    ),
)
