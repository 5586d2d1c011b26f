"""Every shipped profile and example config loads and validates; profiles cite sources."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainforge.config import validate
from trainforge.errors import UserError
from trainforge.hardware import detect, load_fixture
from trainforge.profiles import HOW_SECTIONS, list_profiles, load_profile

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "hardware" / "fixtures"
EXAMPLES = sorted((REPO / "config").glob("*.yaml")) + sorted((REPO / "config").glob("*.json"))
# The machine each profile is meant for, so device and precision rules apply for real.
PROFILE_MACHINE = {
    "cpu": "cpu",
    "jetson-orin": "jetson-orin-jp6",
    "workstation-24gb": "cuda-workstation",
    "dgx-spark": "dgx-spark",
    "hpc-a100": "slurm-a100",
}


def test_the_five_profiles_ship():
    assert set(list_profiles()) == set(PROFILE_MACHINE)


@pytest.mark.parametrize("name", sorted(PROFILE_MACHINE))
def test_profile_validates_on_its_machine_and_cites_sources(name):
    platform = detect(load_fixture(FIXTURES / PROFILE_MACHINE[name]))
    resolved = validate(None, platform=platform, profile=name)
    assert resolved.profile.name == name
    profile = load_profile(name)
    assert set(profile.settings) <= set(HOW_SECTIONS)
    text = profile.source_text()
    assert "Sources" in text or "Source" in text
    # every number set by the profile carries a comment on its line or in the header
    assert profile.description and profile.notes


@pytest.mark.parametrize("name", sorted(PROFILE_MACHINE))
def test_auto_picks_the_profile_on_its_machine(name):
    platform = detect(load_fixture(FIXTURES / PROFILE_MACHINE[name]))
    assert validate(None, platform=platform).profile.name == name


def test_profile_numbers_follow_the_seeds():
    jetson = load_profile("jetson-orin").settings
    # A profile sets how a batch runs (the micro-batch cap), never the batch itself.
    assert jetson["hardware"]["micro_batch_size"] == 16
    assert jetson["training"]["gradient_checkpointing"] is True
    assert jetson["data"]["dataloader_num_workers"] == 1
    assert 8 <= jetson["hardware"]["memory_budget_gib"] <= 12
    assert jetson["hardware"]["telemetry"] is True
    hpc = load_profile("hpc-a100").settings
    assert hpc["hardware"]["micro_batch_size"] == 128
    assert hpc["hardware"]["distributed_backend"] == "nccl"
    assert hpc["training"]["precision"] == "fp16"  # seeds/001: mixed precision (FP16)
    assert hpc["logging"]["mlflow"] is True and hpc["logging"]["wandb"] is True
    assert hpc["hardware"]["data_parallel"] == "ddp"
    assert hpc["hardware"]["launcher"] == "slurm"
    assert load_profile("dgx-spark").settings["training"]["precision"] == "bf16"
    ws = load_profile("workstation-24gb").settings["hardware"]
    assert 32 <= ws["micro_batch_size"] <= 64
    for name in PROFILE_MACHINE:
        training = load_profile(name).settings.get("training", {})
        assert not {"per_device_train_batch_size", "gradient_accumulation_steps"} & set(training)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_config_validates(path):
    platform = detect(load_fixture(FIXTURES / "cpu"))
    resolved = validate(path, platform=platform)
    assert resolved.config.task.kind


def test_examples_cover_the_guide_models():
    models = {p.stem: yaml.safe_load(p.read_text()).get("model", {}) for p in EXAMPLES}
    assert models["vit_cifar10_small"]["embedding_dim"] == 128
    assert models["vit_cifar10_large"]["num_layers"] == 24
    assert models["vit_cifar10"]["num_heads"] == 6


def test_profile_may_not_set_what_to_train(tmp_path):
    from trainforge.profiles import ProfileEntry
    from trainforge.registry import PROFILES

    bad = tmp_path / "bad.yaml"
    bad.write_text("description: x\nsettings:\n  model:\n    num_layers: 2\n")
    PROFILES.register("bad", ProfileEntry.from_file(bad))
    try:
        with pytest.raises(UserError, match="describes what to train"):
            load_profile("bad")
    finally:
        PROFILES.unregister("bad")


@pytest.mark.parametrize("name", sorted(PROFILE_MACHINE))
def test_profile_guide_exists(name):
    guide = load_profile(name).guide
    assert guide is None or (REPO / guide).is_file()
