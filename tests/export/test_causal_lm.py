"""Causal LM export: a LoRA run (tiny Llama from `models init`) merged into safetensors.

The run is trained by the real engine for a few steps with LoRA on q/v projections; its
best checkpoint holds the adapter. Export merges it and writes a Hugging Face folder that
transformers loads alone, with the same logits as the adapted model.
"""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from safetensors.torch import load_file

from fakes.in_process import run_main
from fakes.tiny_lm import lm_corpus, lm_overrides, tiny_llama_chat  # noqa: F401
from trainforge.config import validate
from trainforge.config.schema import RunConfig
from trainforge.errors import UserError
from trainforge.export import export
from trainforge.hardware import detect
from trainforge.tasks import build_task
from trainforge.train import train


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, tiny_llama_chat, lm_corpus, thread_limit):  # noqa: F811
    out = tmp_path_factory.mktemp("lm-runs")
    sets = {
        "lora.enabled": "true",
        "lora.r": 4,
        "lora.target_modules": "[q_proj, v_proj]",
        "training.max_steps": 12,
        "evaluation.eval_every_epochs": 1,
        "checkpoint.save_best": "true",
        "output.dir": str(out),
        "output.run_name": "lm",
    }
    platform = detect()
    overrides = lm_overrides(tiny_llama_chat, lm_corpus["json"], **sets)
    resolved = validate(None, platform=platform, profile="cpu", overrides=overrides)
    with thread_limit():
        return train(resolved, platform).run_dir


def test_lora_adapter_is_merged_into_plain_safetensors(lora_run):
    from transformers import AutoModelForCausalLM

    (result,) = export(lora_run, ["safetensors"])
    summary = result.summary
    assert result.folder == lora_run / "export" / "safetensors"
    assert summary["task"] == "causal-lm" and summary["lora_merged"] is True
    assert summary["source"] == str(lora_run / "checkpoints" / "best_model" / "model.safetensors")
    assert summary["max_abs_diff"] <= 1e-4
    assert summary["metrics"]["loss"] == pytest.approx(summary["reference_metrics"]["loss"], 1e-4)
    assert json.loads((result.folder / "summary.json").read_text()) == summary

    weights = load_file(str(result.folder / "model.safetensors"))
    assert not any("lora_" in key or "base_model" in key for key in weights)
    merged = AutoModelForCausalLM.from_pretrained(str(result.folder), local_files_only=True)

    config_text = (lora_run / "config.resolved.yaml").read_text()
    config = RunConfig.model_validate(yaml.safe_load(config_text))
    adapted = build_task(config).model
    adapted.load_state_dict(load_file(summary["source"]))
    ids = torch.tensor([[1, 5, 9, 13, 17, 21, 25, 29]])
    with torch.no_grad():
        expected = adapted.eval()(input_ids=ids).logits
        got = merged.eval()(input_ids=ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    plain = build_task(config).model.get_base_model()
    with torch.no_grad():
        assert not torch.allclose(plain.eval()(input_ids=ids).logits, expected, atol=1e-4)


def test_formats_a_causal_lm_does_not_offer_are_refused(lora_run, tmp_path):
    with pytest.raises(UserError, match="format int8 is not available for task causal-lm"):
        export(lora_run, ["int8"], None)


def test_wrong_task_format_through_the_command(lora_run):
    result = run_main("export", str(lora_run), "--format", "onnx")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "format onnx is not available for task causal-lm. use one of: safetensors"
    ]
