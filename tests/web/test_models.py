"""The Models page: Hugging Face folders with size, architecture and trainforge.json summary,
read without torch and agreeing with the CLI's `trainforge models list`."""

from __future__ import annotations

from fakes.web import write_hf_folder
from trainforge.web.model_list import list_models


def test_models_list_reads_size_architecture_and_summary(make_client, project):
    summary = {
        "task": "causal-lm",
        "base_model": "models/base-gpt2",
        "global_step": 60,
        "dataset": {"train_file": "example_datasets/jetson_training.json"},
        "metrics": {"loss": 1.25, "accuracy": 0.5, "note": "text is dropped"},
    }
    write_hf_folder(project / "models" / "tuned", "LlamaForCausalLM", summary)
    (project / "models" / "not-a-model").mkdir()
    (project / "models" / ".tmp-partial").mkdir()
    models = {m["name"]: m for m in make_client().get("/api/models").json()}
    assert sorted(models) == ["base-gpt2", "tuned"]
    tuned = models["tuned"]
    assert tuned["architecture"] == "LlamaForCausalLM" and tuned["kind"] == "model"
    assert tuned["num_parameters"] == 44  # 10 x 4 + 4, from the safetensors header
    files = [p for p in (project / "models" / "tuned").iterdir()]
    assert tuned["size_bytes"] == sum(p.stat().st_size for p in files)
    assert tuned["base_model"] == "models/base-gpt2"
    assert tuned["summary"] == {
        "task": "causal-lm",
        "base_model": "models/base-gpt2",
        "global_step": 60,
        "train_file": "example_datasets/jetson_training.json",
        "metrics": {"loss": 1.25, "accuracy": 0.5},
    }
    assert models["base-gpt2"]["summary"] is None
    page = make_client().get("/models").text
    assert "LlamaForCausalLM" in page and "accuracy" in page and "no trainforge.json" in page


def test_listing_agrees_with_the_cli_listing(project):
    from trainforge.models.hf import list_models as cli_list_models

    write_hf_folder(project / "models" / "second", "LlamaForCausalLM", {"base_model": "x"})
    ours = {m["name"]: m for m in list_models(project / "models")}
    theirs = {m.name: m for m in cli_list_models(project / "models")}
    assert set(ours) == set(theirs)
    for name, info in theirs.items():
        assert ours[name]["num_parameters"] == info.num_parameters
        assert ours[name]["size_bytes"] == info.size_bytes
        assert ours[name]["architecture"] == info.arch


def test_a_damaged_safetensors_file_lists_without_a_count(project):
    folder = write_hf_folder(project / "models" / "damaged")
    (folder / "model.safetensors").write_bytes(b"\xff" * 12)
    damaged = next(m for m in list_models(project / "models") if m["name"] == "damaged")
    assert damaged["num_parameters"] == 0 and damaged["architecture"] == "GPT2LMHeadModel"


def test_no_models_folder_is_an_empty_list(make_client, project, tmp_path):
    assert list_models(tmp_path / "absent") == []
    assert "No model folders" in make_client(models_dir="elsewhere").get("/models").text


def test_a_model_made_by_models_init_shows_how_it_was_made(make_client, project):
    # trainforge.json as `trainforge models init` writes it (models/hf_init.py); the browser
    # test makes one with the real command and reads its row on the Models page.
    summary = {
        "created_by": "trainforge models init", "arch": "gpt2", "size": "tiny", "seed": 0,
        "corpus": ["example_datasets/jetson_training.json"],
        "corpus_files": [{"path": "example_datasets/jetson_training.json", "size_bytes": 9}],
        "vocab_size": 512, "chat_template": False, "num_parameters": 44,
    }  # fmt: skip
    write_hf_folder(project / "models" / "tiny", summary=summary)
    tiny = next(m for m in list_models(project / "models") if m["name"] == "tiny")
    assert tiny["summary"] == {
        "created_by": "trainforge models init", "size": "tiny", "seed": 0, "vocab_size": 512,
        "corpus": "example_datasets/jetson_training.json",
    }  # fmt: skip
    row = make_client().get("/models").text.split('data-model="tiny"')[1].split("</tr>")[0]
    assert "trainforge models init" in row and "no trainforge.json" not in row
