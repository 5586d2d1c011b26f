"""Which task kinds can be exported, and what a task kind supplies to the export formats.

Every format (ONNX, INT8, pruning, safetensors) is written against `ExportKind`, not against a
model class: a task kind plugs in by implementing the protocol in its own module and adding
one line to `KINDS`. A kind may also replace a format's writer with a method named
`write_<format>` (the causal LM writes merged LoRA weights as a Hugging Face folder); a kind
whose formats all have their own writers needs only the class attributes and `__init__`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
from torch import Tensor, nn

from trainforge.errors import UserError

if TYPE_CHECKING:
    from trainforge.config.schema import RunConfig
    from trainforge.engine.task import Task

# task.kind -> "module:Class" implementing ExportKind. Imported on use (torch-heavy modules).
KINDS: dict[str, str] = {
    "image-classification": "trainforge.export.vision:ImageClassificationExport",
    "causal-lm": "trainforge.export.causal_lm:CausalLMExport",
}


class ExportKind(Protocol):
    """What the export formats need from a task kind.

    `model_info()` is JSON that, with the run config, rebuilds the model without loading any
    data (`build_model`): artifacts carry it in their summary so they reload anywhere.
    Inputs and outputs are float32 tensors on the CPU, batch first.
    """

    kind: ClassVar[str]
    formats: ClassVar[tuple[str, ...]]  # formats this kind supports
    metric: ClassVar[str]  # the quality number reported per artifact, e.g. "accuracy"
    input_name: ClassVar[str]
    output_name: ClassVar[str]

    def __init__(self, config: RunConfig) -> None: ...

    def model_info(self) -> dict[str, Any]:
        """JSON facts the model builder needs (shapes, class count, preprocessing)."""

    @classmethod
    def build_model(cls, config: RunConfig, info: dict[str, Any]) -> nn.Module:
        """A freshly initialised model of the run's architecture (CPU, fp32)."""

    @classmethod
    def input_spec(cls, info: dict[str, Any]) -> dict[str, Any]:
        """Name, shape (batch axis named "batch"), dtype and preprocessing of the input."""

    @classmethod
    def example_input(cls, info: dict[str, Any], batch_size: int, seed: int = 0) -> Tensor:
        """A random input of the right shape, for tracing and latency."""

    def val_batches(self) -> Sequence[tuple[Tensor, Tensor]]:
        """The validation set as (model input, target) batches, preprocessed."""

    def calibration_inputs(self, num_batches: int) -> list[Tensor]:
        """Model inputs from the first `num_batches` training batches (no augmentation)."""

    def score(self, outputs: np.ndarray, targets: np.ndarray) -> dict[str, float]:
        """Quality metrics of stacked outputs against targets; holds `metric`."""

    def finetune_task(self, config: RunConfig, model: nn.Module) -> Task:
        """The engine task that trains `model` with `config` (for pruning fine-tunes)."""


def kind_class(kind: str, *, source: str) -> type[ExportKind]:
    """The ExportKind class for a task kind, or a UserError naming the kinds export knows."""
    target = KINDS.get(kind)
    if target is None:
        raise UserError(
            f"{source} was trained for task {kind!r}, which export does not support",
            f"export supports runs of task {' or '.join(sorted(KINDS))}",
        )
    module_name, _, class_name = target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def writer_for(kind: ExportKind, fmt: str, default: Callable[..., Any]) -> Callable[..., Any]:
    """The kind's own `write_<format>` method when it has one, else the shared writer."""
    return getattr(kind, f"write_{fmt}", None) or default
