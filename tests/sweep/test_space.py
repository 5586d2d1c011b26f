"""The space file: every problem refused in one pass, presets, values written exactly."""

from __future__ import annotations

import math

import pytest
import yaml

from fakes.sweeps import DIGITS, TINY, refuse_sweep, run_sweep, sweep_args
from trainforge.sweep.space import LR_PRESETS, parse_space, set_flags, yaml_scalar


def test_a_bad_space_is_refused_in_one_pass_and_nothing_is_written(tmp_path, space_file):
    space = space_file(
        "params:\n"
        "  optimizer.learnin_rate: {log_uniform: [1.0e-4, 1.0e-2]}\n"  # unknown field
        "  model.mlp_dropout: {uniform: [0.3, 0.1]}\n"  # low > high
        "  model.embedding_dim: {choice: [64, wide]}\n"  # wrong type
        "  model.num_layers: {uniform: [1, 3]}\n"  # fractions for a whole-number field
        "  schedule.warmup_epochs: {log_uniform: [0, 5]}\n"  # log range at 0
    )
    done = refuse_sweep(tmp_path, sweep_args(space, 2, "bad"))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr
    assert len(lines) == 5, lines
    assert any(
        "params.optimizer.learnin_rate: unknown field; did you mean optimizer.learning_rate?"
        in line
        for line in lines
    )
    assert any("model.mlp_dropout: low 0.3 is not below high 0.1" in line for line in lines)
    assert any("model.embedding_dim = 'wide' is refused" in line for line in lines)
    assert any("model.num_layers: uniform draws fractions" in line for line in lines)
    assert any("log range must be above 0" in line for line in lines)
    assert not (tmp_path / "runs").exists()


def test_a_value_the_cross_field_rules_refuse_is_caught_before_any_trial(tmp_path, space_file):
    # 4 heads cannot split an embedding of 66.
    space = space_file("params:\n  model.embedding_dim: {choice: [64, 66]}\n")
    done = refuse_sweep(tmp_path, sweep_args(space, 2, "heads"))
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "model.embedding_dim = 66 is refused" in line and "num_heads" in line
    assert not (tmp_path / "runs").exists()


def test_an_entrys_options_are_searched_by_their_paths_and_misspellings_are_named(
    tmp_path, space_file
):
    """`data.options.*` and `optimizer.args.*` are fields of the entries the config picks
    (the digits data set, AdamW): a space searches them like any field."""
    space = space_file(
        "params:\n"
        "  optimizer.args.adam_beta3: {choice: [0.99, 0.999]}\n"  # misspelt
        "  data.options.val_fraction: {uniform: [0.1, 1.5]}\n"  # over 1: refused
    )
    done = refuse_sweep(tmp_path, sweep_args(space, 2, "options"))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert any("params.optimizer.args.adam_beta3: unknown field; did you mean "
               "optimizer.args.adam_beta2?" in line for line in lines), lines  # fmt: skip
    assert any("data.options.val_fraction = 1.5 is refused" in line for line in lines), lines
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_trials_train_with_the_entry_options_they_drew(tmp_path, space_file):
    space = space_file(
        "params:\n"
        "  optimizer.args.adam_beta2: {choice: [0.95, 0.99]}\n"
        "  data.options.val_fraction: {uniform: [0.1, 0.3]}\n"
    )
    done = run_sweep(tmp_path, sweep_args(space, 2, "drawn", "--max_steps", "3"))
    assert done.returncode == 0, done.stdout + done.stderr
    for number in range(2):
        trial = tmp_path / "runs" / "drawn" / f"trial-{number:03d}"
        resolved = yaml.safe_load((trial / "config.resolved.yaml").read_text())
        assert resolved["optimizer"]["args"]["adam_beta2"] in (0.95, 0.99)
        assert 0.1 <= resolved["data"]["options"]["val_fraction"] <= 0.3


def test_unknown_keys_distributions_and_presets_are_named():
    _, problems = parse_space(
        {"metrc": "accuracy", "lr": "warm", "params": {"a.b": {"normal": [0, 1]}}}, "s.yaml"
    )
    assert any("unknown key 'metrc'" in p for p in problems)
    assert any("'warm' is not a preset" in p for p in problems)
    assert any("unknown distribution 'normal'" in p for p in problems)


@pytest.mark.parametrize("preset", list(LR_PRESETS))
def test_a_learning_rate_preset_gives_the_guideline_range(preset):
    space, problems = parse_space({"lr": preset}, "s.yaml")
    assert not problems
    (param,) = space.params
    assert param.path == "optimizer.learning_rate" and param.kind == "log_uniform"
    assert (param.low, param.high) == LR_PRESETS[preset]
    assert LR_PRESETS["fine-tuning"] == (1e-4, 5e-4) and LR_PRESETS["transfer"] == (1e-5, 1e-4)


@pytest.mark.parametrize("value", [1e-05, 0.00044303752452182633, 3.0e-3, 128, 0.1, True, "x"])
def test_drawn_values_reach_the_trial_exactly(value):
    from trainforge.config.loading import parse_set_flag

    _, parsed = parse_set_flag(f"a={yaml_scalar(value)}")
    assert parsed == value and type(parsed) is type(value)
    if isinstance(value, float):
        assert math.copysign(1, parsed) == 1
    assert set_flags({"a.b": value})[0] == "--set"


def test_the_train_flags_and_the_metric_must_validate_too(tmp_path, space_file):
    space = space_file("lr: fine-tuning\n")
    done = refuse_sweep(tmp_path, sweep_args(space, 2, "flags", "--max_stepz", "3"))
    assert done.returncode == 2 and "max_steps" in done.stderr
    # perplexity is a causal-lm metric: the digits config cannot report it
    done = refuse_sweep(tmp_path, sweep_args(space, 2, "metric", "--metric", "perplexity"))
    assert done.returncode == 2 and "perplexity" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists()
    assert yaml.safe_load(DIGITS.read_text())["name"] == "vit-digits" and TINY


def test_the_lr_preset_under_params_is_pointed_to_its_place():
    _, problems = parse_space({"params": {"lr": "fine-tuning"}}, "space.yaml")
    assert problems == [
        "space.yaml: params.lr: fine-tuning is a learning-rate preset, a top-level key of the "
        "space file; move `lr: fine-tuning` out of params: (beside it)"
    ]
