"""`run.preflight`: the refusals `trainforge train` says before torch loads, and where it
leaves the choice to the run's own claim (a launcher's restart, `--resume`, a run's own
output model)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from trainforge.errors import UserError
from trainforge.run.preflight import check_fresh_run
from trainforge.runfolder import RunFolder


def config(overwrite: bool = False, model_name: str | None = "out", models_dir: str = "models"):
    output = SimpleNamespace(overwrite=overwrite, model_name=model_name, models_dir=models_dir)
    return SimpleNamespace(output=output, task=SimpleNamespace(kind="causal-lm"))


@pytest.fixture
def taken(tmp_path, monkeypatch):
    """runs/old holding a run; models/out written by it."""
    monkeypatch.chdir(tmp_path)
    for name in ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    folder = RunFolder(tmp_path / "runs" / "old")
    folder.path.mkdir(parents=True)
    folder.metrics.write_text("{}\n", encoding="utf-8")
    (tmp_path / "models" / "out").mkdir(parents=True)
    record = {"run_dir": str(folder.path)}
    (tmp_path / "models" / "out" / "trainforge.json").write_text(json.dumps(record))
    return folder


def test_a_taken_run_folder_is_refused_unless_a_launcher_restarted_the_job(taken, monkeypatch):
    with pytest.raises(UserError, match="runs/old already holds a run \\(metrics\\)"):
        check_fresh_run(config(), taken, None)
    check_fresh_run(config(), taken, "auto")  # --resume: the claim picks the checkpoint
    check_fresh_run(config(overwrite=True), taken, None)
    for name, value in (("TORCHELASTIC_RUN_ID", "job"), ("SLURM_JOB_ID", "42")):
        with monkeypatch.context() as env:
            env.setenv(name, value)
            check_fresh_run(config(), taken, None)  # the run may be continuing by itself


def test_an_output_model_of_another_run_is_refused(taken, tmp_path):
    other = RunFolder(tmp_path / "runs" / "new")
    with pytest.raises(UserError, match="model folder models/out already exists"):
        check_fresh_run(config(), other, None)
    check_fresh_run(config(overwrite=True), other, None)
    check_fresh_run(config(model_name="fresh"), other, None)
    check_fresh_run(config(), taken, "auto")  # the run's own model: it may replace it
