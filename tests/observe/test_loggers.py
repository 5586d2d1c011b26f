"""The loggers on the real training loop, read back by their own readers: W&B offline with no
key anywhere, TensorBoard weight histograms exactly every K steps, learning rate and gradient
norm in TensorBoard and MLflow, and MLflow writing to a configured tracking URI."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from trainforge.engine.trainer import Trainer
from trainforge.observe.loggers import TensorBoardLogger, build_loggers
from trainforge.observe.reporting import MetricsCallback

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from conftest import make_config, make_task

CPU = torch.device("cpu")


def fit(run_dir: Path, loggers, *, steps: int, logging_steps: int, histogram_steps=None):
    cfg = make_config(**{"training.max_steps": steps, "training.per_device_train_batch_size": 8})
    callback = MetricsCallback(loggers, logging_steps, histogram_steps=histogram_steps)
    trainer = Trainer(
        make_task(n=400, batch_size=8), cfg, run_dir=run_dir, device=CPU, callbacks=[callback]
    )
    trainer.fit()
    return trainer


def tensorboard(log_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir), size_guidance={"histograms": 0, "scalars": 0})
    events.Reload()
    return events


def test_weight_histograms_appear_exactly_every_k_steps(tmp_path):
    k = 3
    fit(tmp_path, [TensorBoardLogger(tmp_path / "tb")], steps=10, logging_steps=5,
        histogram_steps=k)  # fmt: skip
    events = tensorboard(tmp_path / "tb")
    weights = [t for t in events.Tags()["histograms"] if t.startswith("weights/")]
    # Linear(8, 32) and Linear(32, 3): two weights and two biases, each on the same steps.
    assert sorted(weights) == ["weights/0.bias", "weights/0.weight", "weights/3.bias",
                               "weights/3.weight"]  # fmt: skip
    for tag in weights:
        assert [e.step for e in events.Histograms(tag)] == [3, 6, 9]
    assert set(events.Tags()["histograms"]) == set(weights)
    # What the histogram holds is the layer's weights: 8 x 32 values.
    assert events.Histograms("weights/0.weight")[0].histogram_value.num == 256


@pytest.mark.slow  # MLflow's import and store set-up take several seconds
def test_lr_and_grad_norm_reach_tensorboard_and_a_configured_mlflow_uri(tmp_path):
    """`logging.mlflow_tracking_uri` pointing elsewhere is where the run goes: nothing is
    written to the run folder's default store."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    store = tmp_path / "elsewhere" / "tracking.db"
    store.parent.mkdir()
    uri = f"sqlite:///{store}"
    run_dir = tmp_path / "run"
    cfg = make_config(
        **{
            "logging.tensorboard": "true",
            "logging.mlflow": "true",
            "logging.mlflow_tracking_uri": uri,
            "logging.mlflow_experiment": "elsewhere",
        }
    )
    loggers = build_loggers(cfg.logging, run_dir, "uri-run")
    fit(run_dir, loggers, steps=6, logging_steps=3)

    assert store.is_file() and not (run_dir / "mlflow.db").exists()
    client = MlflowClient(tracking_uri=uri)
    (found,) = client.search_runs([client.get_experiment_by_name("elsewhere").experiment_id])
    assert found.info.run_name == "uri-run" and found.info.status == "FINISHED"
    events = tensorboard(run_dir / "tensorboard")
    for key in ("lr", "grad_norm"):
        history = client.get_metric_history(found.info.run_id, f"train/{key}")
        scalars = events.Scalars(f"train/{key}")
        assert [m.step for m in history] == [e.step for e in scalars] == [3, 6]
        for metric, scalar in zip(history, scalars, strict=True):
            assert metric.value > 0
            assert scalar.value == pytest.approx(metric.value, rel=1e-6)  # TB keeps float32
    lrs = [m.value for m in client.get_metric_history(found.info.run_id, "train/lr")]
    assert lrs == [pytest.approx(cfg.optimizer.learning_rate)] * 2  # constant schedule


def test_wandb_offline_run_needs_no_key(tmp_path, monkeypatch):
    """No WANDB_API_KEY, no netrc, no W&B settings file: the offline run folder appears."""
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("NETRC", str(home / ".netrc"))  # does not exist
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(home / "wandb-config"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_dir = tmp_path / "run"
    cfg = make_config(**{"logging.wandb": "true"})
    assert cfg.logging.wandb_mode == "offline"  # the default
    loggers = build_loggers(cfg.logging, run_dir, "offline-run")
    fit(run_dir, loggers, steps=4, logging_steps=2)  # its end calls run.finish()
    # finish() marks the run complete; the W&B service process writes the .wandb file and
    # closes it when it shuts down. teardown() waits for that (a CLI run gets it at exit),
    # so the file is complete here however loaded the machine is.
    import wandb

    wandb.teardown()

    (offline,) = (run_dir / "wandb").glob("offline-run-*")
    (data,) = offline.glob("run-*.wandb")
    assert data.stat().st_size > 0
    recorded = data.read_bytes()
    assert b"train/loss" in recorded and b"train/lr" in recorded
    assert not (home / ".netrc").exists()  # nothing asked for or stored a key


@pytest.mark.parametrize(
    ("missing", "said"),
    [
        ("mlflow", "the mlflow package is not installed"),
        # mlflow-skinny's SQLite store imports `cryptography`, which a machine may lack: the
        # line must name that module, not call mlflow missing (seen on a lent GPU machine)
        (
            "cryptography",
            "the mlflow package is installed but could not be imported "
            "(No module named 'cryptography')",
        ),
    ],
)
def test_a_missing_logger_package_and_a_missing_dependency_read_differently(
    tmp_path, monkeypatch, missing, said
):
    from dataclasses import replace

    from trainforge.errors import UserError
    from trainforge.registry import LOGGERS

    def factory(*args):
        raise ModuleNotFoundError(f"No module named '{missing}'", name=missing)

    monkeypatch.setitem(LOGGERS._entries, "mlflow", replace(LOGGERS.get("mlflow"), factory=factory))
    cfg = make_config().logging.model_copy(update={"mlflow": True})
    with pytest.raises(UserError) as caught:
        build_loggers(cfg, tmp_path)
    assert said in str(caught.value)
    assert "set logging.mlflow=false" in str(caught.value)


def test_tensorboard_checksums_in_c_equal_tensorboards_own(tmp_path: Path) -> None:
    """The C checksum gives TensorBoard's own masked CRC32C, and the events it writes read
    back through TensorBoard's checksum-verifying reader."""
    import random

    pytest.importorskip("google_crc32c")
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
    from tensorboard.summary.writer import record_writer

    from trainforge.observe.loggers import masked_crc32c_c

    rng = random.Random(0)
    for size in (0, 1, 7, 8, 12, 63, 4096):
        data = bytes(rng.randrange(256) for _ in range(size))
        assert masked_crc32c_c(data) == masked_crc32c(data)
    logger = TensorBoardLogger(tmp_path / "tb")
    assert record_writer.masked_crc32c is masked_crc32c_c
    logger.log("train", {"loss": 0.5}, 3, 0.1)
    logger.close()
    (events,) = (tmp_path / "tb").glob("events.out.tfevents.*")
    tags = [
        (value.tag, event.step)
        for event in EventFileLoader(str(events)).Load()
        for value in event.summary.value
    ]
    assert tags == [("train/loss", 3)]
