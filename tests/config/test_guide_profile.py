"""The Jetson guide's training-profile JSON maps onto the run config one key to one field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainforge.config import load
from trainforge.config.guide_profile import from_guide_profile, training_argument_fields
from trainforge.errors import UserError

REPO = Path(__file__).resolve().parents[2]


def test_shipped_jetson_profile_has_the_guides_values():
    resolved = load(REPO / "config" / "jetson_training.json", profile="cpu")
    c = resolved.config
    assert (c.task.kind, c.model.arch, c.data.dataset) == ("causal-lm", "hf", "text")
    assert c.data.options.train_file == "example_datasets/jetson_training.json"
    assert c.training.num_train_epochs == 1 and c.training.per_device_train_batch_size == 1
    assert c.optimizer.learning_rate == 2.5e-4
    assert c.training.gradient_accumulation_steps == 4 and c.training.gradient_checkpointing
    assert c.data.dataloader_num_workers == 1
    assert c.hardware.swap_directory == "outputs/jetson_training_swap"
    assert c.notes and "Jetson" in c.notes
    label = f"file {REPO / 'config' / 'jetson_training.json'}"
    assert resolved.sources["training.gradient_accumulation_steps"] == label


def test_training_arguments_map_one_to_one():
    fields = training_argument_fields()
    for name in ("gradient_accumulation_steps", "gradient_checkpointing", "save_steps",
                 "save_total_limit", "dataloader_num_workers", "per_device_train_batch_size",
                 "logging_steps", "max_seq_length", "warmup_steps"):  # fmt: skip
        assert fields[name].endswith("." + name)
    data = from_guide_profile(
        {"dataset": "d.jsonl", "training_arguments": {"bf16": True, "save_steps": 50}}, "x"
    )
    assert data["training"] == {"precision": "bf16"} and data["checkpoint"] == {"save_steps": 50}


def test_sections_beside_guide_keys_win_and_plain_configs_pass_through():
    data = from_guide_profile(
        {"batch_size": 2, "lora": {"enabled": True}, "data": {"packing": True}}, "x"
    )
    assert data["lora"] == {"enabled": True}
    assert data["data"] == {"dataset": "text", "packing": True}
    assert data["training"]["per_device_train_batch_size"] == 2
    plain = {"training": {"seed": 1}}
    assert from_guide_profile(plain, "x") is plain


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"dataset": "d.json", "training_arguments": {"gradient_acumulation_steps": 4}},
         "did you mean gradient_accumulation_steps?"),
        ({"dataset": "d.json", "epoch": 1}, "did you mean epochs?"),
        ({"dataset": "d.json", "training_arguments": [1]}, "must be a mapping"),
    ],
)  # fmt: skip
def test_mistakes_are_one_line_errors(tmp_path, data, message):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UserError, match=message) as info:
        load(path, profile="cpu")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("preference", ["cpu", "cuda", None])
def test_device_preference_sets_the_run_device(tmp_path, preference):
    shipped = json.loads((REPO / "config" / "jetson_training.json").read_text())
    assert shipped["device_preference"] == "auto"
    data = dict(shipped)
    if preference:
        data["device_preference"] = preference
    path = tmp_path / "jetson_training.json"
    path.write_text(json.dumps(data))
    resolved = load(path, profile="cpu")
    assert resolved.config.training.device == (preference or "auto")
    assert resolved.sources["training.device"] == f"file {path}"
