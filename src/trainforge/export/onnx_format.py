"""ONNX export: torch.onnx with a dynamic batch axis, verified with onnxruntime.

The default exporter is torch's `dynamo` one (torch.export + onnxscript), which torch 2.9+
uses by default, for opset 18 and newer; below 18 (`--opset 17` for JetPack 5, the
optimisation notes' `--opset 11`) `auto` takes `torchscript` (the legacy tracer), since
dynamo writes opset 18 whatever it is asked (see `onnx_low_opset`).
The written model is run with onnxruntime on every validation sample and compared with the
fp32 PyTorch outputs; a max absolute difference above the tolerance is an error and leaves no
artifact. The summary carries the `trtexec` commands that build FP16 and INT8 TensorRT
engines from it on a Jetson.

Below opset 18 the dynamo exporter writes opset 18 and converts the model down (onnxscript's
version converter, else onnx's); torch and onnxscript each log a multi-line notice about it.
Those notices are held back during the export (`quiet_opset_notices`) and the written
model's opset is checked instead: a model that did not reach the opset asked for is an error
that says so, never a summary naming the wrong opset.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from trainforge.errors import UserError
from trainforge.export.artifacts import ArtifactDir, OrtPredictor, require
from trainforge.export.onnx_low_opset import attention_symbolic, exporter_for

if TYPE_CHECKING:
    from trainforge.export.job import ExportJob, Result

ONNX_FILE = "model.onnx"
# Above this many bytes of weights the graph keeps them in an external file (protobuf: 2 GiB).
EXTERNAL_DATA_BYTES = 1 << 30
# The loggers of the opset-conversion notices (see the module docstring).
OPSET_NOTICE_LOGGERS = ("torch.onnx._internal.exporter._compat", "onnxscript.version_converter")


@contextlib.contextmanager
def quiet_opset_notices() -> Iterator[None]:
    """Hold back the exporters' opset-conversion notices (warnings below ERROR)."""
    loggers = [logging.getLogger(name) for name in OPSET_NOTICE_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def written_opset(path: Path) -> int | None:
    """The default-domain opset the ONNX file at `path` imports (None when it names none)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    return versions[0] if versions else None


def to_onnx(
    model: nn.Module,
    path: Path,
    example: torch.Tensor,
    *,
    input_name: str,
    output_name: str,
    opset: int,
    exporter: str,
) -> None:
    """Export `model` (eval mode) to `path` with the first input axis named `batch`;
    `exporter` auto picks by opset (`onnx_low_opset.exporter_for`)."""
    require("onnx")
    exporter = exporter_for(opset, exporter)
    kwargs: dict[str, Any] = {
        "input_names": [input_name],
        "output_names": [output_name],
        "opset_version": opset,
    }
    if exporter == "dynamo":
        require("onnxscript")
        weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        kwargs.update(
            dynamo=True,
            dynamic_shapes=({0: torch.export.Dim("batch")},),
            external_data=weight_bytes > EXTERNAL_DATA_BYTES,
            verbose=False,
        )
    else:
        kwargs.update(
            dynamo=False, dynamic_axes={input_name: {0: "batch"}, output_name: {0: "batch"}}
        )
    # Batch 2 while tracing: torch.export specialises a size-1 axis to a constant.
    example = (
        example[:2] if example.shape[0] >= 2 else example.repeat(2, *[1] * (example.dim() - 1))
    )
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured), warnings.catch_warnings(), quiet_opset_notices():
            warnings.simplefilter("ignore")
            with attention_symbolic(opset):
                torch.onnx.export(model.eval(), (example,), str(path), **kwargs)
    except Exception as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        other = other_exporter(exporter)
        raise UserError(
            f"ONNX export failed ({exporter} exporter, opset {opset}): {first}",
            f"try --exporter {other} or another --opset",
        ) from None
    found = written_opset(path)
    if found != opset:
        raise UserError(
            f"ONNX export ({exporter} exporter) wrote opset {found}, not the --opset {opset} "
            "asked for: the conversion to that opset did not succeed",
            f"use --opset {found}, or try --exporter {other_exporter(exporter)}",
        )


def other_exporter(exporter: str) -> str:
    return "torchscript" if exporter == "dynamo" else "dynamo"


def trtexec_commands(onnx_path: Path, int8_path: Path, spec: dict[str, Any]) -> dict[str, str]:
    """trtexec lines for FP16 (from the fp32 model) and INT8 (from the QDQ model) engines."""
    dims = [str(d) for d in spec["shape"][1:]]

    def shape(batch: int) -> str:
        return f"{spec['name']}:{'x'.join([str(batch), *dims])}"

    shapes = f"--minShapes={shape(1)} --optShapes={shape(32)} --maxShapes={shape(256)}"
    return {
        "fp16": f"trtexec --onnx={onnx_path} --fp16 {shapes} "
        f"--saveEngine={onnx_path.with_suffix('.fp16.engine')}",
        "int8": f"trtexec --onnx={int8_path} --int8 --fp16 {shapes} "
        f"--saveEngine={onnx_path.with_suffix('.int8.engine')}",
    }


def write_onnx(job: ExportJob) -> list[Result]:
    from trainforge.export.job import Result

    o = job.options.of("onnx")
    kind = job.kind_cls
    with ArtifactDir(job.out_root, "onnx") as folder:
        path = folder / ONNX_FILE
        input_name, output_name = job.tensor_names("onnx")
        to_onnx(
            job.fresh_model(),
            path,
            kind.example_input(job.info, 2),
            input_name=input_name,
            output_name=output_name,
            opset=o.opset,
            exporter=o.exporter,
        )
        predict = OrtPredictor(path)
        outputs, metrics = job.evaluate(predict)
        max_diff = float(np.abs(outputs - job.reference.outputs).max())
        if not max_diff <= o.tolerance:
            raise UserError(
                f"ONNX outputs differ from PyTorch by up to {max_diff:.2e} on "
                f"{len(outputs)} validation samples (tolerance {o.tolerance:g})",
                "try --exporter torchscript or another --opset, or raise --tolerance",
            )
        final = job.out_root / "onnx" / ONNX_FILE
        int8_final = job.out_root / "int8-onnx" / "model.int8.onnx"
        summary = job.summarize(
            folder,
            fmt="onnx",
            runtime="onnxruntime",
            precision="fp32",
            artifact=ONNX_FILE,
            predict=predict,
            metrics=metrics,
            opset=o.opset,
            exporter=exporter_for(o.opset, o.exporter),
            max_abs_diff=max_diff,
            tolerance=o.tolerance,
            tensorrt=trtexec_commands(final, int8_final, job.input_spec()),
        )
    return [Result(job.out_root / "onnx", summary)]
