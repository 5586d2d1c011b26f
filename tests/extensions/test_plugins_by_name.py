"""Plugins by name: the toy dataset, optimizer, logger and export format, each one file outside
`src/`, given to the real command line with `--extension FILE`, train a run, resume it with
`--resume` alone (the run folder records them) and export it, each with its own options
(data.options, optimizer.args, logging.options, export --option); the web app started with
`--extension` offers the toy dataset in its dialog and hands the plugin to the runs it starts.
A plugin that fails to import is one line naming it; a registry refuses a taken name.

The command-line cases run in subprocesses: a plugin loaded from its file registers its names
in the process that loads it, and this test process imports the same toys as a package
(tests/extensions/test_toy_extensions.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainforge import extensions
from trainforge.errors import UserError
from trainforge.registry import DATASETS, Registry

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TOYS = [HERE / f"toy_{kind}.py" for kind in ("dataset", "optimizer", "logger", "export")]
TRAIN = [
    str(REPO / "config" / "vit_digits.yaml"), "--set", "data.dataset=toy-stripes",
    "--set", "optimizer.name=toy-counting-sgd",
    "--set", "logging.loggers=[toy-memory]", "--set", "model.patch_size=2",
    "--set", "model.embedding_dim=16", "--set", "model.num_layers=1",
    "--set", "model.num_heads=2", "--set", "model.mlp_size=32", "--max_steps", "4",
    "--batch_size", "16", "--num_threads", "1", "--profile", "cpu",
    "--set", "schedule.warmup_steps=0", "--set", "checkpoint.save_every_epochs=null",
    "--set", "evaluation.eval_steps=4", "--set", "output.run_name=toy",
    "--set", "logging.tensorboard=false", "--set", "logging.progress_bar=false",
    "--set", "data.options.count=32", "--set", "optimizer.args.nesterov=true",
    "--set", "logging.options.toy-memory.every=3",
]  # fmt: skip


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    return subprocess.run(
        [sys.executable, "-m", "trainforge", *args], cwd=cwd, env=env,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_a_run_with_plugin_files_trains_resumes_and_exports(tmp_path):
    plugins = [arg for toy in TOYS for arg in ("--extension", str(toy))]
    done = _cli(tmp_path, "train", *plugins, *TRAIN)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "done: finished after 4 steps" in done.stdout

    resumed = _cli(tmp_path, "train", "--resume", "runs/toy", "--max_steps", "+2")
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert "exact (bitwise: the same setup)" in resumed.stdout
    assert "done: finished after 6 steps" in resumed.stdout

    exported = _cli(
        tmp_path, "export", "runs/toy", "--format", "toy-npz",
        "--option", "dtype=float16", "--option", "compress=true",
    )  # fmt: skip
    assert exported.returncode == 0, exported.stdout[-2000:] + exported.stderr[-2000:]
    summary = json.loads((tmp_path / "runs/toy/export/toy-npz/summary.json").read_text())
    assert summary["precision"] == "float16"
    wrong = _cli(tmp_path, "export", "runs/toy", "--format", "toy-npz", "--option", "dtyp=float16")
    assert wrong.returncode == 2
    assert wrong.stderr.strip().splitlines() == [
        "--option dtyp=float16: unknown option of toy-npz. did you mean dtype?"
    ]


def test_a_wrong_plugin_option_is_one_line_with_the_nearest_name(tmp_path):
    plugins = [arg for toy in TOYS for arg in ("--extension", str(toy))]
    wrong = _cli(tmp_path, "config", "show", *plugins, *TRAIN, "--set", "data.options.nosie=3")
    assert wrong.returncode == 2
    assert wrong.stderr.strip().splitlines() == [
        "--set: data.options.nosie: unknown option of dataset toy-stripes; did you mean noise?"
    ]


def test_without_the_plugin_the_name_is_unknown_and_a_broken_one_is_one_line(tmp_path):
    unknown = _cli(tmp_path, "config", "show", *TRAIN)
    assert unknown.returncode == 2 and "unknown dataset 'toy-stripes'" in unknown.stderr
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_module_here\n", encoding="utf-8")
    failed = _cli(tmp_path, "config", "show", "--extension", "broken.py", *TRAIN)
    assert failed.returncode == 2
    assert failed.stderr.strip().splitlines() == [
        "extension broken.py: cannot import: ModuleNotFoundError: No module named "
        "'no_such_module_here'. pass a module name (my_plugins.optim) or a .py file; see "
        "docs/architecture.md"
    ]


def test_the_web_app_offers_a_plugin_dataset_and_passes_the_plugin_on(tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from trainforge.web.app import create_app
    from trainforge.web.serve import build_settings

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(extensions, "_LOADED", {})
    before = dict(sys.modules)
    try:
        settings = build_settings("127.0.0.1", None, extensions=[str(TOYS[0])])
        assert settings.train_command[-2:] == ["--extension", str(TOYS[0])]
        with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
            offered = client.get("/api/train/defaults").json()["choices"]["image_datasets"]
        assert "toy-stripes" in offered
    finally:
        DATASETS.unregister("toy-stripes")
        for name in set(sys.modules) - set(before):
            if name.startswith("trainforge_extension_"):
                sys.modules.pop(name)


def test_a_registry_refuses_a_taken_name_unless_told_to_replace_it():
    registry: Registry[str] = Registry("widget", "widget.name")
    registry.register("a", "first")
    registry.register("a", "first")  # the same entry again (a module imported twice): fine
    with pytest.raises(UserError, match="widget 'a' is registered already"):
        registry.register("a", "second")
    registry.register("a", "second", replace=True)
    assert registry.get("a") == "second"
