"""Hugging Face model folders: `models init` output, listing, output-name rules, offline loads,
and the base model created on demand from `model.init_arch`."""

from __future__ import annotations

import json

import pytest

from fakes.tiny_lm import lm_config, make_model
from trainforge.errors import UserError
from trainforge.models import hf


def test_init_writes_a_save_pretrained_folder(tiny_gpt2, tiny_llama_chat):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for folder, arch, tied in ((tiny_gpt2, "gpt2", True), (tiny_llama_chat, "llama", False)):
        names = {p.name for p in folder.iterdir()}
        assert {"config.json", "model.safetensors", "tokenizer.json", SUMMARY} <= names
        made = json.loads((folder / SUMMARY).read_text())
        assert made["arch"] == arch and made["size"] == "tiny"
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        assert model.config.vocab_size == len(tokenizer) < 600
        assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 64
        shares = model.get_output_embeddings().weight is model.get_input_embeddings().weight
        assert shares is tied
    chat = AutoTokenizer.from_pretrained(tiny_llama_chat, local_files_only=True)
    text = chat.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                    add_generation_prompt=True)  # fmt: skip
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert chat.eos_token == "<|im_end|>"


SUMMARY = hf.SUMMARY_FILE


def test_init_is_reproducible_and_refuses_to_overwrite(tmp_path, lm_corpus):
    from safetensors.torch import load_file

    a = make_model(tmp_path / "a", "gpt2", False, [lm_corpus["json"]])
    b = make_model(tmp_path / "b", "gpt2", False, [lm_corpus["json"]])
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert all((wa[k] == wb[k]).all() for k in wa)
    with pytest.raises(UserError, match="already exists"):
        make_model(a, "gpt2", False, [lm_corpus["json"]])
    from trainforge.models.hf_init import init_model

    with pytest.raises(UserError, match="--arch 'gpt5' is not supported"):
        init_model("x", arch="gpt5", size="tiny", corpus=[lm_corpus["json"]], models_dir=tmp_path)


def test_list_reports_architecture_parameters_and_size(tmp_path, lm_corpus):
    make_model(tmp_path / "tiny-llama", "llama", False, [lm_corpus["tsv"]])
    (tmp_path / "not-a-model").mkdir()
    (tmp_path / ".tmp-half-written").mkdir()
    [info] = hf.list_models(tmp_path)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(info.path, local_files_only=True)
    assert (info.name, info.kind, info.arch) == ("tiny-llama", "model", "LlamaForCausalLM")
    assert info.num_parameters == sum(p.numel() for p in model.parameters())
    assert info.size_bytes > (info.path / "model.safetensors").stat().st_size
    assert hf.human_bytes(3 * 1024 * 1024) == "3.0 MiB"


@pytest.mark.parametrize("name", ["../up", "a/b", ".hidden", " ", "a\\b"])
def test_output_names_must_be_plain(tmp_path, name):
    with pytest.raises(UserError, match="not a plain folder name"):
        hf.output_dir(tmp_path, name, overwrite=False)


def test_existing_output_needs_overwrite(tmp_path):
    (tmp_path / "taken").mkdir()
    with pytest.raises(UserError, match="with --overwrite"):
        hf.output_dir(tmp_path, "taken", overwrite=False)
    assert hf.output_dir(tmp_path, "taken", overwrite=True) == tmp_path / "taken"


def test_staged_folder_leaves_nothing_on_failure(tmp_path):
    dest = tmp_path / "out"
    with pytest.raises(RuntimeError), hf.staged_folder(dest) as tmp:
        (tmp / "half").write_text("x")
        raise RuntimeError("disk full")
    assert list(tmp_path.iterdir()) == []


def test_missing_or_foreign_folders_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="no such folder") as info:
        hf.check_model_dir(tmp_path / "absent")
    assert "trainforge models init absent" in str(info.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"no config\.json"):
        hf.check_model_dir(tmp_path / "empty")
    assert hf.resolve_model_dir("name", tmp_path) == tmp_path / "name"
    assert hf.resolve_model_dir("models/x", tmp_path).as_posix() == "models/x"


def test_base_model_is_created_from_init_arch_when_missing(tmp_path, lm_corpus):
    from trainforge.models.base_model import resolve_base_model

    target = tmp_path / "models" / "g2p-base"
    config = lm_config(target, lm_corpus["tsv"], **{"model.init_arch": "llama"})
    assert resolve_base_model(config) == target
    made = json.loads((target / SUMMARY).read_text())
    assert made["arch"] == "llama" and made["corpus"] == [str(lm_corpus["tsv"])]
    config = lm_config(tmp_path / "models" / "none", lm_corpus["tsv"])
    with pytest.raises(UserError, match="not a Hugging Face model folder"):
        resolve_base_model(config)


def test_init_small_matches_the_documented_size(tmp_path, monkeypatch, capsys, tiny_llama_chat):
    """`models init --size small` through the command: 4 layers, 256 wide, vocabulary 2048,
    hence the 3.9 M parameter Llama docs/llm_finetuning.md names (tiny has far fewer)."""
    import sys
    from pathlib import Path

    from trainforge.cli import main

    corpus = Path(__file__).resolve().parents[2] / "example_datasets/g2p/cmudict_val.tsv"
    monkeypatch.chdir(tmp_path)
    args = [
        "models",
        "init",
        "small",
        "--arch",
        "llama",
        "--size",
        "small",
        "--corpus",
        str(corpus),
    ]
    monkeypatch.setattr(sys, "argv", ["trainforge", *args])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code in (0, None), capsys.readouterr().err
    folder = tmp_path / "models" / "small"
    config = json.loads((folder / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"]) == (4, 256)
    assert (config["num_attention_heads"], config["vocab_size"]) == (4, 2048)
    d, vocab, mlp = 256, 2048, 256 * 8 // 3
    per_layer = 2 * d * d + 2 * d * (d // 2) + 3 * d * mlp + 2 * d  # q,o + k,v (2 kv heads)
    expected = 2 * vocab * d + 4 * per_layer + d  # embeddings, untied head, final norm
    small = json.loads((folder / hf.SUMMARY_FILE).read_text())["num_parameters"]
    tiny = json.loads((tiny_llama_chat / hf.SUMMARY_FILE).read_text())["num_parameters"]
    assert small == expected and round(small / 1e6, 1) == 3.9
    assert small > 10 * tiny
    assert hf.describe_model(folder).num_parameters == small  # from the safetensors header


@pytest.mark.parametrize("model", ["tiny_gpt2", "tiny_llama_chat"])
def test_lora_fits_the_layer_kind_without_a_warning(model, request):
    """GPT-2's Conv1D layers store weights transposed: LoRA is told so (peft warns and
    guesses otherwise, as a lent GPU's LoRA run showed); Llama's Linear layers are not."""
    import warnings

    from transformers import AutoModelForCausalLM

    from trainforge.config.schema import LoraConfig
    from trainforge.observe.quiet import WARNINGS

    base = AutoModelForCausalLM.from_pretrained(request.getfixturevalue(model))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # all but what a run's quiet console filters
        for message, category, module in WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=category, module=module)
        peft_model = hf.apply_lora(base, LoraConfig(r=2, lora_alpha=4, target_modules=None))
    fan = {c.fan_in_fan_out for c in peft_model.peft_config.values()}
    assert fan == {model == "tiny_gpt2"}
