"""The export-format registry's entry type and the built-in formats (`export --format NAME`).

This module owns what `trainforge export` and `trainforge bench-infer` know about a format
before any torch import: its writer (`ExportJob -> list[Result]`, one artifact folder each),
its own options (an `Options` model: `export --option KEY=VALUE`, checked before anything
runs), and the runtimes its artifacts run on, each with the function that loads an artifact
back as a predictor (what `bench-infer` times). The built-ins' named flags (`--opset`,
`--sparsity`, ...) are the old spellings of their options. The `--format` choices,
the pipeline's dispatch and `Artifact.predictor` read these entries. Adding a format is one
file that defines a writer (and, for a new runtime, a predictor loader) and calls
`EXPORT_FORMATS.register(name, ExportFormat(...))`.

Writers and loaders of the built-ins are "module:function" strings imported on use, so
checking `--format` answers before torch loads. `pruned` is written by
`trainforge.export.pruning`, referenced here by name. The registry type is
`trainforge.registry` (catalogue and entry points were considered there).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, model_validator

from trainforge.options import Options
from trainforge.registry import EXPORT_FORMATS, load_object

# (artifact: an `export.artifacts.Artifact`, device "cpu"/"cuda", CPU threads or None) ->
# predictor: float32 array -> array. Artifacts and jobs are typed Any here: the artifacts
# and the job read this module, which names neither (no import circle).
PredictorLoader = Callable[[Any, str, "int | None"], Callable[[Any], Any]]


@dataclass(frozen=True)
class ExportFormat:
    """One export format: how to write it and how its artifacts run."""

    description: str
    # ExportJob -> list[Result], or "module:function" imported on use. A task kind may
    # replace it with its own `write_<format>` method (see `export.kinds`).
    write: str | Callable[[Any], list[Any]]  # (export.job.ExportJob) -> [Result]
    # Runtime written in the artifact's summary.json -> its predictor loader (or its
    # "module:function"); a runtime without one has no predictor here.
    runtimes: Mapping[str, str | PredictorLoader] = field(default_factory=dict)
    options: type[Options] | None = None  # what `--option KEY=VALUE` takes (None: nothing)

    def writer(self) -> Callable[[Any], list[Any]]:
        return load_object(self.write)


def _tensor_name(name: str | None) -> bool:
    return name is None or name.replace("_", "a").replace(".", "a").isalnum()


class GraphOptions(Options):
    """How a model becomes an ONNX graph (onnx, and int8's ONNX model)."""

    opset: int = Field(18, ge=11, le=23, description="ONNX opset (Jetson JetPack 5: 17).")
    exporter: Literal["auto", "dynamo", "torchscript"] = Field(
        "auto",
        description="torch.onnx exporter: auto (dynamo from opset 18, torchscript below), "
        "dynamo or torchscript.",
    )
    input_name: str | None = Field(
        None, description="ONNX input tensor name (default: the task's, e.g. images)."
    )
    output_name: str | None = Field(None, description="ONNX output tensor name (default logits).")

    @model_validator(mode="after")
    def _graph(self) -> GraphOptions:
        if self.exporter == "dynamo" and self.opset < 18:
            raise ValueError("exporter dynamo writes ONNX opset 18 and newer; use torchscript")
        for name in (self.input_name, self.output_name):
            if not _tensor_name(name):
                raise ValueError(f"{name!r} is not a tensor name; use letters, digits and _")
        if self.input_name is not None and self.input_name == self.output_name:
            raise ValueError("input_name and output_name must differ")
        return self


class OnnxOptions(GraphOptions):
    tolerance: float = Field(
        1e-4, gt=0.0, description="Max |ONNX - PyTorch| on the validation samples."
    )


class Int8Options(GraphOptions):
    calibration_batches: int = Field(
        8, ge=1, description="Training batches that calibrate static INT8."
    )


class PrunedOptions(Options):
    sparsity: float = Field(0.5, gt=0.0, lt=1.0, description="Share of weights set to zero.")
    finetune_epochs: float = Field(0.0, ge=0.0, description="Fine-tuning epochs (0: none).")
    finetune_lr: float | None = Field(
        None, gt=0.0, description="Fine-tuning peak learning rate (None: the run's / 10)."
    )


class SafetensorsOptions(Options):
    tolerance: float = Field(
        1e-4,
        gt=0.0,
        description="causal-lm with a merged LoRA adapter: max |merged - adapter| on the "
        "validation set.",
    )


def predictor_loader(runtime: str) -> PredictorLoader | None:
    """The registered loader for artifacts of `runtime`, or None."""
    for _, entry in EXPORT_FORMATS.items():
        if runtime in entry.runtimes:
            return load_object(entry.runtimes[runtime])
    return None


def runtime_names() -> list[str]:
    """Every runtime some registered format can load."""
    return [runtime for _, entry in EXPORT_FORMATS.items() for runtime in entry.runtimes]


EXPORT_FORMATS.register(
    "onnx",
    ExportFormat(
        "model.onnx with a dynamic batch, checked against PyTorch with onnxruntime",
        "trainforge.export.onnx_format:write_onnx",
        {"onnxruntime": "trainforge.export.artifacts:ort_predictor"},
        OnnxOptions,
    ),
)
EXPORT_FORMATS.register(
    "int8",
    ExportFormat(
        "dynamic INT8 Linear layers for PyTorch on the CPU, plus a static QDQ INT8 ONNX model "
        "calibrated on training batches (int8-onnx)",
        "trainforge.export.int8:write_int8",
        {"torch-int8": "trainforge.export.int8:int8_predictor"},
        Int8Options,
    ),
)
EXPORT_FORMATS.register(
    "pruned",
    ExportFormat(
        "global magnitude pruning (sparsity), optionally fine-tuned (finetune_epochs)",
        "trainforge.export.pruning:write_pruned",
        {"torch": "trainforge.export.artifacts:torch_predictor"},
        PrunedOptions,
    ),
)
EXPORT_FORMATS.register(
    "safetensors",
    ExportFormat(
        "the fp32 weights and config alone",
        "trainforge.export.weights:write_safetensors",
        {"torch": "trainforge.export.artifacts:torch_predictor"},
        SafetensorsOptions,
    ),
)
