"""Layering (profile < file < flags), sources of every value, file formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainforge.config import GUIDE_FLAGS, ConfigError, leaf_paths, load, validate
from trainforge.config.schema import RunConfig
from trainforge.errors import UserError
from trainforge.hardware import detect, load_fixture

FIXTURES = Path(__file__).resolve().parents[1] / "hardware" / "fixtures"


def cpu_profile():
    return ("cpu", "test")


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_layering_profile_then_file_then_flags(tmp_path):
    path = write(
        tmp_path,
        "profile: jetson-orin\ntraining:\n  gradient_accumulation_steps: 4\n  seed: 7\n",
    )
    resolved = load(
        path,
        overrides=["training.seed=9"],
        flags={"batch_size": 2, "learning_rate": None},
    )
    c, src = resolved.config, resolved.sources
    # profile value, untouched by file or flags
    assert c.training.precision == "fp16"
    assert src["training.precision"] == "profile jetson-orin"
    # profile value overridden by the file
    assert c.training.gradient_accumulation_steps == 4
    assert src["training.gradient_accumulation_steps"] == f"file {path}"
    # file value overridden by --set
    assert c.training.seed == 9
    assert src["training.seed"] == "flag --set training.seed"
    # profile value overridden by a guide flag
    assert c.training.per_device_train_batch_size == 2
    assert src["training.per_device_train_batch_size"] == "flag --batch_size"
    # untouched everywhere
    assert src["optimizer.learning_rate"] == "default"
    assert c.optimizer.learning_rate == 3e-4


def test_every_leaf_has_a_source(tmp_path):
    resolved = load(write(tmp_path, "model:\n  num_layers: 2\n"), pick_auto_profile=cpu_profile)
    # Every section field, with an entry's options expanded to their own fields.
    owned = {"data.options", "optimizer.args", "logging.options"}
    assert {p for p in resolved.sources if p.rpartition(".")[0] not in owned} == set(
        leaf_paths(RunConfig)
    ) - owned | {"logging.options"}
    assert "data.options.download" in resolved.sources  # cifar10's own option
    assert resolved.sources["optimizer.args.adam_beta1"] == "default"
    assert resolved.profile.name == "cpu"
    assert resolved.profile_reason.startswith("auto")


def test_json_and_yaml_are_equivalent(tmp_path):
    data = {"model": {"embedding_dim": 128, "num_heads": 4}, "training": {"seed": 3}}
    a = load(write(tmp_path, json.dumps(data), "a.json"), pick_auto_profile=cpu_profile)
    b = load(
        write(tmp_path, "model: {embedding_dim: 128, num_heads: 4}\ntraining: {seed: 3}\n"),
        pick_auto_profile=cpu_profile,
    )
    assert a.config == b.config


def test_guide_flags_map_to_fields(tmp_path):
    flags = {
        "batch_size": 256,
        "learning_rate": 5e-4,
        "max_epochs": 200,
        "max_training_hours": 48,
        "embedding_dim": 384,
        "num_layers": 12,
        "num_heads": 6,
        "mlp_size": 1536,
    }
    resolved = load(None, flags=flags, pick_auto_profile=cpu_profile)
    for name, value in flags.items():
        node = resolved.config
        for part in GUIDE_FLAGS[name].split("."):
            node = getattr(node, part)
        assert node == value, name


def test_set_parses_yaml_values():
    resolved = load(
        None,
        overrides=[
            "data.normalize_mean=[0.5]",
            "data.normalize_std=[0.25]",
            "training.compile=true",
        ],
        pick_auto_profile=cpu_profile,
    )
    assert resolved.config.data.normalize_mean == [0.5]
    assert resolved.config.training.compile is True


def test_unknown_set_path_suggests():
    with pytest.raises(UserError, match=r"did you mean training\.seed"):
        load(None, overrides=["training.sed=1"], pick_auto_profile=cpu_profile)


def test_config_is_frozen():
    resolved = load(None, pick_auto_profile=cpu_profile)
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError
        resolved.config.training.seed = 3


def test_auto_profile_uses_detected_platform():
    jetson = detect(load_fixture(FIXTURES / "jetson-orin-jp6"))
    resolved = validate(None, platform=jetson)
    assert resolved.profile.name == "jetson-orin"
    assert resolved.config.training.gradient_checkpointing is True


def test_fp16_on_cpu_platform_is_rejected():
    cpu = detect(load_fixture(FIXTURES / "cpu"))
    with pytest.raises(ConfigError, match="precision = 'fp16'"):
        validate(None, platform=cpu, profile="jetson-orin")


def test_cross_field_errors_are_all_reported(tmp_path):
    path = write(
        tmp_path,
        "model:\n  embedding_dim: 100\n  num_heads: 3\n  patch_size: 5\n"
        "schedule:\n  warmup_epochs: 10\ntraining:\n  num_train_epochs: 5\n",
    )
    cpu = detect(load_fixture(FIXTURES / "cpu"))
    with pytest.raises(ConfigError) as info:
        validate(path, platform=cpu)
    text = "\n".join(info.value.lines)
    assert len(info.value.lines) == 3
    assert "num_heads = 3" in text and "patch_size = 5" in text and "warmup_epochs = 10" in text
