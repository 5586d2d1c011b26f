"""One digits ViT trained per test session and exported once to every format.

Training is the real engine on the bundled digits (15 epochs of the demo's small ViT, about
10 s on a laptop CPU); the export is the real pipeline. Both run on one CPU thread: this tiny
model gains little from a second one, and on a busy machine torch's thread barriers cost
more than they give. Tests that need their own export write it under their own tmp folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from trainforge.config import validate
from trainforge.export import ExportOptions, export
from trainforge.hardware import detect
from trainforge.train import train

REPO = Path(__file__).resolve().parents[2]
EPOCHS = 15


@contextmanager
def one_thread() -> Iterator[None]:
    """torch on one CPU thread inside the block; the process setting is restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def train_digits(out_dir: Path, epochs: int = EPOCHS, name: str = "digits") -> Path:
    overrides = [
        f"output.dir={out_dir}",
        f"output.run_name={name}",
        f"training.num_train_epochs={epochs}",
        f"evaluation.eval_every_epochs={epochs}",
        "checkpoint.save_every_epochs=null",
        "logging.tensorboard=false",
        "logging.mlflow=false",  # export reads neither; the GPU suite needs no tracking extra
        "logging.wandb=false",
        "logging.progress_bar=false",
        "logging.report=false",  # the report tests draw their own from this run
        "training.num_threads=1",
    ]
    platform = detect()
    resolved = validate(REPO / "config" / "vit_digits.yaml", platform=platform, overrides=overrides)
    with one_thread():
        summary = train(resolved, platform)
    return summary.run_dir


@pytest.fixture(scope="session")
def digits_run(tmp_path_factory) -> Path:
    """runs/digits: config.resolved.yaml, model.safetensors, checkpoints/best_model."""
    return train_digits(tmp_path_factory.mktemp("export-runs"))


@pytest.fixture(scope="session")
def exported(digits_run) -> dict:
    """{artifact folder name: Result} for onnx, int8, int8-onnx, pruned, safetensors."""
    options = ExportOptions(finetune_epochs=1, latency_runs=20)
    with one_thread():
        results = export(digits_run, ["onnx", "int8", "pruned", "safetensors"], options)
    return {r.folder.name: r for r in results}


@pytest.fixture(scope="session")
def digits_trainer():
    """`train_digits(out_dir, epochs, name)`, for tests that need their own run."""
    return train_digits


@pytest.fixture(scope="session")
def thread_limit():
    """The `one_thread` context manager, for module fixtures that train."""
    return one_thread


@pytest.fixture(autouse=True)
def _one_thread_per_test() -> Iterator[None]:
    with one_thread():
        yield
