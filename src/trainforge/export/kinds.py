"""What a task kind supplies to the export formats, and which formats serve which kind.

Every format (ONNX, INT8, pruning, safetensors, and any registered in
`trainforge.registry.EXPORT_FORMATS`) is written against `ExportKind`, not against a model
class: a task kind plugs in by implementing the protocol in its own module and naming that
class as the `export` of its `trainforge.registry.TASKS` entry (the built-in kinds are
attached here, `BUILT_IN`, so the task catalogue names nothing of this package). A kind serves every
registered format unless it narrows them with a `formats` class attribute, and may replace a
format's writer with a method named `write_<format>` (the causal LM writes merged LoRA
weights as a Hugging Face folder); a kind whose formats all have their own writers needs only
the class attributes and `__init__`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
from torch import Tensor, nn

from trainforge.errors import UserError
from trainforge.registry import EXPORT_FORMATS, TASKS, load_object

if TYPE_CHECKING:
    from trainforge.config.schema import RunConfig
    from trainforge.engine.task import Task


class ExportKind(Protocol):
    """What the export formats need from a task kind.

    `model_info()` is JSON that, with the run config, rebuilds the model without loading any
    data (`build_model`): artifacts carry it in their summary so they reload anywhere.
    Inputs and outputs are float32 tensors on the CPU, batch first.
    """

    kind: ClassVar[str]
    # Optional `formats: ClassVar[tuple[str, ...]]`: the only formats this kind supports
    # (absent: every registered format).
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


# The built-in task kinds' export kinds, attached here so that the task catalogue names
# nothing of the export package above it. A plugin task kind names its class in its own
# `TaskEntry(export=...)`.
BUILT_IN: dict[str, str] = {
    "image-classification": "trainforge.export.vision:ImageClassificationExport",
    "causal-lm": "trainforge.export.causal_lm:CausalLMExport",
}


def _export_of(kind: str) -> Any:
    entry = TASKS.find(kind)
    if entry is not None and entry.export is not None:
        return entry.export_kind()
    return load_object(BUILT_IN[kind]) if entry is not None and kind in BUILT_IN else None


def kind_class(kind: str, *, source: str) -> type[ExportKind]:
    """The ExportKind class of a task kind, or a UserError naming the kinds export knows."""
    cls = _export_of(kind)
    if cls is None:
        exportable = [name for name, e in TASKS.items() if e.export is not None or name in BUILT_IN]
        raise UserError(
            f"{source} was trained for task {kind!r}, which export does not support",
            f"export supports runs of task {' or '.join(sorted(exportable))}",
        )
    return cls


def formats_of(kind: ExportKind | type[ExportKind]) -> list[str]:
    """The registered formats `kind` can be exported to."""
    narrowed = getattr(kind, "formats", None)
    return [name for name in EXPORT_FORMATS.names() if narrowed is None or name in narrowed]


def writer_for(kind: ExportKind, fmt: str, default: Callable[..., Any]) -> Callable[..., Any]:
    """The kind's own `write_<format>` method when it has one, else the shared writer."""
    return getattr(kind, f"write_{fmt}", None) or default
