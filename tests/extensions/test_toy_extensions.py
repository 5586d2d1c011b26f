"""Acceptance: a dataset, an optimizer, a logger and an export format, each added by one file
that only registers it, run end to end: a real (tiny) training run in this process, then an
export of the finished run in the toy format, read back and benchmarked through its runtime.
"""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

from trainforge.config import validate
from trainforge.export import export, find_artifacts, load_artifact
from trainforge.export.options import ExportOptions, check_formats
from trainforge.hardware import detect
from trainforge.registry import DATASETS, EXPORT_FORMATS, LOGGERS, OPTIMIZERS

TOYS = {
    "toy_dataset": DATASETS,
    "toy_optimizer": OPTIMIZERS,
    "toy_logger": LOGGERS,
    "toy_export": EXPORT_FORMATS,
}
PACKAGE = "extensions"  # tests/ is on the path (pyproject's pythonpath)


@pytest.fixture(scope="module")
def toys():
    """Import the four files (which registers them); unregister them afterwards."""
    modules = {name: importlib.import_module(f"{PACKAGE}.{name}") for name in TOYS}
    yield modules
    for name, registry in TOYS.items():
        registry.unregister(modules[name].NAME)
        sys.modules.pop(f"{PACKAGE}.{name}", None)


def _train_entry():
    from trainforge.train import train

    return train


@pytest.fixture(scope="module")
def toy_run(toys, tmp_path_factory):
    out = tmp_path_factory.mktemp("toy-runs")
    overrides = [
        f"output.dir={out}",
        "output.run_name=toy",
        f"data.dataset={toys['toy_dataset'].NAME}",
        f"optimizer.name={toys['toy_optimizer'].NAME}",
        f"logging.loggers=[{toys['toy_logger'].NAME}]",
        "optimizer.learning_rate=0.05",
        "model.patch_size=2",
        "model.embedding_dim=16",
        "model.num_layers=1",
        "model.num_heads=2",
        "model.mlp_size=32",
        "training.max_steps=8",
        "training.per_device_train_batch_size=16",
        "training.num_threads=1",
        "training.device=cpu",
        "schedule.warmup_steps=0",
        "evaluation.eval_steps=4",
        "checkpoint.save_every_epochs=null",
        "logging.logging_steps=2",
        "logging.tensorboard=false",
        "logging.progress_bar=false",
        "hardware.telemetry=false",
    ]
    platform = detect()
    resolved = validate(None, platform=platform, profile="cpu", overrides=overrides)
    summary = _train_entry()(resolved, platform)
    return summary


def test_the_toys_are_registered_and_offered(toys):
    from trainforge.data.catalog import image_dataset_names

    assert toys["toy_dataset"].NAME in image_dataset_names()
    assert check_formats(["all"])[-1] == toys["toy_export"].NAME


def test_a_run_trains_on_the_toy_dataset_with_the_toy_optimizer_and_logger(toys, toy_run):
    logger = toys["toy_logger"]
    assert toy_run.global_step == 8
    assert toys["toy_optimizer"].CountingSGD.steps == 8
    splits = {split for split, _, _ in logger.RECORDS}
    assert {"train", "val"} <= splits
    train_steps = [step for split, _, step in logger.RECORDS if split == "train"]
    assert train_steps and max(train_steps) <= 8
    eval_metrics = [m for split, m, _ in logger.RECORDS if split == "val"]
    assert eval_metrics and all("accuracy" in m and "loss" in m for m in eval_metrics)
    assert logger.PARAMS and logger.PARAMS[0]["data.dataset"] == toys["toy_dataset"].NAME
    assert [toy_run.run_dir.name] == logger.CLOSED


def test_the_finished_run_exports_in_the_toy_format_and_runs(toys, toy_run):
    fmt = toys["toy_export"]
    (result,) = export(toy_run.run_dir, [fmt.NAME], ExportOptions(latency_runs=3))
    summary = result.summary
    assert (summary["format"], summary["runtime"]) == (fmt.NAME, fmt.RUNTIME)
    assert summary["metrics"]["accuracy"] == pytest.approx(summary["reference_metrics"]["accuracy"])
    assert (result.folder / fmt.WEIGHTS).is_file()

    artifact = load_artifact(result.folder)
    inputs = artifact.example_input(4)
    outputs = artifact.predictor("cpu")(inputs)
    assert outputs.shape == (4, 2) and np.isfinite(outputs).all()
    assert [a.name for a in find_artifacts(toy_run.run_dir)] == [fmt.NAME]

    from trainforge.export.bench import bench

    rows, notes = bench([toy_run.run_dir], batch_size=4, warmup=1, runs=2, devices=["cpu"])
    assert [(r.artifact, r.runtime) for r in rows] == [(fmt.NAME, fmt.RUNTIME)] and not notes
