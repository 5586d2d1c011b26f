"""ONNX as the training-optimisation notes export it: opset 11, tensors named input and output.

The real command on the session's digits run; the file is read back with onnx and run with
onnxruntime under the names the notes use.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from trainforge.errors import UserError
from trainforge.export import ExportOptions
from trainforge.export.options import check_options

ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def test_opset_11_with_the_notes_tensor_names(cli, digits_run, tmp_path):
    # A child: OMP_NUM_THREADS takes effect at a process's start only.
    import onnx
    import onnxruntime

    result = cli(
        "export", str(digits_run), "--format", "onnx", "--opset", "11",
        "--input-name", "input", "--output-name", "output",
        "--output", str(tmp_path), "--latency-runs", "2", env=ONE_THREAD,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    path = tmp_path / "onnx" / "model.onnx"
    model = onnx.load(str(path))
    assert {o.version for o in model.opset_import if o.domain in ("", "ai.onnx")} == {11}
    assert [i.name for i in model.graph.input] == ["input"]
    assert [o.name for o in model.graph.output] == ["output"]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    summary = json.loads((tmp_path / "onnx" / "summary.json").read_text())
    assert summary["opset"] == 11 and summary["exporter"] == "torchscript"
    assert summary["max_abs_diff"] <= 1e-4
    assert summary["input"]["name"] == "input" and summary["input"]["output"]["name"] == "output"
    assert "--minShapes=input:1x" in summary["tensorrt"]["fp16"]
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    images = np.zeros((3, *summary["input"]["shape"][1:]), dtype=np.float32)
    (logits,) = session.run(["output"], {"input": images})
    assert logits.shape == (3, summary["model"]["num_classes"])
    assert "Traceback" not in result.stderr and result.stderr.strip() == ""


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (ExportOptions(opset=10), "from 11 to 23"),
        (ExportOptions(opset=11, exporter="dynamo"), "dynamo writes ONNX opset 18"),
        (ExportOptions(input_name="x y"), "not a tensor name"),
        (ExportOptions(input_name="io", output_name="io"), "both 'io'"),
    ],
)
def test_opset_and_name_errors_say_the_fix(options, message):
    with pytest.raises(UserError, match=message):
        check_options(options)
