"""Learning-rate scaling against the recipe's reference batch (the notes' rule): only the
command line changes the effective batch, never the profile or the process count."""

from __future__ import annotations

import pytest

from trainforge.config import Target, finalize
from trainforge.config.loading import load
from trainforge.config.lr_scaling import scaled_rate

FILE = """
training: {per_device_train_batch_size: 24, gradient_accumulation_steps: 1}
optimizer: {learning_rate: 3.0e-4}
"""
CPU = Target("cpu", False, "test cpu")


@pytest.fixture
def cfg_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(FILE)
    return path


def plan(path, *overrides, flags=None, world_size=1, profile="cpu"):
    resolved = load(path, overrides=list(overrides), profile=profile, flags=flags or {})
    final = finalize(resolved, CPU, world_size)
    return final.config, "\n".join(final.notes)


def test_the_notes_example_linear(cfg_file):
    config, line = plan(cfg_file, "training.per_device_train_batch_size=20")
    assert config.optimizer.learning_rate == pytest.approx(2.5e-4)
    assert "0.0003 for effective batch 24 -> 0.00025 for effective batch 20 (linear" in line


def test_sqrt_none_and_unchanged(cfg_file):
    config, _ = plan(
        cfg_file, "training.per_device_train_batch_size=96", "optimizer.lr_scaling=sqrt"
    )
    assert config.optimizer.learning_rate == pytest.approx(6e-4)
    config, line = plan(
        cfg_file, "training.per_device_train_batch_size=20", "optimizer.lr_scaling=none"
    )
    assert config.optimizer.learning_rate == 3e-4 and line == ""
    config, line = plan(cfg_file)
    assert config.optimizer.learning_rate == 3e-4 and line == ""


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 8])
def test_the_process_count_never_changes_batch_or_rate(cfg_file, world_size):
    config, _ = plan(cfg_file, world_size=world_size)
    t = config.training
    assert config.optimizer.learning_rate == 3e-4
    assert t.per_device_train_batch_size * t.gradient_accumulation_steps * world_size == 24
    assert t.global_batch_size == 24


def test_explicit_reference_and_a_rate_given_on_the_command_line(cfg_file):
    config, _ = plan(cfg_file, "optimizer.reference_batch_size=48")
    assert config.optimizer.learning_rate == pytest.approx(1.5e-4)
    config, line = plan(
        cfg_file, "training.per_device_train_batch_size=20", flags={"learning_rate": 1e-3}
    )
    assert config.optimizer.learning_rate == 1e-3 and line == ""


def test_scaled_rate_is_the_rule():
    assert scaled_rate(3e-4, 24, 20, "linear")[0] == pytest.approx(2.5e-4)
    assert scaled_rate(3e-4, 24, 96, "sqrt")[0] == pytest.approx(6e-4)
    assert scaled_rate(3e-4, 24, 20, "none") == (3e-4, "")
