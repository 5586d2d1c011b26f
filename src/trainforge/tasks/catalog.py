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
    # What differs by kind, read by other packages instead of comparing the kind's name:
    # Its model starts from a Hugging Face base-model folder that the task loads itself
    # (`model.model_name_or_path`): `model.init_from` may name such a folder, `trainforge
    # evaluate` resolves it without creating one, the web dialog asks for it.
    base_model: bool = False
    # `trainforge evaluate --file` scores a TSV/CSV/JSONL file as its validation split.
    scores_files: bool = False
    # Its batches are images (uint8 tensors between loader workers: the doctor's shared
    # memory estimate) and it classifies them (per-class accuracy in the run report).
    images: bool = False
    # The metrics it reports, which `evaluation.metric_for_best_model` may name.
    metrics: tuple[str, ...] = ("loss",)
    # Settings a run of this kind needs besides `task.kind` ("key=value", as `--set` takes
    # them): the web dialog and the guide profile add them.
    settings: tuple[str, ...] = ()

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
        images=True,
        metrics=("loss", "accuracy"),
    ),
)
TASKS.register(
    "causal-lm",
    TaskEntry(
        "Hugging Face causal language model fine-tuning on text records (loss, perplexity)",
        _causal_lm,
        base_model=True,
        scores_files=True,
        metrics=("loss", "accuracy", "perplexity", "per", "wer"),  # accuracy: next-token
        settings=("model.arch=hf", "data.dataset=text"),
    ),
)
