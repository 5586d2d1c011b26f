"""Options owned by the entries: the built-ins' old flat spellings still land in their
entry's options (and are left out where the entry takes none, as they never applied), a
class-path optimizer receives `optimizer.args`, and the task a dataset is read by comes from
its entry."""

from __future__ import annotations

import pytest
import torch

from trainforge.config import ConfigError, load
from trainforge.config.checks import check
from trainforge.data.catalog import DatasetEntry
from trainforge.data.options.text import TextOptions
from trainforge.engine.optimizers import build_optimizer
from trainforge.errors import UserError
from trainforge.registry import DATASETS


def _config(*overrides: str):
    return load(None, profile="cpu", overrides=list(overrides)).config


def test_the_old_flat_spellings_land_in_the_entry_options():
    config = _config("data.download=false", "optimizer.adam_beta2=0.95")
    assert config.data.options.download is False
    assert config.optimizer.args.adam_beta2 == 0.95
    digits = _config("data.dataset=digits", "data.val_fraction=0.3", "data.download=false")
    assert digits.data.options.val_fraction == 0.3
    assert not hasattr(digits.data.options, "download")  # digits never downloads
    sgd = _config("optimizer.name=sgd", "optimizer.momentum=0.5", "optimizer.adam_beta1=0.8")
    assert sgd.optimizer.args.momentum == 0.5 and not hasattr(sgd.optimizer.args, "adam_beta1")
    given = _config("data.download=false", "data.options.download=true")
    assert given.data.options.download is True  # the mapping wins over the flat spelling


def test_a_class_path_optimizer_gets_its_arguments():
    model = torch.nn.Linear(3, 2)
    config = _config("optimizer.name=torch.optim.RMSprop", "optimizer.args={alpha: 0.8}")
    optimizer = build_optimizer(model, config.optimizer, torch.device("cpu"))
    assert isinstance(optimizer, torch.optim.RMSprop)
    assert optimizer.defaults["alpha"] == 0.8
    assert optimizer.defaults["lr"] == config.optimizer.learning_rate
    wrong = _config("optimizer.name=torch.optim.RMSprop", "optimizer.args={alpah: 0.8}")
    with pytest.raises(UserError, match=r"optimizer.args.alpah: .* did you mean alpha\?"):
        build_optimizer(model, wrong.optimizer, torch.device("cpu"))


def test_options_given_to_a_builtin_are_checked_in_the_same_pass():
    with pytest.raises(ConfigError) as caught:
        _config("optimizer.name=sgd", "optimizer.args.momentun=0.5", "data.options.downlod=1")
    lines = caught.value.lines
    assert any("optimizer.args.momentun: unknown option of optimizer sgd; did you mean "
               "momentum?" in line for line in lines), lines  # fmt: skip
    assert any("data.options.downlod: unknown option of dataset cifar10; did you mean "
               "download?" in line for line in lines), lines  # fmt: skip


@pytest.fixture
def text_like():
    DATASETS.register(
        "toy-lines",
        # a dataset the causal-lm task reads takes the text dataset's options
        DatasetEntry("lines of text", None, task="causal-lm", image=False, options=TextOptions),
    )
    yield "toy-lines"
    DATASETS.unregister("toy-lines")


def test_the_task_a_dataset_is_read_by_comes_from_its_entry(text_like):
    lm = ["task.kind=causal-lm", "model.arch=hf", f"data.dataset={text_like}"]
    assert check(_config(*lm, "data.options.train_file=d.jsonl")) == []
    assert check(_config(*lm, "data.train_file=d.jsonl")) == []  # the old flat spelling
    assert any("data.options.train_file is not set" in p for p in check(_config(*lm)))
    problems = check(_config(f"data.dataset={text_like}"))
    assert any(
        f"task.kind = 'image-classification': data.dataset {text_like} need task.kind = "
        "'causal-lm'" in p
        for p in problems
    ), problems
    problems = check(_config("task.kind=causal-lm", "model.arch=hf", "data.dataset=digits"))
    assert any(
        f"data.dataset = 'digits': task causal-lm reads text or {text_like} records" in p
        for p in problems
    ), problems
