"""The session's digits run (tests/conftest.py) exported once to every format.

The export is the real pipeline, on one CPU thread like the training (fakes.runs.one_thread).
Tests that need their own export write it under their own tmp folder.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.runs import one_thread, train_digits
from trainforge.export import ExportOptions, export


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
