"""WANDB_* and MLFLOW_* variables, through the environment layer into the logging config,
name the project, entity, group and experiment that the trackers' own clients read back."""

from __future__ import annotations

import pytest

from trainforge.config.environment import environment_layer
from trainforge.config.schema import LoggingConfig
from trainforge.observe.loggers import MlflowLogger, WandbLogger


def logging_from(env: dict[str, str], **fields) -> LoggingConfig:
    layer, _ = environment_layer(env)
    return LoggingConfig.model_validate({**layer.get("logging", {}), **fields})


@pytest.fixture
def wandb_home(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_PROJECT", "WANDB_DIR"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("NETRC", str(home / ".netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(home / "wandb-config"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    return home


def test_wandb_project_group_and_dir_from_the_environment(tmp_path, wandb_home):
    env = {
        "WANDB_PROJECT": "gemma3",
        "WANDB_RUN_GROUP": "g2p-sweep",
        "WANDB_DIR": str(tmp_path / "wb"),
    }
    cfg = logging_from(env, wandb=True)
    logger = WandbLogger(cfg, tmp_path / "run", "env-run")
    try:
        assert logger.run.project == "gemma3"
        assert logger.run.group == "g2p-sweep"
        logger.log("train", {"loss": 1.0}, 1, 0.1)
    finally:
        logger.close()
    # close() finishes the run; the W&B service process writes and closes the .wandb file
    # when it shuts down, and teardown() waits for that however loaded the machine is.
    import wandb

    wandb.teardown()
    (offline,) = (tmp_path / "wb" / "wandb").glob("offline-run-*")
    (data,) = offline.glob("run-*.wandb")
    recorded = data.read_bytes()
    assert b"gemma3" in recorded and b"g2p-sweep" in recorded
    assert not (tmp_path / "run" / "wandb").exists()


def test_config_file_value_beats_the_environment(tmp_path, wandb_home):
    layer, _ = environment_layer({"WANDB_PROJECT": "from-env"})
    # The file layer merges over the environment layer: its project wins.
    merged = {**layer["logging"], "wandb_project": "from-file", "wandb": True}
    logger = WandbLogger(LoggingConfig.model_validate(merged), tmp_path / "run", "file-run")
    try:
        assert logger.run.project == "from-file"
    finally:
        logger.close()


@pytest.mark.slow  # MLflow's import and store set-up take several seconds
def test_mlflow_experiment_and_uri_from_the_environment(tmp_path):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'tracking.db'}"
    env = {"MLFLOW_TRACKING_URI": uri, "MLFLOW_EXPERIMENT_NAME": "g2p-env"}
    logger = MlflowLogger(logging_from(env, mlflow=True), tmp_path / "run", "env-run")
    logger.log("train", {"loss": 0.5}, 3, 0.1)
    logger.close()
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("g2p-env")
    assert experiment is not None
    (found,) = client.search_runs([experiment.experiment_id])
    assert found.info.run_name == "env-run"
    assert [m.value for m in client.get_metric_history(found.info.run_id, "train/loss")] == [0.5]
    assert not (tmp_path / "run" / "mlflow.db").exists()
