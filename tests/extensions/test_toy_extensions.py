"""Acceptance: a dataset, an optimizer, a logger and an export format, each added by one file
that only registers it, run end to end: a real (tiny) training run in this process, then an
export of the finished run in the toy format, read back and benchmarked through its runtime.
Each toy owns its options, given through data.options, optimizer.args, logging.options and
the export's `--option` pairs; a wrong one is one line with the nearest name.
"""

from __future__ import annotations

import importlib
import sys
import zipfile

import numpy as np
import pytest

from trainforge.config import ConfigError, validate
from trainforge.errors import UserError
from trainforge.export import export, find_artifacts, load_artifact
from trainforge.export.options import ExportOptions, check_format_options, check_formats
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
        "data.options.count=48",
        "data.options.noise=30",
        "optimizer.args.momentum=0.5",
        "optimizer.args.nesterov=true",
        f"logging.options.{toys['toy_logger'].NAME}.every=2",
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


def test_each_toy_received_its_own_options(toys, toy_run):
    params = toys["toy_logger"].PARAMS[0]
    assert (params["data.options.count"], params["data.options.noise"]) == (48, 30)
    assert toys["toy_dataset"].LOADED[-1] == (48, 12)
    args = toys["toy_optimizer"].BUILT_WITH[-1]
    assert (args.momentum, args.nesterov) == (0.5, True)
    # every=2: the logger keeps the 1st, 3rd, ... training record it is offered.
    train_steps = [step for split, _, step in toys["toy_logger"].RECORDS if split == "train"]
    offered = toys["toy_logger"].OFFERED
    assert len(offered) >= 4 and train_steps == offered[::2]


def _bad(*overrides: str) -> str:
    with pytest.raises(ConfigError) as caught:
        validate(None, profile="cpu", overrides=list(overrides))
    return str(caught.value)


def test_a_wrong_option_is_one_line_with_the_nearest_name(toys):
    dataset = f"data.dataset={toys['toy_dataset'].NAME}"
    line = _bad(dataset, "data.options.cuont=3", "training.seed=-1")
    assert "data.options.cuont: unknown option of dataset toy-stripes; did you mean count?" in line
    assert "training.seed = -1" in line  # found in the same pass
    line = _bad(dataset, "data.options.noise=500")
    assert "data.options.noise = 500: Input should be less than or equal to 100" in line
    optimizer = f"optimizer.name={toys['toy_optimizer'].NAME}"
    line = _bad(dataset, optimizer, "optimizer.args.nesterv=true")
    assert "optimizer.args.nesterv: unknown option of optimizer toy-counting-sgd; did you mean " \
        "nesterov?" in line  # fmt: skip
    line = _bad(dataset, f"logging.options.{toys['toy_logger'].NAME}.evry=2")
    assert "logging.options.toy-memory.evry: unknown option of logger toy-memory; did you " \
        "mean every?" in line  # fmt: skip
    assert all(len(text.splitlines()) == 1 for text in (line,))
    fmt = toys["toy_export"].NAME
    with pytest.raises(
        UserError,
        match=r"--option compres=True: unknown option of toy-npz\. did you mean compress\?",
    ):
        check_format_options(ExportOptions(extra={"compres": True}), [fmt])
    with pytest.raises(
        UserError, match=r"--option dtype=int4: Input should be 'float32' or 'float16'"
    ):
        check_format_options(ExportOptions(extra={"dtype": "int4"}), [fmt])


def test_the_finished_run_exports_in_the_toy_format_and_runs(toys, toy_run):
    fmt = toys["toy_export"]
    options = ExportOptions(latency_runs=3, extra={"compress": True, "dtype": "float16"})
    (result,) = export(toy_run.run_dir, [fmt.NAME], options)
    summary = result.summary
    assert summary["precision"] == "float16"
    with zipfile.ZipFile(result.folder / fmt.WEIGHTS) as archive:
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_DEFLATED}
    with np.load(result.folder / fmt.WEIGHTS) as arrays:
        assert {arrays[k].dtype for k in arrays.files if arrays[k].dtype.kind == "f"} == {
            np.dtype("float16")
        }
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
