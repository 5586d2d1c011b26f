"""Web app fixtures: a project folder, and apps on recorded machines with the stand-in trainer
(folder_trainer.py: the fake trainer with the CLI's run folder contract)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fakes.web import CPU, REPO, write_hf_folder

FOLDER_TRAINER = [sys.executable, str(Path(__file__).resolve().parent / "folder_trainer.py")]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project folder: the shipped run configs and Jetson data set, one base model."""
    shutil.copytree(REPO / "config", tmp_path / "config")
    (tmp_path / "example_datasets").mkdir()
    shutil.copy(REPO / "example_datasets" / "jetson_training.json", tmp_path / "example_datasets")
    write_hf_folder(tmp_path / "models" / "base-gpt2")
    return tmp_path


@pytest.fixture
def make_client(project: Path) -> Iterator[Callable]:
    """make_client(fixture=CPU, fake=True, **settings) -> a TestClient on `project`."""
    from fastapi.testclient import TestClient

    from trainforge.web.app import create_app
    from trainforge.web.settings import WebSettings

    clients = []

    def make(fixture: Path | None = CPU, fake: bool = True, **options) -> TestClient:
        if fake:
            options.setdefault("train_command", FOLDER_TRAINER)
        options.setdefault("poll_interval_s", 0.05)
        settings = WebSettings(root=project, fixture=fixture, **options)
        client = TestClient(create_app(settings))
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        state = client.app.state.trainforge
        for record in state.registry.active():
            state.runner.stop(record.id)
        # The children's ends are recorded before the registry's folder goes (tmp_path).
        assert state.runner.join(120), "a run the test started did not stop"
        client.__exit__(None, None, None)
