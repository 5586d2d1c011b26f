"""The end-of-run confusion matrix reuses the last full validation (no second pass over the
validation set) only when that validation stands for the current weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainforge.config import load
from trainforge.tasks import build_task

CONFIG = Path(__file__).resolve().parents[2] / "config" / "vit_digits.yaml"
TINY = ["model.embedding_dim=16", "model.num_layers=1", "model.num_heads=2", "model.mlp_size=16"]


class NoPass:
    """A validation loader that must not be iterated (the cached counts must serve)."""

    def __init__(self, loader) -> None:
        self.dataset = loader.dataset

    def __iter__(self):
        raise AssertionError("the validation set was run through the model again")


@pytest.fixture
def task():
    config = load(CONFIG, profile="cpu", overrides=TINY).config
    return build_task(config, torch.device("cpu"))


def validate(task, loader=None) -> None:
    task.model.eval()
    with torch.no_grad():
        for raw in loader if loader is not None else task.val_loader:
            task.step(task.model, task.to_device(raw, torch.device("cpu"), False))
    task.model.train()


def test_the_last_full_validation_is_reused(task):
    fresh, names = task.confusion_matrix(task.model, torch.device("cpu"))
    validate(task)
    loader, task.val_loader = task.val_loader, NoPass(task.val_loader)
    reused, reused_names = task.confusion_matrix(task.model, torch.device("cpu"))
    task.val_loader = loader
    assert reused == fresh and reused_names == names
    assert sum(map(sum, reused)) == len(loader.dataset)


def test_a_training_step_or_a_weight_change_means_a_fresh_pass(task):
    validate(task)
    with torch.no_grad():
        next(task.model.parameters()).add_(1.0)  # e.g. a checkpoint loaded after validation
    assert task._last_eval_counts() is None
    validate(task)
    raw = next(iter(task.train_loader))
    task.step(task.model, task.to_device(raw, torch.device("cpu"), True))  # training mode
    assert task._last_eval_counts() is None


def test_a_subset_and_a_full_pass_together_are_not_reused(task):
    subset = [next(iter(task.val_loader))]
    validate(task, subset)
    assert task._last_eval_counts() is None  # a fast-validation subset only
    validate(task)
    assert task._last_eval_counts() is None  # subset + full pass since the last step
