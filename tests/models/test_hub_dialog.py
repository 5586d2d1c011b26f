"""The web dialog's Base model field offers and accepts cached Hugging Face ids beside the
local folders, and judges an id that is not cached beside the field."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fakes.hf_cache import FAMILIES
from fakes.web import CPU, run_form
from trainforge.hardware import detect, load_fixture

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def dialog(hf_cache, tmp_path, monkeypatch):
    from huggingface_hub import constants

    from trainforge.web.settings import WebSettings

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hf_cache.root))
    (tmp_path / "config").mkdir()
    (tmp_path / "example_datasets").mkdir()
    shutil.copy(REPO / "config" / "jetson_training.json", tmp_path / "config")
    shutil.copy(REPO / "example_datasets" / "jetson_training.json", tmp_path / "example_datasets")
    return WebSettings(root=tmp_path, fixture=CPU), detect(load_fixture(CPU))


def _form(base_model: str) -> dict:
    return run_form(
        config="config/jetson_training.json", task="causal-lm", base_model=base_model,
        dataset="example_datasets/jetson_training.json", profile="cpu", overrides=[],
    )  # fmt: skip


def test_cached_ids_are_offered_and_passed_as_ids(dialog):
    from trainforge.web.dialog import TrainForm, defaults, validate_form

    settings, platform = dialog
    choices = defaults(settings, platform, "config/jetson_training.json")["choices"]["models"]
    assert {f.repo_id for f in FAMILIES.values()} <= set(choices)
    gemma = FAMILIES["gemma3"].repo_id
    resolved, argv = validate_form(settings, platform, TrainForm(**_form(gemma)))
    assert resolved.config.model.model_name_or_path == gemma
    assert f'model.model_name_or_path="{gemma}"' in argv


def test_an_uncached_id_is_judged_beside_the_field(dialog):
    from trainforge.web.dialog import FormErrors, TrainForm, validate_form

    settings, platform = dialog
    with pytest.raises(FormErrors) as err:
        validate_form(settings, platform, TrainForm(**_form("google/gemma-3-270m-it")))
    (line,) = err.value.errors["base_model"]
    assert "not in the Hugging Face cache" in line
    assert "trainforge models pull google/gemma-3-270m-it" in line
