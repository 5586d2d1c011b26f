"""Cross-field rules of the causal-lm task: one line each, naming the field and the fix."""

from __future__ import annotations

import pytest

from trainforge.config import load
from trainforge.config.checks import check

LM = [
    "task.kind=causal-lm",
    "model.arch=hf",
    "data.dataset=text",
    "data.options.train_file=d.jsonl",
]


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (["model.arch=vit"], "model.arch = 'vit': task causal-lm needs model.arch = 'hf'"),
        (
            ["data.dataset=digits", "data.options={}"],  # digits takes no train_file
            "data.dataset = 'digits': task causal-lm reads text records",
        ),
        (["data.options.train_file=null"], "data.options.train_file is not set"),
        (
            ["data.options.train_file=d.parquet"],
            "data.options.train_file = 'd.parquet': unknown format",
        ),
        (
            ["data.options.prompt_template=Question"],
            "data.options.prompt_template = 'Question': must contain",
        ),
        # the old flat spelling of a later layer replaces the current one of an earlier
        (["data.train_file=e.parquet"], "data.options.train_file = 'e.parquet': unknown"),
        (["output.model_name=a/b"], "output.model_name = 'a/b': must be a plain folder name"),
        (["lora.target_modules=[]"], "lora.target_modules = []: names no module"),
        (["task.kind=image-classification"], "need task.kind = 'causal-lm'"),
        (["model.freeze=backbone"], "model.freeze = backbone: only a vit has a classifier head"),
    ],
)
def test_rule_violations(sets, expected):
    config = load(None, profile="cpu", overrides=LM + sets).config
    problems = check(config)
    assert any(expected in p for p in problems), problems
    assert all("\n" not in p for p in problems)


def test_a_valid_causal_lm_config_has_no_problems():
    config = load(None, profile="cpu", overrides=[*LM, "lora.enabled=true"]).config
    assert check(config) == []


def test_vision_defaults_stay_valid():
    assert check(load(None, profile="cpu").config) == []
