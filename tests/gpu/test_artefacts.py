"""What a GPU run leaves behind: an ONNX file exported from a CUDA model that onnxruntime
runs to the same logits, a LoRA fine-tune of a Hugging Face model in bf16, and the G2P config
with PER/WER after a fixed time budget."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from fakes.cuda_runs import REPO, train_run
from fakes.tiny_lm import lm_overrides
from trainforge.export.onnx_format import to_onnx
from trainforge.models.vit import VisionTransformer

pytestmark = pytest.mark.gpu

G2P_CONFIG = REPO / "config" / "g2p_cmudict.yaml"
G2P_BUDGET_S = 60  # make bench-gpu trains for longer; docs/performance.md for 8 minutes


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_onnx_from_a_cuda_model_gives_the_same_logits_in_onnxruntime(tmp_path, cuda, exporter):
    import onnxruntime

    torch.manual_seed(0)
    model = VisionTransformer(
        image_size=32, channels=3, num_classes=10, patch_size=4, embedding_dim=64,
        num_layers=2, num_heads=4, mlp_size=128, attention_dropout=0.0, mlp_dropout=0.0,
    ).to(cuda).eval()  # fmt: skip
    images = torch.randn(4, 3, 32, 32, device=cuda)
    path = tmp_path / "model.onnx"
    to_onnx(model, path, images, input_name="images", output_name="logits", opset=18,
            exporter=exporter)  # fmt: skip
    # The reference is the same weights on the CPU in fp32: cuDNN may run the patch
    # convolution in TF32 on the GPU, which is not what the exported graph is checked for.
    with torch.no_grad():
        expected = copy.deepcopy(model).cpu()(images.cpu()).numpy()
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (logits,) = session.run(None, {"images": images.cpu().numpy()})
    np.testing.assert_allclose(logits, expected, rtol=1e-3, atol=1e-4)


def test_cli_export_of_a_cuda_trained_run_checks_itself_with_onnxruntime(cli, tmp_path):
    train_run(tmp_path, "trained", **{"training.max_steps": 20, "training.precision": "bf16"})
    done = cli("export", str(tmp_path / "trained"), "--format", "onnx", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "trained" / "export" / "onnx" / "model.onnx").is_file()


def test_lora_fine_tune_of_a_hugging_face_model_in_bf16(tmp_path, tiny_gpt2, lm_corpus):
    lora = {"lora.enabled": "true", "lora.r": 4, "training.precision": "bf16",
            "training.max_steps": 30}  # fmt: skip
    sets = dict(item.split("=", 1) for item in lm_overrides(tiny_gpt2, lm_corpus["json"], **lora))
    summary, facts = train_run(tmp_path, "lora", config=None, **sets)
    assert summary.global_step == 30 and facts["precision"] == "bf16"
    assert facts["device"].startswith("cuda")
    assert facts["samples_per_s"] > 0 and summary.stop_reason == "finished"


def test_g2p_config_reports_per_and_wer_after_a_time_budget(tmp_path):
    sets = {
        "model.model_name_or_path": str(tmp_path / "g2p-small"),  # created on first use
        "training.max_training_hours": G2P_BUDGET_S / 3600,
        "training.precision": "bf16",
        "training.per_device_train_batch_size": 256,
        "checkpoint.save_steps": "null",
    }
    _, facts = train_run(tmp_path, "g2p", config=G2P_CONFIG, **sets)
    test = facts["test_metrics"]
    assert test is not None, facts
    assert 0 <= test["per"] < 0.6 and 0 <= test["wer"] <= 1
    print(f"G2P after {G2P_BUDGET_S} s: PER {test['per']:.3f} WER {test['wer']:.3f}")
