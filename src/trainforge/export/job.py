"""What every export writer receives: the `ExportJob` (source, task kind, reference numbers,
the summary fields all artifacts share) and the `Result` it returns.

The fp32 PyTorch model of the source is the reference: its validation outputs, metric and
weights size are measured once, and every artifact reports its own numbers next to them
(accuracy delta, size ratio, max output difference for ONNX). Writers (`onnx_format`,
`int8`, `pruning`, `weights`, a task kind's `write_<format>`) import this module; it imports
none of them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from trainforge.errors import UserError
from trainforge.export.artifacts import CONFIG, TorchPredictor, folder_size, write_summary
from trainforge.export.kinds import kind_class
from trainforge.export.measure import Latency, measure_latency, predict_all, targets_of
from trainforge.export.options import ExportOptions
from trainforge.export.source import Source
from trainforge.runfolder import SUMMARY, RunFolder


@dataclass
class Reference:
    outputs: np.ndarray
    targets: np.ndarray
    metrics: dict[str, float]
    size_bytes: int


@dataclass
class Result:
    folder: Path
    summary: dict[str, Any] = field(default_factory=dict)


class ExportJob:
    """The source, its task kind, the reference numbers and shared summary fields."""

    def __init__(self, source: Source, options: ExportOptions) -> None:
        self.source = source
        self.options = options
        self.kind_cls = kind_class(source.config.task.kind, source=str(source.given))
        self.kind = self.kind_cls(source.config)
        self.out_root = options.output or RunFolder(source.run_dir).export_dir

    @cached_property
    def info(self) -> dict[str, Any]:
        return self.kind.model_info()

    def tensor_names(self, fmt: str = "onnx") -> tuple[str, str]:
        """(input, output) tensor names of `fmt`'s ONNX graph: its input_name/output_name
        options, else the task's own."""
        o, kind = self.options.of(fmt), self.kind_cls
        given = getattr(o, "input_name", None), getattr(o, "output_name", None)
        return given[0] or kind.input_name, given[1] or kind.output_name

    def input_spec(self) -> dict[str, Any]:
        """The task's input spec with the tensor names this export uses."""
        spec = dict(self.kind_cls.input_spec(self.info))
        name, output = self.tensor_names()
        spec["name"] = name
        if isinstance(spec.get("output"), dict):
            spec["output"] = {**spec["output"], "name": output}
        return spec

    def fresh_model(self) -> nn.Module:
        """The source's fp32 model on the CPU in eval mode (a new copy on every call)."""
        model = self.kind_cls.build_model(self.source.config, self.info)
        try:
            model.load_state_dict(self.source.state_dict)
        except RuntimeError as err:
            detail = " ".join(str(err).split())[:200]
            raise UserError(
                f"weights {self.source.weights} do not fit the model in its config: {detail}",
                "export a checkpoint together with the config it was trained with",
            ) from None
        return model.eval()

    @cached_property
    def reference(self) -> Reference:
        batches = self.kind.val_batches()
        outputs = predict_all(TorchPredictor(self.fresh_model()), batches)
        targets = targets_of(batches)
        return Reference(
            outputs, targets, self.kind.score(outputs, targets), self.source.weights.stat().st_size
        )

    def evaluate(self, predict) -> tuple[np.ndarray, dict[str, float]]:
        outputs = predict_all(predict, self.kind.val_batches())
        return outputs, self.kind.score(outputs, self.reference.targets)

    def latency(self, predict) -> Latency:
        inputs = self.kind_cls.example_input(self.info, 1).numpy()
        return measure_latency(predict, inputs, warmup=10, runs=self.options.latency_runs)

    def write_config(self, folder: Path) -> None:
        (folder / CONFIG).write_text(self.source.config_yaml, encoding="utf-8")

    def summarize(
        self,
        folder: Path,
        *,
        fmt: str,
        runtime: str,
        precision: str,
        artifact: str,
        predict,
        metrics: dict[str, float],
        **extra: Any,
    ) -> dict[str, Any]:
        """The shared summary fields plus `extra`; written to folder/summary.json."""
        from trainforge.run.recipe import config_hash

        files = sorted(p.name for p in folder.iterdir() if p.is_file())
        size = folder_size(folder, [f for f in files if f != CONFIG])
        ref = self.reference
        summary = {
            "format": fmt,
            "runtime": runtime,
            "precision": precision,
            "artifact": artifact,
            "files": [*files, SUMMARY],
            "task": self.kind.kind,
            "source": str(self.source.weights),
            "config_hash": config_hash(self.source.config),
            "model": self.info,
            "input": self.input_spec(),
            "metric": self.kind.metric,
            "metrics": metrics,
            "reference_metrics": ref.metrics,
            "metric_delta": {k: v - ref.metrics[k] for k, v in metrics.items() if k in ref.metrics},
            "num_eval_samples": len(ref.targets),
            "size_bytes": size,
            "reference_size_bytes": ref.size_bytes,
            "size_ratio": size / ref.size_bytes,
            "latency_batch1": self.latency(predict).as_dict(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "versions": _versions(),
            **extra,
        }
        write_summary(folder, summary)
        return summary


def _versions() -> dict[str, str]:
    versions = {"torch": torch.__version__}
    for name in ("onnx", "onnxruntime", "onnxscript"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        versions[name] = str(getattr(module, "__version__", "?"))
    return versions
