"""The DGX Spark setup plan's commands, run as written with `python src/train.py` replaced by
`trainforge train config/g2p_cmudict.yaml`, on a small TSV and a tiny model.

The plan trains with `--data_file FILE --report_to tensorboard --max_steps N --save_steps 500`
and, after a Ctrl+C, continues with the same command line plus `--resume_from_checkpoint`.
Here: 60 words, checkpoints every 5 steps, a tiny llama created on first use (the config's
model.init_arch), one thread. Everything runs in a project folder under tmp_path.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.fakes.in_process import run_in_process
from tests.fakes.interrupt import interrupt_script
from tests.fakes.runs import g2p_plan_command as plan_command
from tests.fakes.runs import g2p_project

from trainforge.engine import checkpoint as ckpt
from trainforge.runfolder import RunFolder

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 900  # a hung process, not speed: a loaded 2-core machine is slow to start torch


@pytest.fixture
def project(tmp_path) -> Path:
    """A user's project: the shipped G2P config and small word<TAB>phonemes files."""
    return g2p_project(tmp_path)


def test_the_plan_command_saves_checkpoints_every_save_steps(project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    code, out, err = run_in_process(monkeypatch, capsys, *plan_command(10))
    assert code == 0, out[-3000:] + err
    # --data_file t.tsv is not the config's corpus: models/tiny-g2p stays that corpus's name
    # and this run makes a base model of its own.
    assert "base model models/tiny-g2p is kept for the config's corpus " in out
    assert re.search(r"creating base model models/tiny-g2p-t-[0-9a-f]{8}: random llama tiny", out)
    assert not (project / "models" / "tiny-g2p").exists()
    assert "train: 60 records" in out and "val: 8 records" in out and "test: 8 records" in out
    assert "done: finished after 10 steps" in out
    run = RunFolder(project / "runs" / "g2p_cmudict-t")
    for step in (5, 10):
        assert ckpt.verify(run.checkpoints / f"checkpoint-{step}") is None, step
    periodic = sorted(p.name for p in run.checkpoints.glob("checkpoint-*"))
    assert periodic == ["checkpoint-10", "checkpoint-5"]
    # --report_to tensorboard: events written, the other trackers off
    assert any(run.tensorboard.glob("events.out.tfevents.*"))
    resolved = yaml.safe_load(run.resolved_config.read_text(encoding="utf-8"))
    logging = resolved["logging"]
    assert (logging["tensorboard"], logging["wandb"], logging["mlflow"]) == (True, False, False)
    assert resolved["data"]["options"]["train_file"] == "t.tsv"
    assert resolved["data"]["options"]["validation_file"] == "v.tsv"
    assert resolved["data"]["options"]["test_file"] == "test.tsv"


def run_cli(project: Path, argv: list[str], stop_at: int | None = None):
    """`trainforge ARGV` as a subprocess in the project; with `stop_at`, through the wrapper
    that sends SIGINT after that optimizer step."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    entry = ["-m", "trainforge"]
    if stop_at is not None:
        script = interrupt_script(project)
        env["STOP_AT_STEP"], entry = str(stop_at), [str(script)]
    return subprocess.run(
        [sys.executable, *entry, *argv],
        cwd=project, capture_output=True, text=True, env=env, timeout=DEADLINE_S,
    )  # fmt: skip


def test_ctrl_c_then_resume_from_checkpoint_continues_the_run(project):
    command = plan_command(14)
    first = run_cli(project, command, stop_at=7)
    assert first.returncode == 130, first.stdout[-3000:] + first.stderr
    run = RunFolder(project / "runs" / "g2p_cmudict-t")
    interrupted = run.checkpoints / "checkpoint_interrupted"
    assert ckpt.verify(interrupted) is None
    meta = json.loads((interrupted / "meta.json").read_text(encoding="utf-8"))
    assert meta["global_step"] == 7
    assert ckpt.verify(run.checkpoints / "checkpoint-5") is None
    assert not (run.checkpoints / "checkpoint-10").exists()

    resumed = run_cli(project, [*command, "--resume_from_checkpoint"])
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr
    found = re.findall(
        r"^resumed from (\S+) \(epoch \d+, step (\d+)\), exact ", resumed.stdout, re.M
    )
    assert [(Path(p).name, int(s)) for p, s in found] == [("checkpoint_interrupted", 7)]
    assert "done: finished after 14 steps" in resumed.stdout
    assert "creating base model" not in resumed.stdout  # the model made by the first run
    for step in (5, 10):
        assert ckpt.verify(run.checkpoints / f"checkpoint-{step}") is None, step
    steps = [
        r["step"]
        for r in map(json.loads, run.metrics.read_text(encoding="utf-8").splitlines())
        if r.get("split") == "train"
    ]
    assert steps == sorted(set(steps)) and steps[-1] == 14


SMOKE = [
    "--data_file", "test_mini.tsv", "--max_steps", "10", "--save_steps", "5", "--batch_size", "2"
]  # fmt: skip
SMALL = plan_command(1)[plan_command(1).index("--eval_file") :]  # the small splits and model


def test_the_smoke_test_then_the_real_run_need_no_overwrite(project, monkeypatch, capsys):
    """The plan's sequence: the smoke test, then its real-run command, in one project. Each
    corpus names its own run folder and output model, so neither command is refused; the
    smoke test run again is refused before anything slow starts."""
    monkeypatch.chdir(project)
    (project / "test_mini.tsv").write_text("שלום\tʃalˈom\nמה קורה\tmˈa koʁˈe\n", encoding="utf-8")
    smoke = ["train", "config/g2p_cmudict.yaml", *SMOKE, *SMALL, "--batch_size", "2"]
    code, out, err = run_in_process(monkeypatch, capsys, *smoke)
    assert code == 0, out[-3000:] + err
    assert "done: finished after 10 steps" in out
    smoke_run = RunFolder(project / "runs" / "g2p_cmudict-test_mini")
    for step in (5, 10):
        assert ckpt.verify(smoke_run.checkpoints / f"checkpoint-{step}") is None, step
    assert (project / "models" / "g2p-cmudict-test_mini" / "config.json").is_file()

    code, out, err = run_in_process(monkeypatch, capsys, *plan_command(5))  # the real run
    assert code == 0, out[-3000:] + err
    assert "done: finished after 5 steps" in out
    real = RunFolder(project / "runs" / "g2p_cmudict-t")
    assert ckpt.verify(real.checkpoints / "checkpoint-5") is None
    written = json.loads((project / "models" / "g2p-cmudict-t" / "trainforge.json").read_text())
    assert written["run_dir"] == str(real.path.resolve())
    assert ckpt.verify(smoke_run.checkpoints / "checkpoint-10") is None  # the smoke run stays

    # The same smoke test again: refused at once, before the training entry is reached.
    import trainforge.train

    def reached(*_, **__):
        raise AssertionError("the refusal came after the run started")

    monkeypatch.setattr(trainforge.train, "train", reached)
    code, out, err = run_in_process(monkeypatch, capsys, *smoke)
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "run folder runs/g2p_cmudict-test_mini already holds a run (checkpoints, metrics, "
        "TensorBoard events, run.json). continue it with `trainforge train --resume "
        "runs/g2p_cmudict-test_mini`, start it afresh with --overwrite, or pick another "
        "--set output.run_name=NAME"
    ]
    code, out, err = run_in_process(monkeypatch, capsys, *smoke, "--run_name", "again")
    assert code == 2 and err.splitlines() == [
        "model folder models/g2p-cmudict-test_mini already exists. pick another "
        "--output-name, or replace it with --overwrite"
    ]
    assert not (project / "runs" / "again").exists()
