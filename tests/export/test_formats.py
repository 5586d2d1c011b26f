"""Acceptance of the export formats on a digits ViT trained in the test session.

Numbers are checked twice: in each artifact's summary.json, and again here by reloading the
artifact and predicting the validation set with data built straight from `trainforge.data`.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml
from safetensors import safe_open
from safetensors.torch import load_file

from trainforge.config.schema import RunConfig
from trainforge.data import build_image_data
from trainforge.errors import UserError
from trainforge.export import ExportOptions, export, load_artifact
from trainforge.export.int8 import INT8_FILE, load_int8
from trainforge.export.vision import ImageClassificationExport
from trainforge.models.vit import build_vit

ARTIFACTS = ["onnx", "int8", "int8-onnx", "pruned", "safetensors"]


@pytest.fixture(scope="module")
def val_set(digits_run):
    """Validation batches (normalised images, labels) as the run batches them, all labels,
    and the run's fp32 model."""
    config = RunConfig.model_validate(
        yaml.safe_load((digits_run / "config.resolved.yaml").read_text())
    )
    eval_batch = config.evaluation.per_device_eval_batch_size
    data = build_image_data(config.data, batch_size=64, eval_batch_size=eval_batch, seed=0)
    batches = [(data.augment(x, train=False).numpy(), y.numpy()) for x, y in data.val_loader]
    labels = np.concatenate([y for _, y in batches])
    model = build_vit(config.model, image_size=8, channels=1, num_classes=10)
    model.load_state_dict(load_file(str(digits_run / "model.safetensors")))
    return batches, labels, model.eval()


def predict_batches(predict, batches) -> np.ndarray:
    """Batch by batch as the exporter does: dynamic INT8 scales depend on the batch."""
    return np.concatenate([predict(images) for images, _ in batches])


def accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    return float((logits.argmax(axis=1) == labels).mean())


def torch_predict(model):
    def predict(images: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model(torch.from_numpy(images)).numpy()

    return predict


def test_trained_model_is_a_real_classifier(val_set):
    batches, labels, model = val_set
    assert accuracy(predict_batches(torch_predict(model), batches), labels) >= 0.85


def test_every_format_writes_its_artifact_folder(exported, digits_run):
    assert sorted(exported) == sorted(ARTIFACTS)
    for name, result in exported.items():
        assert result.folder == digits_run / "export" / name
        on_disk = json.loads((result.folder / "summary.json").read_text())
        assert on_disk == result.summary
        for file in on_disk["files"]:
            assert (result.folder / file).is_file(), (name, file)
        assert on_disk["latency_batch1"]["p50_ms"] > 0
        assert on_disk["num_eval_samples"] == 359
    leftovers = [p.name for p in (digits_run / "export").iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_onnx_matches_pytorch_within_1e4(exported, val_set):
    batches, labels, model = val_set
    summary = exported["onnx"].summary
    assert summary["max_abs_diff"] <= 1e-4 and summary["tolerance"] == 1e-4
    artifact = load_artifact(exported["onnx"].folder / "model.onnx")
    ort_out = predict_batches(artifact.predictor(), batches)
    torch_out = predict_batches(torch_predict(model), batches)
    assert np.abs(ort_out - torch_out).max() <= 1e-4
    assert summary["metrics"]["accuracy"] == pytest.approx(accuracy(torch_out, labels))


def test_onnx_has_a_dynamic_batch_axis_and_trtexec_lines(exported):
    import onnx

    model = onnx.load(str(exported["onnx"].folder / "model.onnx"))
    batch = model.graph.input[0].type.tensor_type.shape.dim[0]
    assert batch.dim_param == "batch"
    assert {o.version for o in model.opset_import if o.domain in ("", "ai.onnx")} == {18}
    predict = load_artifact(exported["onnx"].folder).predictor()
    for size in (1, 5, 64):
        assert predict(np.zeros((size, 1, 8, 8), np.float32)).shape == (size, 10)
    trt = exported["onnx"].summary["tensorrt"]
    assert trt["fp16"].startswith("trtexec --onnx=") and "--fp16" in trt["fp16"]
    assert "--int8" in trt["int8"] and "model.int8.onnx" in trt["int8"]
    assert "--minShapes=images:1x1x8x8" in trt["fp16"]


@pytest.mark.parametrize("name", ["int8", "int8-onnx"])
def test_int8_loses_at_most_one_point(exported, val_set, name):
    batches, labels, model = val_set
    summary = exported[name].summary
    reference = accuracy(predict_batches(torch_predict(model), batches), labels)
    predict = load_artifact(exported[name].folder).predictor()
    measured = accuracy(predict_batches(predict, batches), labels)
    assert measured == pytest.approx(summary["metrics"]["accuracy"])
    assert summary["reference_metrics"]["accuracy"] == pytest.approx(reference)
    assert reference - measured <= 0.01 + 1e-9
    assert summary["size_ratio"] < 0.35  # int8 weights: about a quarter of fp32


def test_int8_onnx_is_quantized_and_calibrated(exported):
    import onnx

    model = onnx.load(str(exported["int8-onnx"].folder / "model.int8.onnx"))
    ops = {n.op_type for n in model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    int8_weights = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.INT8]
    assert len(int8_weights) >= 4 * 4  # qkv, proj, 2 MLP layers in each of the 4 blocks
    summary = exported["int8-onnx"].summary
    assert summary["calibration_batches"] == 8 and summary["calibration_samples"] == 8 * 64
    assert "fp32.onnx" not in summary["files"]


def test_int8_torch_file_holds_int8_weights_that_reload_exactly(exported, digits_run):
    folder = exported["int8"].folder
    path = folder / INT8_FILE
    with safe_open(str(path), framework="pt") as fh:
        names = json.loads(fh.metadata()["quantized_linear"])
        qkv = fh.get_tensor("blocks.0.attn.qkv.weight")
    assert "head" in names and "blocks.3.mlp.3" in names and len(names) == 4 * 4 + 1
    assert qkv.dtype == torch.int8
    config = RunConfig.model_validate(yaml.safe_load((folder / "config.yaml").read_text()))
    info = exported["int8"].summary["model"]
    qmodel = load_int8(ImageClassificationExport.build_model(config, info), path)
    assert torch.equal(qmodel.blocks[0].attn.qkv.weight().int_repr(), qkv)
    assert exported["int8"].summary["quantized_layers"] == names


def test_pruning_half_the_weights_with_one_finetune_epoch_loses_at_most_two_points(
    exported, val_set
):
    batches, labels, model = val_set
    result = exported["pruned"]
    summary = result.summary
    assert summary["sparsity_target"] == 0.5
    assert summary["sparsity"] == pytest.approx(0.5, abs=1e-3)
    assert summary["finetune"]["epochs"] == 1 and summary["finetune"]["steps"] == 23
    assert (result.folder / "finetune" / "metrics.jsonl").is_file()
    state = load_file(str(result.folder / "model.safetensors"))
    assert not any(k.endswith(("weight_orig", "weight_mask")) for k in state)
    weights = [state[f"{layer}.weight"] for layer in summary["sparsity_by_layer"]]
    zeros = sum(int((w == 0).sum()) for w in weights)
    assert zeros / sum(w.numel() for w in weights) == pytest.approx(0.5, abs=1e-3)
    reference = accuracy(predict_batches(torch_predict(model), batches), labels)
    measured = accuracy(predict_batches(load_artifact(result.folder).predictor(), batches), labels)
    assert measured == pytest.approx(summary["metrics"]["accuracy"])
    assert reference - measured <= 0.02 + 1e-9


@pytest.mark.parametrize("name", ARTIFACTS)
def test_each_artifact_reloads_and_predicts(exported, val_set, name):
    batches, labels, _ = val_set
    artifact = load_artifact(exported[name].folder)
    predict = artifact.predictor()
    logits = predict_batches(predict, batches)
    assert logits.shape == (len(labels), 10) and np.isfinite(logits).all()
    assert accuracy(logits, labels) == pytest.approx(exported[name].summary["metrics"]["accuracy"])
    assert predict(batches[0][0][:1]).shape == (1, 10)


def test_safetensors_artifact_reproduces_the_source(exported, digits_run):
    state = load_file(str(exported["safetensors"].folder / "model.safetensors"))
    source = load_file(str(digits_run / "model.safetensors"))
    assert state.keys() == source.keys()
    assert all(torch.equal(state[k], source[k]) for k in state)
    assert exported["safetensors"].summary["metric_delta"]["accuracy"] == 0.0


def test_onnx_tolerance_is_enforced_and_leaves_nothing(digits_run, tmp_path):
    options = ExportOptions(output=tmp_path, tolerance=1e-12, exporter="torchscript")
    with pytest.raises(UserError, match=r"differ from PyTorch.*tolerance 1e-12"):
        export(digits_run, ["onnx"], options)
    assert list(tmp_path.iterdir()) == []


def test_torchscript_exporter_also_matches(digits_run, tmp_path):
    options = ExportOptions(output=tmp_path, exporter="torchscript", opset=17, latency_runs=5)
    (result,) = export(digits_run, ["onnx"], options)
    assert result.summary["exporter"] == "torchscript"
    assert result.summary["max_abs_diff"] <= 1e-4
