"""Honest numbers: data-wait share, throughput, FLOPs/MFU, fast validation, trackers read by
their own readers, and secrets that never reach a file of the run."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
import torch

from trainforge.engine.callbacks import Callback, EvalCadence
from trainforge.engine.trainer import Trainer
from trainforge.hardware.peaks import peak_tflops
from trainforge.observe.reporting import MetricsCallback

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from conftest import make_config, make_task

REPO = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")


class ListLogger:
    def __init__(self) -> None:
        self.records: list[tuple[str, dict, int]] = []

    def log(self, split, metrics, step, epoch):
        self.records.append((split, dict(metrics), step))

    def log_params(self, params):
        self.params = params

    def close(self):
        pass

    def split(self, name):
        return [m for s, m, _ in self.records if s == name]


class SleepyLoader:
    """A train loader that takes `delay_s` to produce each batch."""

    def __init__(self, loader, delay_s: float) -> None:
        self.loader = loader
        self.delay_s = delay_s
        self.dataset = loader.dataset

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for batch in self.loader:
            time.sleep(self.delay_s)
            yield batch

    def state_dict(self):
        return self.loader.state_dict()


@pytest.fixture
def one_thread():
    """Tiny ops with two OpenMP threads on a busy 2-core machine stall on thread hand-offs;
    one thread keeps the compute time what the test says it is."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_data_wait_share_and_throughput_match_known_sleeps(tmp_path, one_thread):
    """Loader 30 ms per batch, compute 30 ms per micro-batch, accumulation 2: data-wait
    share 1/2 within 10 %; 16 samples per optimizer step of about 60 ms."""
    cfg = make_config(
        **{
            "training.max_steps": 12,
            "training.per_device_train_batch_size": 8,
            "training.gradient_accumulation_steps": 2,
            "logging.logging_steps": 6,
        }
    )
    task = make_task(n=400, batch_size=8)
    task.train_loader = SleepyLoader(task.train_loader, 0.030)
    step = task.step

    def slow_step(model, batch):
        time.sleep(0.030)
        return step(model, batch)

    task.step = slow_step
    logger = ListLogger()
    trainer = Trainer(
        task, cfg, run_dir=tmp_path, device=CPU, callbacks=[MetricsCallback([logger], 6)]
    )
    trainer.fit()
    windows = logger.split("train")
    assert len(windows) == 2
    for metrics in windows:
        assert metrics["data_wait_share"] == pytest.approx(0.5, rel=0.10)
        assert metrics["samples_per_s"] * metrics["step_time_s"] == pytest.approx(16)
        # Two micro-batches of 60 ms of sleeps each; never less, a little more for the work.
        assert 0.95 * 0.120 <= metrics["step_time_s"] <= 2 * 0.120


def test_evaluation_time_is_not_counted_as_training_time(tmp_path, one_thread):
    cfg = make_config(**{"training.max_steps": 6, "training.per_device_train_batch_size": 8})
    task = make_task(n=400, batch_size=8)
    evaluate = task.metrics

    def slow_metrics(*args):
        time.sleep(0.3)  # a slow validation between two logging points
        return evaluate(*args)

    logger = ListLogger()
    trainer = Trainer(
        task,
        cfg,
        run_dir=tmp_path,
        device=CPU,
        callbacks=[EvalCadence(3, None), MetricsCallback([logger], 6)],
    )
    task.metrics = slow_metrics
    trainer.fit()
    (metrics,) = logger.split("train")
    # 6 tiny steps take milliseconds; with the 0.3 s validations counted it would be > 0.1 s.
    assert metrics["step_time_s"] < 0.1


def test_flops_per_sample_are_counted_and_mfu_uses_the_peak(tmp_path):
    # Linear(8, 32) and Linear(32, 3): forward 2 * (8*32 + 32*3) = 704 FLOPs per sample;
    # backward: both weight gradients (704) + the input gradient of the second layer (192).
    cfg = make_config(**{"training.max_steps": 4, "training.per_device_train_batch_size": 16})
    logger = ListLogger()
    trainer = Trainer(
        make_task(n=64, batch_size=16),
        cfg,
        run_dir=tmp_path,
        device=CPU,
        callbacks=[MetricsCallback([logger], 4)],
        peak_tflops=1e-6,
    )
    trainer.fit()
    assert trainer.flops_per_sample == 704 + 704 + 192
    (metrics,) = logger.split("train")
    achieved = 1600 * metrics["samples_per_s"]
    assert metrics["model_tflops"] == pytest.approx(achieved / 1e12)
    assert metrics["mfu"] == pytest.approx(achieved / 1e6)


def test_peak_table():
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.0
    assert peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0
    assert peak_tflops("NVIDIA H200", "fp16") == 989.0
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "fp32") == 19.5
    assert peak_tflops("NVIDIA GeForce RTX 4090", "bf16") == 165.2
    assert peak_tflops("Orin (nvgpu)", "fp16") == 42.5
    assert peak_tflops("NVIDIA GB10", "bf16") == 62.5
    assert peak_tflops("Tesla K80", "fp32") is None and peak_tflops(None, "bf16") is None


class Counter(Callback):
    def __init__(self) -> None:
        self.full = 0
        self.fast = 0

    def on_eval_end(self, trainer, metrics):
        self.full += 1

    def on_fast_eval_end(self, trainer, metrics):
        self.fast += 1


def test_fast_validation_uses_a_fixed_subset_and_triggers_full_validation(tmp_path):
    cfg = make_config(
        **{
            "training.max_steps": 12,
            "training.per_device_train_batch_size": 8,
            "evaluation.fast_eval_steps": 2,
            "evaluation.fast_eval_fraction": 0.25,
            "optimizer.learning_rate": 0.05,
        }
    )
    task = make_task(n=200, batch_size=8)
    counter = Counter()
    trainer = Trainer(
        task,
        cfg,
        run_dir=tmp_path,
        device=CPU,
        callbacks=[EvalCadence(None, None, 2, True), counter],
    )
    trainer.fit()
    subset = trainer._fast_val_loader.dataset
    assert len(subset) == 8 and list(subset.indices) == [0, 4, 9, 13, 18, 22, 27, 31]
    assert counter.fast == 6
    # Every improvement of the fast metric ran one full validation, and only then.
    assert 1 <= counter.full <= counter.fast
    first, _ = trainer.evaluate_fast()
    second, _ = trainer.evaluate_fast()
    assert first == second  # the same samples, the same model: the same numbers


def test_trackers_are_readable_by_their_own_readers_and_secrets_stay_out(tmp_path, cli):
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    secrets = {"WANDB_API_KEY": "planted-wandb-key-7f3a9c", "HF_TOKEN": "hf_plantedtoken12345"}
    result = cli(
        "train",
        "config/vit_digits.yaml",
        *("--set", f"output.dir={tmp_path}", "--set", "output.run_name=obs"),
        *("--set", "model.embedding_dim=32", "--set", "model.num_layers=1"),
        *("--set", "model.num_heads=2", "--set", "model.mlp_size=32"),
        *("--set", "training.max_steps=20", "--set", "logging.logging_steps=5"),
        *("--set", "evaluation.eval_steps=10", "--set", "logging.histogram_steps=10"),
        *("--set", "logging.mlflow=true", "--set", "logging.wandb=true"),
        *("--set", "hardware.telemetry_interval_s=0.2"),
        env={**secrets, "WANDB_SILENT": "true"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    run = tmp_path / "obs"

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"histograms": 0})
    events.Reload()
    tags = events.Tags()
    assert {"train/loss", "train/samples_per_s", "val/accuracy"} <= set(tags["scalars"])
    assert [e.step for e in events.Scalars("train/loss")] == [5, 10, 15, 20]
    assert any(t.startswith("weights/") for t in tags["histograms"])
    assert any(t.startswith("telemetry/") for t in tags["scalars"])

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run / 'mlflow.db'}")
    (found,) = client.search_runs([client.get_experiment_by_name("trainforge").experiment_id])
    history = client.get_metric_history(found.info.run_id, "train/loss")
    assert [m.step for m in history] == [5, 10, 15, 20]
    assert found.data.params["model.embedding_dim"] == "32"
    assert "val/accuracy" in found.data.metrics

    offline = list((run / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and list(offline[0].glob("run-*.wandb"))

    for path in run.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for value in secrets.values():
                assert value.encode() not in data, f"secret found in {path}"
    assert not any(v in result.stdout + result.stderr for v in secrets.values())
    assert os.environ.get("WANDB_API_KEY") != secrets["WANDB_API_KEY"]
