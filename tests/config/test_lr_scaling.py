"""Learning-rate scaling against the config file's reference batch (the notes' rule)."""

from __future__ import annotations

import pytest

from trainforge.config.loading import load
from trainforge.config.lr_scaling import scale_learning_rate

FILE = """
training: {per_device_train_batch_size: 24, gradient_accumulation_steps: 1}
optimizer: {learning_rate: 3.0e-4}
"""


@pytest.fixture
def cfg_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(FILE)
    return path


def resolve(path, *overrides, flags=None):
    return load(path, overrides=list(overrides), profile="cpu", flags=flags or {})


def test_the_notes_example_linear(cfg_file):
    config, line = scale_learning_rate(resolve(cfg_file, "training.per_device_train_batch_size=20"))
    assert config.optimizer.learning_rate == pytest.approx(2.5e-4)
    assert "0.0003 for global batch 24 -> 0.00025 for global batch 20 (linear scaling" in line


def test_sqrt_none_unchanged_and_world_size(cfg_file):
    config, _ = scale_learning_rate(
        resolve(cfg_file, "training.per_device_train_batch_size=96", "optimizer.lr_scaling=sqrt")
    )
    assert config.optimizer.learning_rate == pytest.approx(6e-4)
    config, line = scale_learning_rate(
        resolve(cfg_file, "training.per_device_train_batch_size=20", "optimizer.lr_scaling=none")
    )
    assert config.optimizer.learning_rate == 3e-4 and line == ""
    config, line = scale_learning_rate(resolve(cfg_file))
    assert config.optimizer.learning_rate == 3e-4 and line == ""
    # 12 per process x 2 processes = the reference 24: nothing to scale.
    config, line = scale_learning_rate(
        resolve(cfg_file, "training.per_device_train_batch_size=12"), world_size=2
    )
    assert config.optimizer.learning_rate == 3e-4 and line == ""


def test_explicit_reference_and_a_rate_given_on_the_command_line(cfg_file):
    config, _ = scale_learning_rate(resolve(cfg_file, "optimizer.reference_batch_size=48"))
    assert config.optimizer.learning_rate == pytest.approx(1.5e-4)
    resolved = resolve(
        cfg_file, "training.per_device_train_batch_size=20", flags={"learning_rate": 1e-3}
    )
    config, line = scale_learning_rate(resolved)
    assert config.optimizer.learning_rate == 1e-3 and line == ""
