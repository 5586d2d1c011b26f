"""The export-format registry's entry type and the built-in formats (`export --format NAME`).

This module owns what `trainforge export` and `trainforge bench-infer` know about a format
before any torch import: its writer (`ExportJob -> list[Result]`, one artifact folder each),
the task kinds it serves, and the runtimes its artifacts run on, each with the function that
loads an artifact back as a predictor (what `bench-infer` times). The `--format` choices,
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
from typing import Any

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

    def writer(self) -> Callable[[Any], list[Any]]:
        return load_object(self.write)


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
    ),
)
EXPORT_FORMATS.register(
    "int8",
    ExportFormat(
        "dynamic INT8 Linear layers for PyTorch on the CPU, plus a static QDQ INT8 ONNX model "
        "calibrated on training batches (int8-onnx)",
        "trainforge.export.int8:write_int8",
        {"torch-int8": "trainforge.export.int8:int8_predictor"},
    ),
)
EXPORT_FORMATS.register(
    "pruned",
    ExportFormat(
        "global magnitude pruning (--sparsity), optionally fine-tuned (--finetune-epochs)",
        "trainforge.export.pruning:write_pruned",
        {"torch": "trainforge.export.artifacts:torch_predictor"},
    ),
)
EXPORT_FORMATS.register(
    "safetensors",
    ExportFormat(
        "the fp32 weights and config alone",
        "trainforge.export.weights:write_safetensors",
        {"torch": "trainforge.export.artifacts:torch_predictor"},
    ),
)
