"""The environment layer: tracker variables become run-config values with their source."""

from __future__ import annotations

from trainforge.config.environment import ENV_FIELDS, environment_layer
from trainforge.config.schema import LoggingConfig, RunConfig, leaf_paths


def test_every_tracker_variable_names_a_schema_field():
    fields = set(leaf_paths(RunConfig))
    for name, (path, _) in ENV_FIELDS.items():
        assert path in fields, f"{name} -> {path} is not a run-config field"


def test_variables_become_nested_values_with_their_sources():
    env = {
        "WANDB_PROJECT": "gemma3",
        "WANDB_ENTITY": "lab",
        "WANDB_RUN_GROUP": "sweep-1",
        "WANDB_DIR": "/tmp/wb",
        "WANDB_MODE": "online",
        "MLFLOW_TRACKING_URI": "http://mlflow:5000",
        "MLFLOW_EXPERIMENT_NAME": "g2p",
        "HOME": "/root",  # not a tracker variable: ignored
    }
    layer, sources = environment_layer(env)
    assert layer == {
        "logging": {
            "wandb_project": "gemma3",
            "wandb_entity": "lab",
            "wandb_run_group": "sweep-1",
            "wandb_dir": "/tmp/wb",
            "wandb_mode": "online",
            "mlflow_tracking_uri": "http://mlflow:5000",
            "mlflow_experiment": "g2p",
        }
    }
    assert sources["logging.wandb_project"] == "env WANDB_PROJECT"
    assert sources["logging.mlflow_experiment"] == "env MLFLOW_EXPERIMENT_NAME"
    assert len(sources) == 7
    LoggingConfig.model_validate(layer["logging"])  # every value passes the schema


def test_wandb_modes_as_wandb_defines_them():
    assert environment_layer({"WANDB_MODE": "dryrun"})[0] == {"logging": {"wandb_mode": "offline"}}
    assert environment_layer({"WANDB_MODE": "disabled"}) == (
        {"logging": {"wandb": False}},
        {"logging.wandb": "env WANDB_MODE"},
    )
    assert environment_layer({"WANDB_MODE": "nonsense"}) == ({}, {})


def test_empty_values_and_library_variables_set_nothing():
    env = {
        "WANDB_PROJECT": " ",
        "HF_HOME": "/hf",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    assert environment_layer(env) == ({}, {})


def test_a_resume_keeps_the_recorded_tracker_variables_unless_set_again(tmp_path):
    """run.json's recipe (ResolvedConfig.layers) holds the environment the run started with,
    so a resume from a shell without WANDB_PROJECT stays in the run's W&B project."""
    import json

    from trainforge.config import load

    config = tmp_path / "run.yaml"
    config.write_text("task: {kind: image-classification}\n")
    first = load(config, profile="cpu", env={"WANDB_PROJECT": "g2p", "WANDB_ENTITY": "lab"})
    recorded = json.loads(json.dumps(first.layers))  # as run.json stores it

    resumed = load(config, profile="cpu", env={}, recorded=recorded)
    assert resumed.config.logging.wandb_project == "g2p"
    assert resumed.config.logging.wandb_entity == "lab"
    assert resumed.sources["logging.wandb_project"] == "env WANDB_PROJECT (at the run's start)"

    changed = load(config, profile="cpu", env={"WANDB_PROJECT": "new"}, recorded=recorded)
    assert changed.config.logging.wandb_project == "new"
    assert changed.config.logging.wandb_entity == "lab"
    assert changed.sources["logging.wandb_project"] == "env WANDB_PROJECT"
