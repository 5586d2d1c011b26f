"""INT8: dynamic quantization of Linear layers for PyTorch on the CPU, static INT8 for ONNX.

PyTorch: `torch.ao.quantization.quantize_dynamic` (int8 weights, activations quantized per
call; fbgemm/x86 kernels on PCs, qnnpack on ARM boards). torchao was considered, but its int8
configs target GPUs, and the issue asks for CPU inference. torch marks `torch.ao.quantization`
deprecated; it is still the one eager CPU path in torch 2.14, and its warnings are silenced
only around the calls here. The artifact stores int8 weights with their scale and zero point
in safetensors (4x smaller than fp32, and loading never runs code) and rebuilds the
quantized modules from them.

ONNX: onnxruntime's `quantize_static` writes a QDQ model (int8 weights per channel, int8
activations with scales calibrated by min/max on training batches), the format TensorRT
reads for explicit INT8 as well.
"""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from trainforge.errors import UserError
from trainforge.export.artifacts import (
    Artifact,
    ArtifactDir,
    OrtPredictor,
    TorchPredictor,
    require,
)

if TYPE_CHECKING:
    from trainforge.export.job import ExportJob, Result

INT8_FILE = "model.int8.safetensors"
INT8_ONNX_FILE = "model.int8.onnx"
FORMAT_TAG = "trainforge-int8-dynamic-linear"


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantize.*deprecated", category=UserWarning)
        yield


def _dynamic_linear_type() -> type:
    with _quiet():
        from torch.ao.nn.quantized.dynamic import Linear

    return Linear


def quantize_dynamic_int8(model: nn.Module) -> nn.Module:
    """A copy of `model` whose nn.Linear layers run with int8 weights (CPU)."""
    with _quiet():
        return torch.ao.quantization.quantize_dynamic(model.eval(), {nn.Linear}, dtype=torch.qint8)


def save_int8(qmodel: nn.Module, fp32_state: dict[str, torch.Tensor], path: Path) -> list[str]:
    """Write int8 weights + scale + zero point per quantized Linear, fp32 for the rest."""
    linear = _dynamic_linear_type()
    names = [n for n, m in qmodel.named_modules() if isinstance(m, linear)]
    owners = set(names)
    tensors = {
        k: v.detach().contiguous()
        for k, v in fp32_state.items()
        if k.rsplit(".", 1)[0] not in owners
    }
    with _quiet():
        for name in names:
            module = qmodel.get_submodule(name)
            weight = module.weight()
            assert weight.qscheme() == torch.per_tensor_affine, "default dynamic qconfig"
            tensors[f"{name}.weight"] = weight.int_repr().contiguous()
            tensors[f"{name}.weight_scale"] = torch.tensor([weight.q_scale()], dtype=torch.float64)
            tensors[f"{name}.weight_zero_point"] = torch.tensor([weight.q_zero_point()])
            if module.bias() is not None:
                tensors[f"{name}.bias"] = module.bias().detach().contiguous()
    save_file(
        tensors, str(path), metadata={"format": FORMAT_TAG, "quantized_linear": json.dumps(names)}
    )
    return names


def load_int8(model: nn.Module, path: Path) -> nn.Module:
    """Rebuild the dynamically quantized model from an `int8` artifact's weights."""
    with safe_open(str(path), framework="pt") as fh:
        meta = fh.metadata() or {}
    if meta.get("format") != FORMAT_TAG:
        raise UserError(f"{path} is not a trainforge INT8 weights file", "re-run the int8 export")
    names = json.loads(meta["quantized_linear"])
    tensors = load_file(str(path))
    quantized = {f"{n}.{suffix}" for n in names for suffix in ("weight", "bias")}
    plain = {
        k: v
        for k, v in tensors.items()
        if k not in quantized and not k.endswith(("weight_scale", "weight_zero_point"))
    }
    missing, unexpected = model.load_state_dict(plain, strict=False)
    if unexpected or set(missing) - quantized:
        raise UserError(
            f"{path} does not fit the model in its config.yaml", "re-run the int8 export"
        )
    qmodel = quantize_dynamic_int8(model)
    with _quiet():
        for name in names:
            scale = float(tensors[f"{name}.weight_scale"][0])
            zero_point = int(tensors[f"{name}.weight_zero_point"][0])
            values = (tensors[f"{name}.weight"].float() - zero_point) * scale
            weight = torch.quantize_per_tensor(values, scale, zero_point, torch.qint8)
            qmodel.get_submodule(name).set_weight_bias(weight, tensors.get(f"{name}.bias"))
    return qmodel.eval()


def int8_predictor(artifact: Artifact, device: str, threads: int | None) -> TorchPredictor:
    """Runtime `torch-int8` (CPU only): the artifact's model rebuilt from its INT8 weights."""
    if device != "cpu":
        raise UserError(
            f"{artifact.folder}: dynamic INT8 PyTorch models run on the CPU only",
            "benchmark it with --device cpu",
        )
    return TorchPredictor(load_int8(artifact.fresh_model(), artifact.model_file), device)


def quantize_onnx_static(
    fp32_path: Path, out_path: Path, inputs: list[torch.Tensor], input_name: str
) -> bool:
    """Static QDQ INT8 of an ONNX model, calibrated on `inputs`; True if pre-processed."""
    require("onnxruntime")
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter([{input_name: x.numpy()} for x in inputs])

        def get_next(self):
            return next(self.feeds, None)

    prepared = out_path.with_name("prepared.onnx")
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:  # shape inference + graph clean-up, recommended before quantizing
            quant_pre_process(str(fp32_path), str(prepared))
            model_in, pre_processed = prepared, True
        except Exception:
            model_in, pre_processed = fp32_path, False
        quantize_static(
            str(model_in),
            str(out_path),
            Reader(),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
            calibrate_method=CalibrationMethod.MinMax,
            op_types_to_quantize=["MatMul", "Gemm", "Conv"],
        )
    prepared.unlink(missing_ok=True)
    return pre_processed


def write_int8(job: ExportJob) -> list[Result]:
    return [_write_torch_int8(job), _write_onnx_int8(job)]


def _write_torch_int8(job: ExportJob) -> Result:
    from trainforge.export.job import Result

    with ArtifactDir(job.out_root, "int8") as folder:
        model = job.fresh_model()
        qmodel = quantize_dynamic_int8(model)
        names = save_int8(qmodel, model.state_dict(), folder / INT8_FILE)
        job.write_config(folder)
        # Measure the model as it reloads from the file: what a user gets.
        del qmodel
        reloaded = load_int8(job.fresh_model(), folder / INT8_FILE)
        predict = TorchPredictor(reloaded)
        _, metrics = job.evaluate(predict)
        summary = job.summarize(
            folder,
            fmt="int8",
            runtime="torch-int8",
            precision="int8 weights (Linear), fp32 elsewhere; dynamic int8 activations",
            artifact=INT8_FILE,
            predict=predict,
            metrics=metrics,
            quantized_layers=names,
            quantized_engine=torch.backends.quantized.engine,
        )
    return Result(job.out_root / "int8", summary)


def _write_onnx_int8(job: ExportJob) -> Result:
    from trainforge.export.job import Result
    from trainforge.export.onnx_format import to_onnx

    o = job.options.of("int8")
    kind = job.kind_cls
    with ArtifactDir(job.out_root, "int8-onnx") as folder:
        fp32_path = folder / "fp32.onnx"
        input_name, output_name = job.tensor_names("int8")
        to_onnx(
            job.fresh_model(),
            fp32_path,
            kind.example_input(job.info, 2),
            input_name=input_name,
            output_name=output_name,
            opset=o.opset,
            exporter=o.exporter,
        )
        calibration = job.kind.calibration_inputs(o.calibration_batches)
        pre_processed = quantize_onnx_static(
            fp32_path, folder / INT8_ONNX_FILE, calibration, input_name
        )
        fp32_path.unlink()
        predict = OrtPredictor(folder / INT8_ONNX_FILE)
        _, metrics = job.evaluate(predict)
        summary = job.summarize(
            folder,
            fmt="int8",
            runtime="onnxruntime",
            precision="int8 QDQ (MatMul, Gemm, Conv), fp32 elsewhere",
            artifact=INT8_ONNX_FILE,
            predict=predict,
            metrics=metrics,
            opset=o.opset,
            calibration_batches=len(calibration),
            calibration_samples=int(sum(x.shape[0] for x in calibration)),
            calibration_method="minmax",
            pre_processed=pre_processed,
        )
    return Result(job.out_root / "int8-onnx", summary)
