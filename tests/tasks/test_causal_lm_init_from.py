"""causal-lm runs that start from another run: its output model is a base model, and a LoRA
run's adapter goes on training in a new run (`model.init_from`)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from fakes.tiny_lm import lm_overrides
from trainforge.config import load, validate
from trainforge.errors import UserError
from trainforge.hardware import detect
from trainforge.run import init_from
from trainforge.tasks import build_task
from trainforge.train import train

pytestmark = pytest.mark.usefixtures("single_thread")
QUIET = {"hardware.telemetry": "false", "evaluation.eval_every_epochs": "null"}


def _config(model, corpus, **sets):
    return load(None, profile="cpu", overrides=lm_overrides(model, corpus, **QUIET, **sets)).config


def _train(model, corpus, out, name, **sets):
    sets = {**QUIET, "output.dir": out, "output.run_name": name, **sets}
    platform = detect()
    resolved = validate(
        None, platform=platform, profile="cpu", overrides=lm_overrides(model, corpus, **sets)
    )
    return train(resolved, platform)


def test_a_run_output_model_is_a_base_model(tmp_path, tiny_gpt2, lm_corpus, capsys) -> None:
    """A full fine-tune for 3 steps; a new run with init_from=that run loads its model/
    folder (weights and tokenizer) as the base, not model.model_name_or_path, and trains."""
    corpus = lm_corpus["json"]
    _train(tiny_gpt2, corpus, tmp_path, "F", **{"training.max_steps": 3})
    trained = load_file(str(tmp_path / "F" / "model" / "model.safetensors"))
    task = build_task(_config(tiny_gpt2, corpus, **{"model.init_from": tmp_path / "F"}))
    assert f"init_from {tmp_path / 'F'}: base model {tmp_path / 'F' / 'model'}" in (
        capsys.readouterr().out
    )
    state = task.model.state_dict()
    assert all(state[k].equal(v) for k, v in trained.items() if k in state)
    original = load_file(str(tiny_gpt2 / "model.safetensors"))
    assert any(not original[k].equal(trained[k]) for k in trained if k in original)
    sets = {"training.max_steps": 2, "model.init_from": tmp_path / "F"}
    summary = _train(tiny_gpt2, corpus, tmp_path, "G", **sets)
    assert summary.global_step == 2 and (tmp_path / "G" / "model").is_dir()


def test_a_lora_run_continues_its_adapter(tmp_path, tiny_gpt2, lm_corpus) -> None:
    """LoRA for 3 steps; a new LoRA run from it starts with exactly that adapter (not peft's
    zero-initialised B), trains it on, and other LoRA shapes are refused in one line."""
    corpus, lora = lm_corpus["json"], {"lora.enabled": True, "lora.r": 4}
    _train(tiny_gpt2, corpus, tmp_path, "L", **lora, **{"training.max_steps": 3})
    saved = load_file(str(tmp_path / "L" / "adapter" / "adapter_model.safetensors"))
    assert any(k.endswith("lora_B.weight") and v.abs().sum() > 0 for k, v in saved.items())

    config = _config(tiny_gpt2, corpus, **lora, **{"model.init_from": tmp_path / "L"})
    source = init_from.locate(config)
    assert (source.kind, source.path) == ("LoRA adapter", tmp_path / "L" / "adapter")
    task = build_task(config)
    init_from.prepare(task.model, config, source)
    from peft import get_peft_model_state_dict

    current = get_peft_model_state_dict(task.model)
    assert current.keys() == saved.keys()
    assert all(torch.equal(current[k], saved[k]) for k in saved)

    summary = _train(
        tiny_gpt2, corpus, tmp_path, "M", **lora,
        **{"training.max_steps": 2, "model.init_from": tmp_path / "L"},
    )  # fmt: skip
    assert summary.global_step == 2 and (tmp_path / "M" / "adapter").is_dir()
    wider = _config(tiny_gpt2, corpus, **{"lora.enabled": True, "lora.r": 8},
                    **{"model.init_from": tmp_path / "L"})  # fmt: skip
    with pytest.raises(UserError, match=r"lora_A.weight is \(4, \d+\) there, \(8, \d+\) here"):
        init_from.prepare(build_task(wider).model, wider, init_from.locate(wider))
