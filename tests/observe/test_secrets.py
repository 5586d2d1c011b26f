"""Secret values from the environment are masked wherever trainforge writes text: `scrub` and
`scrub_mapping` directly, then a token pasted into config fields on its way to MLflow's params
and TensorBoard's config text, and into the config dump."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from trainforge.observe.loggers import MlflowLogger, TensorBoardLogger, flatten
from trainforge.observe.secrets import REDACTED, scrub, scrub_mapping, secret_values

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from conftest import make_config

TOKEN = "hf_plantedTOKEN0123456789"


def test_secret_values_come_from_secret_named_variables_only():
    env = {
        "HF_TOKEN": TOKEN,
        "WANDB_API_KEY": "0123456789abcdef0123",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG",
        "db_password": "correct-horse",  # names match in any case
        "GIT_CREDENTIALS": "https://me:pat@host",
        "PATH": "/usr/local/bin:/usr/bin",  # not secret-named: never masked
        "HOME": "/home/someone",
        "MY_KEY": "12345",  # too short to be a key: would mask ordinary text
    }
    values = secret_values(env)
    assert set(values) == {
        TOKEN,
        "0123456789abcdef0123",
        "wJalrXUtnFEMI/K7MDENG",
        "correct-horse",
        "https://me:pat@host",
    }
    assert [len(v) for v in values] == sorted((len(v) for v in values), reverse=True)


def test_scrub_masks_every_occurrence_and_a_longer_secret_whole():
    secrets = secret_values({"A_TOKEN": "abcdef12", "B_TOKEN": "abcdef1234567"})
    text = "one abcdef1234567 two abcdef12 three abcdef12"
    assert scrub(text, secrets) == f"one {REDACTED} two {REDACTED} three {REDACTED}"
    assert scrub("nothing secret here", secrets) == "nothing secret here"


def test_scrub_reads_the_environment_when_not_given_secrets(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("SOME_SETTING", "visible-value")
    assert scrub(f"{TOKEN} and visible-value") == f"{REDACTED} and visible-value"


def test_scrub_mapping_masks_nested_strings_and_keeps_other_values():
    data = {
        "notes": f"token {TOKEN}",
        "logging": {"mlflow_tracking_uri": f"https://user:{TOKEN}@mlflow.example", "steps": 5},
        "tags": ["fine", TOKEN],
        "pair": (TOKEN, 1.5),
        "flag": True,
        "none": None,
    }
    out = scrub_mapping(data, [TOKEN])
    assert out == {
        "notes": "token ***",
        "logging": {"mlflow_tracking_uri": "https://user:***@mlflow.example", "steps": 5},
        "tags": ["fine", "***"],
        "pair": ("***", 1.5),
        "flag": True,
        "none": None,
    }
    assert data["notes"] == f"token {TOKEN}"  # a copy: the config itself is untouched


def planted_config():
    """A run config with the token in free-text fields a user might paste it into."""
    return make_config(
        **{
            "notes": f"pulled with {TOKEN}",
            "output.run_name": f"run-{TOKEN}",
            "logging.mlflow_experiment": f"exp-{TOKEN}",
        }
    )


@pytest.mark.slow  # MLflow's import and store set-up take several seconds
def test_mlflow_params_and_tensorboard_config_text_mask_a_token(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    config = planted_config()
    params = flatten(config.model_dump(mode="json"))
    assert params["notes"] == f"pulled with {TOKEN}"  # without the scrubber it would leak

    mlflow_logger = MlflowLogger(config.logging, tmp_path, "run")
    mlflow_logger.log_params(params)
    mlflow_logger.close()
    client = MlflowClient(tracking_uri=mlflow_logger.tracking_uri)
    logged = client.get_run(mlflow_logger.run_id).data.params
    assert logged["notes"] == "pulled with ***"
    assert logged["output.run_name"] == "run-***"
    assert logged["logging.mlflow_experiment"] == "exp-***"
    assert not any(TOKEN in value for value in logged.values())

    tb = TensorBoardLogger(tmp_path / "tb")
    tb.log_params(params)
    tb.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    (text,) = events.Tensors("config/text_summary")
    shown = text.tensor_proto.string_val[0].decode()
    assert "notes: pulled with ***" in shown and TOKEN not in shown
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_config_dump_masks_a_token(monkeypatch):
    """config.resolved.yaml, each checkpoint's config.yaml and the report's config section
    are all `run.recipe.config_yaml`; it must pass the config through `scrub_mapping`."""
    from trainforge.run.recipe import config_yaml

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    dump = config_yaml(planted_config())
    assert yaml.safe_load(dump)["notes"] == "pulled with ***"
    assert TOKEN not in dump
