"""Did-you-mean: a misspelt or borrowed key names the full dotted path the user meant."""

from __future__ import annotations

import pytest

from trainforge.config import load
from trainforge.config.errors import ALIASES, ConfigError, _known_paths, suggest_path
from trainforge.config.schema import RunConfig, flat_alias_paths, leaf_paths
from trainforge.options import options_model
from trainforge.registry import DATASETS


def cpu_profile() -> tuple[str, str]:
    return "cpu", "test"


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("optimizer.lr", "optimizer.learning_rate"),
        ("lr", "optimizer.learning_rate"),
        ("training.lr", "optimizer.learning_rate"),
        ("training.bs", "training.per_device_train_batch_size"),
        ("training.batch_size", "training.per_device_train_batch_size"),
        ("evaluation.batch_size", "evaluation.per_device_eval_batch_size"),
        ("training.epochs", "training.num_train_epochs"),
        ("epochs", "training.num_train_epochs"),
        ("training.steps", "training.max_steps"),
        ("optimizer.wd", "optimizer.weight_decay"),
        ("schedule.warmup", "schedule.warmup_steps"),
        ("data.num_workers", "data.dataloader_num_workers"),
        ("optimizer.lerning_rate", "optimizer.learning_rate"),
        ("training.learning_rate", "optimizer.learning_rate"),
        ("model.num_head", "model.num_heads"),
        ("trainig", "training"),
        ("optimiser", "optimizer"),
    ],
)
def test_suggests_the_full_dotted_path(typed, meant):
    assert suggest_path(typed, _known_paths()) == meant


def test_every_alias_points_at_a_real_field():
    fields = set(leaf_paths(RunConfig)) | set(flat_alias_paths())  # old spellings work
    # a built-in dataset's own options (`data.options.train_file`)
    fields |= {
        f"data.options.{name}"
        for _, entry in DATASETS.items()
        for name in options_model(entry).model_fields
    }
    for word, targets in ALIASES.items():
        assert targets and set(targets) <= fields, word


def test_nothing_close_gives_no_suggestion():
    assert suggest_path("zebra.quux", _known_paths()) is None


def test_validation_message_suggests_learning_rate(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text("optimizer:\n  lr: 0.1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load(path, pick_auto_profile=cpu_profile)
    assert caught.value.lines == [
        f"{path}: optimizer.lr: unknown key; did you mean optimizer.learning_rate?"
    ]
