"""Base models by Hugging Face id, offline, from a cache in huggingface_hub's real layout
(fakes.hf_cache): each reference architecture trains as itself, never as a new random model."""

from __future__ import annotations

import json

import pytest

from fakes.hf_cache import FAMILIES, commit_of
from fakes.tiny_lm import lm_overrides
from trainforge.errors import UserError
from trainforge.models.hub import is_hub_id, resolve_hub_model

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture
def offline_cache(hf_cache, monkeypatch):
    """HF_HUB_CACHE at the fixture cache, downloads off (the constants are read at import)."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_CACHE", str(hf_cache.root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hf_cache.root))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return hf_cache


@pytest.mark.parametrize(
    ("value", "hub"),
    [
        ("google/gemma-3-270m-it", True),
        ("Qwen/Qwen3-0.6B@refs/pr/3", True),
        ("models/g2p-small", False),
        ("./google/gemma", False),
        ("/abs/org/name", False),
        ("~/org/name", False),
        ("tiny", False),
        ("a/b/c", False),
    ],
)
def test_which_values_are_hub_ids(value, hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert is_hub_id(value) is hub


def test_an_existing_folder_shaped_like_an_id_stays_a_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "name").mkdir(parents=True)
    assert not is_hub_id("org/name")


def test_an_id_resolves_to_its_snapshot_and_commit(offline_cache):
    repo_id = FAMILIES["gemma3"].repo_id
    found = resolve_hub_model(repo_id)
    assert found.commit == commit_of(repo_id)
    assert found.path.parent.parent.name == "models--google--gemma-3-tiny-it"
    assert (found.path / "config.json").is_symlink()
    pinned = resolve_hub_model(f"{repo_id}@{found.commit}")
    assert pinned.path == found.path


def test_an_uncached_id_offline_is_one_line_naming_the_cache_and_pull(offline_cache):
    with pytest.raises(UserError) as err:
        resolve_hub_model("google/gemma-3-270m-it")
    assert "google/gemma-3-270m-it" in err.value.message
    assert str(offline_cache.root) in err.value.message
    assert "trainforge models pull google/gemma-3-270m-it" in err.value.fix


def test_an_uncached_id_is_refused_never_created(offline_cache, tmp_path, monkeypatch, capsys):
    """The issue's command: the G2P recipe (init_arch: llama) with a Gemma id not cached."""
    from fakes.in_process import REPO, run_in_process

    monkeypatch.chdir(tmp_path)
    code, _, err = run_in_process(
        monkeypatch, capsys, "train", str(REPO / "config" / "g2p_cmudict.yaml"),
        "--base-model", "google/gemma-3-270m-it", "--max_steps", "3",
    )  # fmt: skip
    assert code == 2, err
    assert "trainforge models pull google/gemma-3-270m-it" in err and "Traceback" not in err
    assert not (tmp_path / "google").exists()


@pytest.mark.parametrize("name", list(FAMILIES))
def test_each_architecture_trains_by_id_as_itself(
    name, offline_cache, tmp_path, lm_corpus, monkeypatch
):
    """On a folder-only resolver the Gemma id became a new random Llama: this fails there."""
    monkeypatch.chdir(tmp_path)  # where such a resolver would have made ./org/name
    from trainforge.config import validate
    from trainforge.hardware import detect
    from trainforge.train import train

    family = FAMILIES[name]
    sets = {
        "training.max_steps": 2,
        "training.per_device_train_batch_size": 4,
        "model.init_arch": "llama",  # must not apply to an id
        "evaluation.eval_every_epochs": "null",
        "evaluation.generation_samples": 2,
        "hardware.telemetry": "false",
        "output.dir": str(tmp_path / "runs"),
        "output.models_dir": str(tmp_path / "models"),
        "output.model_name": "tuned",
    }
    platform = detect()
    resolved = validate(
        None, platform=platform, profile="cpu",
        overrides=lm_overrides(family.repo_id, lm_corpus["json"], **sets),  # type: ignore[arg-type]
    )  # fmt: skip
    summary = train(resolved, platform)
    assert summary.global_step == 2
    out = tmp_path / "models" / "tuned"
    assert json.loads((out / "config.json").read_text())["architectures"] == [family.arch]
    recorded = json.loads((out / "trainforge.json").read_text())
    assert recorded["base_model"] == family.repo_id
    assert commit_of(family.repo_id) in recorded["base_model_path"]
    evaluated = recorded["validation_metrics"]  # the closing evaluation ran on the model
    assert evaluated["loss"] > 0 and evaluated["perplexity"] > 1 and 0 <= evaluated["accuracy"] <= 1
    assert not (tmp_path / family.repo_id).exists()


def test_models_list_shows_the_cache_without_loading(offline_cache, tmp_path, monkeypatch, capsys):
    """Id, revision, commit, architecture, parameters (from the safetensors headers) and the
    size on disk, with every way of loading weights made to fail."""
    from huggingface_hub import scan_cache_dir
    from safetensors.torch import load_file

    from fakes.in_process import run_in_process
    from trainforge.models.hf import human_bytes

    gemma_id = FAMILIES["gemma3"].repo_id
    folder = offline_cache.folders["gemma3"]
    weights = sum(t.numel() for f in folder.glob("*.safetensors") for t in load_file(f).values())
    (repo,) = [r for r in scan_cache_dir(offline_cache.root).repos if r.repo_id == gemma_id]

    def loaded(*args, **kwargs):
        raise AssertionError("models list loaded weights")

    import safetensors.torch
    import torch
    import transformers

    for target, name in ((transformers.AutoModelForCausalLM, "from_pretrained"),
                         (torch, "load"), (safetensors.torch, "load_file")):  # fmt: skip
        monkeypatch.setattr(target, name, loaded)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_in_process(monkeypatch, capsys, "models", "list")
    assert code == 0, err
    assert f"Hugging Face cache {offline_cache.root}: {len(FAMILIES)} model(s)" in out
    rows = {f[0]: f for f in map(str.split, out.splitlines()) if f and "/" in f[0]}
    gemma = rows[gemma_id]
    assert gemma[1] == "main" and gemma[2] == commit_of(gemma_id)[:10]
    assert gemma[3] == "Gemma3ForCausalLM" and int(gemma[4].replace(",", "")) == weights
    assert " ".join(gemma[5:]) == human_bytes(repo.size_on_disk)
    assert rows[FAMILIES["gpt2"].repo_id][3] == "GPT2LMHeadModel"


@pytest.mark.parametrize("name", list(FAMILIES))
def test_run_json_records_the_commit_and_a_resume_keeps_it(
    name, offline_cache, tmp_path, monkeypatch, capsys, lm_corpus
):
    """For each architecture by id: after the run, refs/main moves to a commit not in the
    cache, and the resume still finds the recorded one (it pins id@commit) and continues
    bitwise; an unpinned resolution would fail."""
    import shutil

    from huggingface_hub import constants

    from fakes.in_process import run_in_process

    cache = tmp_path / "hub"
    shutil.copytree(offline_cache.root, cache, symlinks=True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    repo_id = FAMILIES[name].repo_id
    (tmp_path / "run.yaml").write_text("task:\n  kind: causal-lm\n", encoding="utf-8")
    sets = lm_overrides(
        repo_id,  # type: ignore[arg-type]
        lm_corpus["json"],
        **{"training.max_steps": 2, "checkpoint.save_steps": 2, "hardware.telemetry": "false",
           "evaluation.eval_every_epochs": "null", "output.dir": str(tmp_path / "runs"),
           "output.run_name": "byid"},
    )  # fmt: skip
    args = [a for s in sets for a in ("--set", s)]
    monkeypatch.chdir(tmp_path)
    code, _, err = run_in_process(monkeypatch, capsys, "train", "run.yaml", *args)
    assert code == 0, err
    run_json = tmp_path / "runs" / "byid" / "run.json"
    commit = commit_of(repo_id)
    assert json.loads(run_json.read_text())["base_model"] == {
        "id": repo_id, "revision": "main", "commit": commit,
    }  # fmt: skip
    refs = cache / f"models--{repo_id.replace('/', '--')}" / "refs" / "main"
    refs.write_text("f" * 40, encoding="utf-8")  # the branch moved on; not downloaded here
    with pytest.raises(UserError):
        resolve_hub_model(repo_id)
    code, out, err = run_in_process(
        monkeypatch, capsys, "train", "--resume", "runs/byid", "--max_steps", "3"
    )
    assert code == 0, err
    assert f"commit {commit}" in out
    assert "(epoch 0, step 2), exact" in out  # the pin keeps the resume bitwise
    assert json.loads(run_json.read_text())["base_model"]["commit"] == commit


def _spy_on_lora(monkeypatch) -> dict:
    """What the run's model was given: the modules peft wrapped, and how often a decoder
    layer's first part ran inside a backward pass (its recomputation: checkpointing is on)."""
    import torch
    from transformers.modeling_layers import GradientCheckpointingLayer

    from trainforge.models import hf

    seen: dict = {"recomputed": 0}
    apply_lora = hf.apply_lora

    def spy(model, cfg):
        wrapped = apply_lora(model, cfg)
        seen["model_type"] = model.config.model_type
        seen["targets"] = {n.rsplit(".", 1)[-1] for n, m in wrapped.named_modules()
                           if hasattr(m, "lora_A")}  # fmt: skip

        def count(module, args):
            if torch._C._current_graph_task_id() != -1:  # running inside backward
                seen["recomputed"] += 1

        for layer in wrapped.modules():
            if isinstance(layer, GradientCheckpointingLayer):  # its parts run again, not it
                next(layer.children()).register_forward_pre_hook(count)
        return wrapped

    monkeypatch.setattr(hf, "apply_lora", spy)
    return seen


def _make_stop_token_the_answer(folder, stop: str, prompt: str) -> None:
    """Rewrite the output row of `stop` so that the greedy first answer token is `stop`: a
    scaled copy of the row the model would pick (the head untied, so the prompt's own
    embeddings stay as they were)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainforge.generate import answer as ans
    from trainforge.generate.sources import Settings, locate

    loaded = ans.load(locate(str(folder)), Settings())
    ids = torch.tensor([ans.prompt_ids(loaded, [{"role": "user", "content": prompt}])])
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    stop_id = AutoTokenizer.from_pretrained(folder).convert_tokens_to_ids(stop)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, -1]
        first = int(logits.argmax())
        head = model.get_output_embeddings()
        head.weight = torch.nn.Parameter(head.weight.detach().clone())
        model.config.tie_word_embeddings = False
        head.weight[stop_id] = head.weight[first] * (2.0 if logits[first] > 0 else 0.5)
    model.save_pretrained(folder)
    again = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    with torch.no_grad():
        assert int(again(input_ids=ids).logits[0, -1].argmax()) == stop_id  # else no test


@pytest.mark.parametrize("name", list(FAMILIES))
def test_lora_with_peft_defaults_merged_keeps_architecture_and_stop_tokens(
    name, offline_cache, tmp_path, lm_corpus, monkeypatch, capsys
):
    """LoRA on peft's default target modules for the architecture, gradient checkpointing on
    (each decoder layer recomputed in backward), merged into a plain model of the cached
    architecture whose answers end at the family's own stop token."""
    from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_DEFAULTS
    from transformers import AutoModelForCausalLM, GenerationConfig

    from fakes.in_process import run_in_process
    from trainforge.config import validate
    from trainforge.hardware import detect
    from trainforge.train import train

    monkeypatch.chdir(tmp_path)
    family = FAMILIES[name]
    seen = _spy_on_lora(monkeypatch)
    sets = {
        "training.max_steps": 2,
        "training.per_device_train_batch_size": 4,
        "training.gradient_checkpointing": "true",
        "lora.enabled": "true",
        "lora.target_modules": "null",
        "lora.merge_adapter": "true",
        "evaluation.eval_every_epochs": "null",
        "hardware.telemetry": "false",
        "output.dir": str(tmp_path / "runs"),
        "output.models_dir": str(tmp_path / "models"),
        "output.model_name": "merged",
    }
    platform = detect()
    resolved = validate(
        None, platform=platform, profile="cpu",
        overrides=lm_overrides(family.repo_id, lm_corpus["chat"], **sets),  # type: ignore[arg-type]
    )  # fmt: skip
    assert train(resolved, platform).global_step == 2
    assert seen["targets"] == set(PEFT_DEFAULTS[seen["model_type"]])
    assert seen["recomputed"] >= 2 * 2  # two layers, two steps: forward again in backward
    out = tmp_path / "models" / "merged"
    assert not (out / "adapter_config.json").exists()
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert type(model).__name__ == family.arch
    assert not any("lora" in key for key in model.state_dict())
    stops = GenerationConfig.from_pretrained(out).eos_token_id
    base = GenerationConfig.from_pretrained(offline_cache.folders[name]).eos_token_id
    assert stops == base
    stop = family.stop_tokens[-1]  # the end of a turn where the family has one
    _make_stop_token_the_answer(out, stop, "Say hello.")
    capsys.readouterr()  # the training's own lines
    code, text, err = run_in_process(
        monkeypatch, capsys, "generate", str(out), "--prompt", "Say hello.", "--json"
    )
    assert code == 0, err
    (block,) = json.loads(text)["answers"]
    assert block["answers"] == {str(out): ""}  # stopped at once, the stop token dropped
