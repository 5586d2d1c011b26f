"""Helpers of the web app tests: recorded machines, the stand-in trainer, tiny run forms."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "hardware" / "fixtures"
JETSON = FIXTURES / "jetson-orin-jp6"
CPU = FIXTURES / "cpu"
FAKE_TRAINER = [sys.executable, str(REPO / "tests" / "fakes" / "fake_trainer.py")]
# A ViT small enough that `trainforge train` spends its time starting up, not training.
TINY_VIT = [
    "model.embedding_dim=32",
    "model.num_layers=1",
    "model.num_heads=2",
    "model.mlp_size=32",
    "training.num_threads=1",
    "logging.report=false",  # no web test reads a run's report.html
]


def write_hf_folder(folder: Path, arch: str = "GPT2LMHeadModel", summary: dict | None = None):
    """A Hugging Face model folder in the real formats (config.json, safetensors)."""
    import numpy as np
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    config = {"architectures": [arch], "model_type": "gpt2"}
    (folder / "config.json").write_text(json.dumps(config))
    tensors = {"wte.weight": np.zeros((10, 4), np.float32), "ln.bias": np.zeros(4, np.float32)}
    save_file(tensors, str(folder / "model.safetensors"))
    if summary is not None:
        (folder / "trainforge.json").write_text(json.dumps(summary))
    return folder


def wait_for(check: Callable[[], object], timeout: float = 300.0, every: float = 0.05):
    """Poll until `check()` is truthy; returns its value or fails with the last one."""
    deadline = time.monotonic() + timeout
    value = check()
    while not value and time.monotonic() < deadline:
        time.sleep(every)
        value = check()
    assert value, f"condition not met within {timeout} s (last value {value!r})"
    return value


def run_form(**changes) -> dict:
    """A Train Model submission for a tiny digits run (the main job's config)."""
    form = {
        "config": "config/vit_digits.yaml",
        "output_name": "digits-web",
        "task": "image-classification",
        "dataset": "digits",
        "epochs": 40,
        "learning_rate": 0.002,
        "batch_size": 64,
        "profile": "cpu",
        "overrides": list(TINY_VIT),
    }
    form.update(changes)
    return form


@contextlib.contextmanager
def serving(folder: Path, fixture: Path) -> Iterator[str]:
    """A real `trainforge serve` on a free loopback port in `folder`, replaying `fixture`'s
    machine; yields its URL once uvicorn says it runs, and stops it after."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = folder / "server.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "trainforge", "serve", "--port", str(port),
             "--fixture", str(fixture)],
            cwd=folder, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 300  # a hung start, not speed
        while "Uvicorn running" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=120)
