"""Options owned by their entries: the text dataset's fields live in its options, every
built-in dataset's options class in its own module, and the old flat spellings still load
(with one notice line) until the version docs/configuration.md names."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainforge.config import load
from trainforge.config.schema import FLAT_SPELLINGS_UNTIL, TEXT_FLAT, DataConfig
from trainforge.data.options.text import TextOptions
from trainforge.options import options_model
from trainforge.registry import DATASETS

REPO = Path(__file__).resolve().parents[2]
LM = ["task.kind=causal-lm", "model.arch=hf", "data.dataset=text"]


def test_the_text_fields_are_the_text_datasets_options_not_the_sections():
    assert set(TEXT_FLAT) <= set(TextOptions.model_fields)
    assert not set(TEXT_FLAT) & set(DataConfig.model_fields)
    assert options_model(DATASETS.get("text")) is TextOptions


def test_each_built_in_datasets_options_stand_in_a_module_of_their_own():
    modules = {}
    for name in ("digits", "cifar10", "image-folder", "text"):
        model = options_model(DATASETS.get(name))
        modules[name] = model.__module__
        assert model.__module__ == f"trainforge.data.options.{name.replace('-', '_')}", name
    assert len(set(modules.values())) == len(modules)


def test_a_file_with_old_flat_spellings_loads_with_one_notice_line(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text(
        "task: {kind: causal-lm}\nmodel: {arch: hf}\n"
        "data: {dataset: text, train_file: a.tsv, max_seq_length: 64}\n"
    )
    resolved = load(path, profile="cpu")
    assert resolved.config.data.options.train_file == "a.tsv"
    assert resolved.config.data.options.max_seq_length == 64
    assert resolved.sources["data.options.train_file"] == f"file {path}"
    (line,) = resolved.notes
    assert "data.max_seq_length, data.train_file" in line and "under data.options" in line
    assert f"until trainforge {FLAT_SPELLINGS_UNTIL}" in line


def test_current_spellings_and_flags_print_no_notice(tmp_path):
    path = tmp_path / "new.yaml"
    path.write_text(
        "task: {kind: causal-lm}\nmodel: {arch: hf}\n"
        "data: {dataset: text, options: {train_file: a.tsv}}\n"
    )
    resolved = load(path, profile="cpu", flags={"max_seq_length": 32})
    assert resolved.notes == ()
    assert resolved.config.data.options.max_seq_length == 32
    assert resolved.sources["data.options.max_seq_length"] == "flag --max_seq_length"


def test_a_later_layer_wins_whichever_spelling_each_layer_uses(tmp_path):
    path = tmp_path / "new.yaml"
    path.write_text("data: {dataset: text, options: {train_file: file.tsv}}\n")
    flagged = load(path, profile="cpu", flags={"train_file": "flag.tsv"}).config
    assert flagged.data.options.train_file == "flag.tsv"
    path.write_text("data: {dataset: text, train_file: file.tsv}\n")  # old spelling
    resolved = load(path, profile="cpu", overrides=["data.options.train_file=set.tsv"])
    assert resolved.config.data.options.train_file == "set.tsv"
    assert resolved.sources["data.options.train_file"] == "flag --set data.options.train_file"


def test_set_with_an_old_spelling_is_named_in_the_notice():
    resolved = load(None, profile="cpu", overrides=[*LM, "data.train_file=a.tsv"])
    assert resolved.config.data.options.train_file == "a.tsv"
    (line,) = resolved.notes
    assert line.startswith("old flat spelling data.train_file: write it under data.options")


@pytest.mark.parametrize("path", sorted((REPO / "config").glob("*.yaml")), ids=lambda p: p.name)
def test_the_shipped_configs_use_the_current_spellings(path):
    assert load(path, profile="cpu").notes == ()


def test_the_old_field_reads_and_copies_still_reach_the_options():
    data = DataConfig.model_validate({"dataset": "text", "options": {"train_file": "a.tsv"}})
    assert data.train_file == "a.tsv" and data.max_seq_length == 512
    copied = data.model_copy(update={"validation_file": "v.tsv", "test_file": None})
    assert copied.options.validation_file == "v.tsv" and copied.options.train_file == "a.tsv"
    assert data.with_options(packing=True).options.packing is True
    assert DataConfig().train_file is None  # cifar10: the text defaults


def test_the_reference_says_when_the_flat_spellings_go():
    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = text.split("## Old flat spellings", 1)[1]
    assert f"until trainforge {FLAT_SPELLINGS_UNTIL}" in section
    assert "| `data.train_file` | `data.options.train_file` |" in section


def test_a_later_layer_that_picks_another_entry_drops_the_earlier_entrys_options(tmp_path):
    path = tmp_path / "digits.yaml"
    path.write_text(
        "data: {dataset: digits, options: {val_fraction: 0.3}}\n"
        "optimizer: {name: adamw, args: {adam_beta1: 0.8}}\n"
    )
    same = load(path, profile="cpu", overrides=["data.dataset=digits"])
    assert same.config.data.options.val_fraction == 0.3  # the same entry keeps them
    other = load(path, profile="cpu", overrides=["data.dataset=cifar10", "optimizer.name=sgd"])
    assert other.config.data.options.model_dump() == {"download": True}
    assert other.sources["data.options.download"] == "default"
    assert "adam_beta1" not in other.config.optimizer.args.model_dump()
    given = load(
        path, profile="cpu", overrides=["data.options.download=false", "data.dataset=cifar10"]
    )
    assert given.config.data.options.download is False  # the new entry's own, same layer
