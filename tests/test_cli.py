"""End to end through the `trainforge` command: digits, a tiny CIFAR-10, resume, user errors.

The command runs as `cli.main` in this process (fakes.in_process); the tests whose subject is
the process itself (a signal, `python -m trainforge`) start a child and say so."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

from fakes.cli_args import DIGITS_TINY, set_flags
from fakes.in_process import run_in_process, run_main
from fakes.runs import TINY_VIT

REPO = Path(__file__).resolve().parents[1]


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_digits_end_to_end(tmp_path):
    result = run_main(
        "train",
        "config/vit_digits.yaml",
        "--max_epochs",
        "8",
        "--set",
        f"output.dir={tmp_path}",
        "--set",
        "evaluation.eval_every_epochs=4",
        "--set",
        "checkpoint.save_every_epochs=4",
        "--set",
        "logging.report=false",  # no assertion reads it
    )
    assert result.returncode == 0, result.stderr
    run = tmp_path / "vit_digits"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["final_metrics"]["accuracy"] >= 0.80
    assert summary["global_step"] == 8 * 23  # 1437 images / 64 per batch = 23 steps per epoch
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == [
        "best_model",
        "checkpoint_epoch_4",
        "checkpoint_epoch_8",
        "checkpoint_meta.json",
    ]
    beside = json.loads((run / "checkpoints" / "checkpoint_meta.json").read_text())
    assert beside["latest"] == "checkpoint_epoch_8" and beside["best_epoch"] in (4, 8)
    splits = {r["split"] for r in records(run)}
    assert {"train", "val"} <= splits <= {"train", "val", "telemetry"}
    assert any((run / "tensorboard").glob("events.out.tfevents.*"))
    assert (run / "model.safetensors").is_file()
    resolved = yaml.safe_load((run / "config.resolved.yaml").read_text())
    assert resolved["profile"] == "cpu" and resolved["training"]["num_train_epochs"] == 8
    assert "checkpoints:" in result.stdout and "TensorBoard:" in result.stdout
    assert "metrics:" in result.stdout


def test_resume_auto_continues_from_newest_checkpoint(tmp_path):
    base = [
        *set_flags(TINY_VIT),
        "--set",
        "logging.report=false",
        "--set",
        f"output.dir={tmp_path}",
        "--set",
        "checkpoint.save_every_epochs=1",
        "--set",
        "evaluation.eval_every_epochs=1",
        "--set",
        "schedule.warmup_epochs=1",
    ]
    first = run_main("train", "config/vit_digits.yaml", "--max_epochs", "2", *base)
    assert first.returncode == 0, first.stderr
    again = run_main("train", "config/vit_digits.yaml", "--max_epochs", "2", *base)
    assert again.returncode == 2
    run = tmp_path / "vit_digits"
    assert again.stderr.count("\n") == 1 and "already holds a run" in again.stderr
    assert f"trainforge train --resume {run}" in again.stderr and "--overwrite" in again.stderr
    # The run folder alone names the run; a flag given with it changes only that value.
    resumed = run_main("train", "--resume", str(run), "--max_epochs", "3")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stdout and "step 46" in resumed.stdout
    assert "resuming with a changed config (1): training.num_train_epochs: 2.0 -> 3.0\n" in (
        resumed.stdout
    )
    summary = json.loads((tmp_path / "vit_digits" / "summary.json").read_text())
    assert summary["global_step"] == 3 * 23


def write_cifar_config(tmp_path: Path, root: Path) -> Path:
    config = {
        "model": {"embedding_dim": 32, "num_layers": 2, "num_heads": 2, "mlp_size": 64},
        "data": {"dataset": "cifar10", "root": str(root), "download": False},
        "schedule": {"warmup_epochs": 1},
        "training": {"num_train_epochs": 2, "per_device_train_batch_size": 16},
        "output": {"dir": str(tmp_path / "runs")},
        "logging": {"report": False},  # no assertion reads it
    }
    path = tmp_path / "cifar.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_tiny_cifar10_archive_end_to_end(tmp_path, monkeypatch, capsys, tiny_cifar):
    path = write_cifar_config(tmp_path, tiny_cifar["archive_root"])
    code, out, err = run_in_process(monkeypatch, capsys, "train", str(path), "--profile", "cpu")
    assert code == 0, err
    run = tmp_path / "runs" / "cifar"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["global_step"] == 2 * 7  # 100 training images / 16 = 7 batches per epoch
    val = [r for r in records(run) if r["split"] == "val"]
    assert len(val) == 2 and 0.0 <= val[-1]["accuracy"] <= 1.0
    assert "data: cifar10 (100 training samples)" in out


def test_cifar10_missing_offline_is_one_line(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "nothing-here"
    path = write_cifar_config(tmp_path, empty)
    code, _out, err = run_in_process(monkeypatch, capsys, "train", str(path), "--profile", "cpu")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(empty) in lines[0] and "cifar-10-python.tar.gz" in lines[0]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, "not found"),
        ("model: [unclosed\n", "invalid YAML"),
        ("profile: tpu-pod\n", "unknown profile"),
        ("data:\n  dataset: imagenet\n", "data.dataset = 'imagenet'"),
        ("model:\n  arch: resnet50\n", "model.arch = 'resnet50'"),
    ],
    ids=["missing-file", "bad-yaml", "unknown-profile", "unknown-dataset", "unknown-model"],
)
def test_user_errors_are_one_line_and_write_nothing(tmp_path, text, expected):
    path = tmp_path / "run.yaml"
    if text is not None:
        path.write_text(text + f"output:\n  dir: {tmp_path / 'runs'}\n")
    result = run_main("train", str(path), cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], lines
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == (["run.yaml"] if text else [])


def test_info_commands(cli):
    detect = run_main("detect")
    assert detect.returncode == 0 and "profile (auto): cpu" in detect.stdout
    profiles = run_main("profiles")
    for name in ("cpu", "jetson-orin", "workstation-24gb", "dgx-spark", "hpc-a100"):
        assert name in profiles.stdout
    shown = run_main("profiles", "show", "jetson-orin")
    assert "micro_batch_size: 16" in shown.stdout
    assert "training-pipeline assets README" in shown.stdout
    unknown = run_main("profiles", "show", "jetson-orn")
    assert unknown.returncode == 2 and "did you mean jetson-orin" in unknown.stderr
    show = run_main("config", "show", "config/vit_digits.yaml", "--set", "training.seed=5")
    lines = {line.split()[0]: line for line in show.stdout.splitlines() if line[0] != "#"}
    assert "file config/vit_digits.yaml" in lines["model.embedding_dim"]
    assert "flag --set training.seed" in lines["training.seed"]
    assert "profile cpu" in lines["data.pin_memory"]
    assert "default" in lines["optimizer.args.adam_beta1"]
    version = run_main("--version")
    assert version.returncode == 0 and version.stdout.startswith("trainforge ")
    module = cli("--help")  # a child: `python -m trainforge` itself is what this line tests
    assert module.returncode == 0 and "validate" in module.stdout


def test_jetson_wheel_command():
    fixture = REPO / "tests" / "hardware" / "fixtures" / "jetson-orin-jp6"
    shown = run_main("jetson-wheel", "--root", str(fixture))
    assert shown.returncode == 0, shown.stderr
    assert "JetPack: 6.0" in shown.stdout and "--index-url" in shown.stdout
    off = run_main("jetson-wheel")
    assert off.returncode == 2 and "--jetpack" in off.stderr
    assert len(off.stderr.strip().splitlines()) == 1


def test_ctrl_c_saves_a_checkpoint_and_resume_continues(tmp_path):
    # A child: a real SIGINT to a training process and its exit code are what is tested.
    import os
    import re
    import signal
    import subprocess
    import time

    args = [
        sys.executable,
        "-m",
        "trainforge",
        "train",
        "config/vit_digits.yaml",
        "--max_epochs",
        "30",
        "--set",
        f"output.dir={tmp_path}",
        "--set",
        "checkpoint.save_every_epochs=null",
        *set_flags(TINY_VIT),
        *("--set", "logging.report=false"),
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    deadline = time.monotonic() + 600  # a hung start, not a slow one
    for line in proc.stdout:  # wait until the first epoch (23 steps) is done
        found = re.match(r"epoch \d+/\d+  step (\d+)/", line)
        if found and int(found.group(1)) >= 23:
            break
        assert time.monotonic() < deadline
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "SIGINT received" in out
    interrupted = tmp_path / "vit_digits" / "checkpoints" / "checkpoint_interrupted"
    meta = json.loads((interrupted / "meta.json").read_text())
    assert meta["global_step"] >= 23
    resumed = subprocess.run(
        [*args[:5], "--max_epochs", "4", *args[7:], "--resume", "auto"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"step {meta['global_step']})" in resumed.stdout


@pytest.mark.slow
def test_resume_from_an_explicit_path_in_every_spelling(tmp_path, monkeypatch, capsys):
    """`--resume PATH` / `--resume_from PATH`: a run folder (its newest good checkpoint), a
    checkpoint folder, the ViT guide's `NAME.pth`."""

    def train(max_steps: int, *resume: str) -> tuple[int, str, str]:
        args = ["--set", f"output.dir={tmp_path}", "--set", f"training.max_steps={max_steps}"]
        return run_in_process(monkeypatch, capsys, "train", *DIGITS_TINY, *args, *resume)

    run_dir = tmp_path / "vit_digits"
    root = run_dir / "checkpoints"
    code, _out, err = train(4)
    assert code == 0, err
    code, out, err = train(6, "--resume", str(run_dir))  # run folder: newest good one
    assert code == 0, err
    assert f"resumed from {root / 'checkpoint-4'} (epoch 0, step 4), exact (bitwise" in out
    assert re.search(r"exact \(bitwise: the same setup\); 0:00:\d\d trained so far\n", out)
    assert json.loads((run_dir / "summary.json").read_text())["global_step"] == 6
    # Resuming at the end step trains nothing more: these only show which checkpoint loads.
    code, out, err = train(2, "--resume_from", str(root / "checkpoint-2"))  # checkpoint folder
    assert code == 0, err
    assert f"resumed from {root / 'checkpoint-2'} (epoch 0, step 2)" in out
    code, out, err = train(4, "--resume", str(root / "checkpoint-4.pth"))  # the guide's spelling
    assert code == 0, err
    assert f"resumed from {root / 'checkpoint-4'} (epoch 0, step 4)" in out
    # The run folder's newest checkpoint is damaged: reported once, the one before it used.
    (root / "checkpoint-6" / "manifest.json").unlink()
    code, out, err = train(4, "--resume", str(run_dir))
    assert code == 0, err
    assert f"resumed from {root / 'checkpoint-4'} (epoch 0, step 4)" in out
    assert out.count("skipping checkpoint") == 1


def test_resume_from_a_damaged_or_missing_path_is_one_line(tmp_path, monkeypatch, capsys):
    """An explicit checkpoint that is damaged or missing is refused before anything is
    built or written: exit 2, one line naming the path and the reason, no fallback."""
    import torch

    from trainforge.engine import checkpoint as ckpt

    root = tmp_path / "vit_digits" / "checkpoints"
    for step in (2, 4):
        ckpt.save_checkpoint(
            root / f"checkpoint-{step}",
            model_state={"w": torch.zeros(2)},
            state={},
            meta={"global_step": step, "epoch": 0, "timestamp": f"t{step}"},
            config_yaml="a: 1\n",
        )
    (root / "checkpoint-4" / "manifest.json").unlink()
    before = sorted((p.name, p.stat().st_mtime_ns) for p in root.rglob("*"))
    for flag, path, reason in [
        ("--resume_from", root / "checkpoint-4", "no manifest (incomplete write)"),
        ("--resume", root / "checkpoint-4.pth", "no manifest (incomplete write)"),
        ("--resume", tmp_path / "nowhere", "not found"),
    ]:
        args = ["--set", f"output.dir={tmp_path}", flag, str(path)]
        code, out, err = run_in_process(monkeypatch, capsys, "train", *DIGITS_TINY, *args)
        assert code == 2, (out, err)
        lines = err.strip().splitlines()
        named = str(path).removesuffix(".pth")  # the guide's .pth spelling names the folder
        assert len(lines) == 1 and named in lines[0] and reason in lines[0], lines
        assert "Traceback" not in err and "resumed from" not in out
    # No fallback to the good checkpoint-2, nothing written next to them.
    assert sorted((p.name, p.stat().st_mtime_ns) for p in root.rglob("*")) == before
    assert sorted(p.name for p in (tmp_path / "vit_digits").iterdir()) == ["checkpoints"]


def test_the_process_entry_leaves_the_last_collection_out(monkeypatch):
    """`trainforge` and `python -m trainforge` end with gc.freeze(); tests calling main() in
    their own process do not."""
    import gc

    from trainforge import cli

    frozen = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    monkeypatch.setattr(sys, "argv", ["trainforge", "--version"])
    with pytest.raises(SystemExit):
        cli.main()
    assert frozen == []
    with pytest.raises(SystemExit):
        cli.entry()
    assert frozen == [True]


def test_train_starts_with_the_collector_off_and_training_turns_it_back_on(monkeypatch):
    """`trainforge train` runs its start-up with the garbage collector off; the trainer's
    `steady_state` freezes what start-up built and switches it back on before the first step.
    Other commands, and main() called inside a process, leave the collector alone."""
    import gc

    from trainforge import cli, train

    frozen, seen = [], []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    monkeypatch.setattr(cli, "main", lambda: seen.append(gc.isenabled()))
    try:
        monkeypatch.setattr(sys, "argv", ["trainforge", "train", "config/vit_digits.yaml"])
        cli.entry()
        assert seen == [False] and not gc.isenabled()
        train.steady_state()  # what the run calls before its first step
        assert gc.isenabled() and frozen == [True, True]  # the exit's freeze, then start-up's
        monkeypatch.setattr(sys, "argv", ["trainforge", "serve"])
        cli.entry()
        assert seen == [False, True]
        train.steady_state()  # the collector is on: nothing to do
        assert frozen == [True, True, True]
    finally:
        gc.enable()


def test_a_command_run_in_this_process_leaves_the_process_as_it_found_it(tmp_path, monkeypatch):
    """fakes.in_process.run_main, which the refusal tests use in place of a child: what a
    command changes (environment, working directory, argv, a signal handler) is put back."""
    import os
    import signal

    monkeypatch.delenv("TRAINFORGE_TEST_MARK", raising=False)
    before = (dict(os.environ), os.getcwd(), list(sys.argv), signal.getsignal(signal.SIGTERM))

    def meddle():
        os.environ["TRAINFORGE_TEST_MARK"] = "1"
        os.chdir(tmp_path)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("said")
        sys.exit(2)

    from trainforge import cli

    monkeypatch.setattr(cli, "main", meddle)
    ran = run_main("validate", "x.yaml", cwd=tmp_path, env={"EXTRA": "1"})
    assert (ran.returncode, ran.stdout, ran.args) == (
        2,
        "said\n",
        ["trainforge", "validate", "x.yaml"],
    )
    after = (dict(os.environ), os.getcwd(), list(sys.argv), signal.getsignal(signal.SIGTERM))
    assert after == before


def test_every_forwarding_command_comes_from_the_one_table_and_resolves():
    """`cli.FORWARDED` is the one list of commands whose words go to their module's parser:
    each names an importable function, once, and is a command of the app by that name."""
    import typer.main

    from trainforge import cli
    from trainforge.registry import load_object

    names = [entry.name for entry in cli.FORWARDED]
    assert len(names) == len(set(names)) and {"export", "slurm", "sweep"} <= set(names)
    commands = typer.main.get_command(cli.app).commands  # type: ignore[attr-defined]
    for entry in cli.FORWARDED:
        assert callable(load_object(entry.run)), entry.run
        assert commands[entry.name].help == entry.help
