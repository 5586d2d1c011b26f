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


class FakeClock:
    """The trainer's clock (`time` in trainforge.engine.trainer), moved only by `sleep`.

    The timing arithmetic is then checked exactly, whatever else the machine is doing: real
    work takes no time on this clock, a "slow" loader or step takes exactly what it sleeps.
    """

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def __getattr__(self, name: str):
        return getattr(time, name)


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    import trainforge.engine.trainer as trainer_module

    fake = FakeClock()
    monkeypatch.setattr(trainer_module, "time", fake)
    return fake


class SleepyLoader:
    """A train loader that takes `delay_s` (on `clock`) to produce each batch."""

    def __init__(self, loader, delay_s: float, clock: FakeClock) -> None:
        self.loader = loader
        self.delay_s = delay_s
        self.clock = clock
        self.dataset = loader.dataset

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for batch in self.loader:
            self.clock.sleep(self.delay_s)
            yield batch

    def state_dict(self):
        return self.loader.state_dict()


def test_data_wait_share_and_throughput_match_known_sleeps(tmp_path, clock):
    """Loader 30 ms per batch, compute 30 ms per micro-batch, accumulation 2: data-wait
    share 1/2; 16 samples per optimizer step of 120 ms (on the trainer's clock)."""
    cfg = make_config(
        **{
            "training.max_steps": 12,
            "training.per_device_train_batch_size": 8,
            "training.gradient_accumulation_steps": 2,
            "logging.logging_steps": 6,
        }
    )
    task = make_task(n=400, batch_size=8)
    task.train_loader = SleepyLoader(task.train_loader, 0.030, clock)
    step = task.step

    def slow_step(model, batch):
        clock.sleep(0.030)
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
        assert metrics["data_wait_share"] == pytest.approx(0.5)
        assert metrics["samples_per_s"] * metrics["step_time_s"] == pytest.approx(16)
        # Two micro-batches of 60 ms of sleeps each.
        assert metrics["step_time_s"] == pytest.approx(0.120)


def test_evaluation_time_is_not_counted_as_training_time(tmp_path, clock):
    cfg = make_config(**{"training.max_steps": 6, "training.per_device_train_batch_size": 8})
    task = make_task(n=400, batch_size=8)
    evaluate = task.metrics

    def slow_metrics(*args):
        clock.sleep(0.3)  # a slow validation between two logging points
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
    # The steps take no time on the clock; with the 0.3 s validations counted it would be 0.1 s.
    assert metrics["step_time_s"] == pytest.approx(0.0, abs=1e-9)


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
    assert trainer.state.flops_per_sample == 704 + 704 + 192
    (metrics,) = logger.split("train")
    achieved = 1600 * metrics["samples_per_s"]
    assert metrics["model_tflops"] == pytest.approx(achieved / 1e12)
    assert metrics["mfu"] == pytest.approx(achieved / 1e6)


class EvalRecorder(Callback):
    """The steps of every full and fast validation, and the fast metrics."""

    def __init__(self) -> None:
        self.full: list[int] = []
        self.fast: list[tuple[int, dict]] = []

    def on_eval_end(self, trainer, metrics):
        self.full.append(trainer.state.global_step)

    def on_fast_eval_end(self, trainer, metrics):
        self.fast.append((trainer.state.global_step, dict(metrics)))


def improved_steps(fast: list[tuple[int, dict]], key: str, greater: bool) -> set[int]:
    """Steps at which the fast metric beat every earlier one, worked out here."""
    best, steps = None, set()
    for step, metrics in fast:
        value = metrics[key]
        if best is None or (value > best if greater else value < best):
            best = value
            steps.add(step)
    return steps


def cadence_run(tmp_path, *, scripted=None, **sets):
    """12 steps, fast validation every 2, full every 6. `scripted` replaces the fast
    subset's metric values (in order) so improvements fall where the test says."""
    cfg = make_config(
        **{
            "training.max_steps": 12,
            "training.per_device_train_batch_size": 8,
            "evaluation.eval_every_epochs": "null",
            "evaluation.fast_eval_steps": 2,
            "evaluation.eval_steps": 6,
            "optimizer.learning_rate": 0.05,
            **sets,
        }
    )
    e = cfg.evaluation
    recorder = EvalRecorder()
    cadence = EvalCadence(
        e.eval_steps, e.eval_every_epochs, e.fast_eval_steps, e.full_eval_on_fast_improvement
    )
    trainer = Trainer(
        make_task(n=200, batch_size=8),
        cfg,
        run_dir=tmp_path,
        device=CPU,
        callbacks=[cadence, recorder],
    )
    if scripted is not None:
        real_run_eval, values = trainer.validation.run, iter(scripted)

        def run_eval(loader):
            metrics = real_run_eval(loader)
            if loader is trainer.validation.fast_loader:
                metrics.update(next(values))
            return metrics

        trainer.validation.run = run_eval
    trainer.fit()
    return trainer, recorder


@pytest.mark.parametrize(
    ("metric", "values", "improved"),
    [
        ("accuracy", [0.5, 0.4, 0.6, 0.6], {2, 8}),  # equal is not an improvement
        ("loss", [1.0, 0.9, 1.2, 0.8], {2, 4, 10}),  # lower is better
    ],
)
def test_full_validation_runs_exactly_when_fast_improves_and_on_its_cadence(
    tmp_path, metric, values, improved
):
    trainer, recorder = cadence_run(
        tmp_path,
        scripted=[{metric: v} for v in values],
        **{"evaluation.metric_for_best_model": metric},
    )
    # Fast validation at every 2nd step except where full validation is due anyway (6, 12).
    assert [step for step, _ in recorder.fast] == [2, 4, 8, 10]
    assert improved_steps(recorder.fast, metric, metric == "accuracy") == improved
    assert recorder.full == sorted(improved | {6, 12})
    assert trainer.state.best_fast == (max if metric == "accuracy" else min)(values)


def test_without_full_on_improvement_full_validation_keeps_its_own_cadence(tmp_path):
    _, recorder = cadence_run(
        tmp_path,
        scripted=[{"accuracy": v} for v in (0.5, 0.6, 0.7, 0.8)],
        **{"evaluation.full_eval_on_fast_improvement": "false"},
    )
    assert len(recorder.fast) == 4 and recorder.full == [6, 12]


def test_fast_validation_uses_a_fixed_subset_and_triggers_full_validation(tmp_path):
    """Real metrics this time: the full validations are the cadence's plus exactly the steps
    where the recorded fast accuracy improved."""
    trainer, recorder = cadence_run(
        tmp_path, **{"evaluation.fast_eval_fraction": 0.25, "evaluation.eval_steps": 5}
    )
    subset = trainer.validation.fast_loader.dataset
    assert len(subset) == 8 and list(subset.indices) == [0, 4, 9, 13, 18, 22, 27, 31]
    assert [step for step, _ in recorder.fast] == [2, 4, 6, 8, 12]  # 10: full is due
    improved = improved_steps(recorder.fast, "accuracy", True)
    assert 2 in improved  # the first fast validation always counts as an improvement
    # 5 and 10 by cadence, 12: a run that validates by step closes with a full validation
    assert recorder.full == sorted(improved | {5, 10, 12})
    first, _ = trainer.evaluate_fast()
    second, _ = trainer.evaluate_fast()
    assert first == second  # the same samples, the same model: the same numbers


def test_default_fast_subset_is_ten_percent_of_the_real_validation_set(tmp_path):
    """The digits data set's 359 held-out images (20 % of 1797): fast validation evaluates
    36 of them, 10 % rounded, the same ones each time."""
    from trainforge.config.loading import load
    from trainforge.tasks import build_task

    tiny = ["model.embedding_dim=16", "model.num_layers=1", "model.num_heads=2",
            "model.mlp_size=16", "logging.progress_bar=false"]  # fmt: skip
    cfg = load(REPO / "config" / "vit_digits.yaml", overrides=tiny, profile="cpu").config
    assert cfg.evaluation.fast_eval_fraction == 0.1  # not set anywhere: the default
    task = build_task(cfg)
    total = len(task.val_loader.dataset)
    assert total == 359
    seen: list[int] = []
    step = task.step

    def counting_step(model, batch):
        seen.append(task.batch_size(batch))
        return step(model, batch)

    task.step = counting_step
    trainer = Trainer(task, cfg, run_dir=tmp_path, device=CPU, callbacks=[])
    trainer.evaluate_fast()
    assert sum(seen) == len(trainer.validation.fast_loader.dataset) == 36 == round(0.1 * total)
    indices = trainer.validation.fast_loader.dataset.indices
    assert indices[0] == 0 and indices[-1] == total - 1  # spread over the whole set
    assert len(set(indices)) == 36
    seen.clear()
    trainer.evaluate_fast()
    assert sum(seen) == 36 and trainer.validation.fast_loader.dataset.indices == indices


def test_trackers_are_readable_by_their_own_readers_and_secrets_stay_out(tmp_path, cli):
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    secrets = {"WANDB_API_KEY": "planted-wandb-key-7f3a9c", "HF_TOKEN": "hf_plantedtoken12345"}
    # A child: the secrets live in its environment only, and W&B's service is its own.
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
