"""The run folder is the run: the printed resume command continues exactly that run, every
run that ends leaves a checkpoint of its last step, and one folder holds one run.

Real `trainforge train` runs of a tiny digits ViT: in-process where only the outcome
matters, as a subprocess where a real Ctrl+C and the printed command are the point.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file
from tests.fakes.cli_args import DIGITS_TINY, REPO
from tests.fakes.in_process import run_in_process
from tests.fakes.interrupt import interrupt_script

from trainforge.engine import checkpoint as ckpt
from trainforge.runfolder import RunFolder

DEADLINE_S = 900  # a hung process, not speed: a loaded 2-core machine is slow to start torch


def flags(out: Path, name: str) -> list[str]:
    return [
        *DIGITS_TINY, "--output_dir", str(out), "--run_name", name, "--max_steps", "24",
        "--learning_rate", "0.003", "--eval_steps", "8", "--logging_steps", "1",
        "--set", "checkpoint.save_steps=10", "--num_threads", "1",
    ]  # fmt: skip


def records(run: Path, split: str) -> list[dict]:
    lines = RunFolder(run).metrics.read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("split") == split]


def steps(run: Path, split: str = "train") -> list[int]:
    return [r["step"] for r in records(run, split)]


def test_sigint_then_the_printed_command_equals_an_uninterrupted_run(tmp_path):
    script = interrupt_script(tmp_path)
    env = dict(os.environ, PYTHONUNBUFFERED="1", STOP_AT_STEP="13")
    first = subprocess.run(
        [sys.executable, str(script), "train", *flags(tmp_path / "runs", "cut")],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=DEADLINE_S,
    )  # fmt: skip
    assert first.returncode == 130, first.stdout + first.stderr
    printed = [line for line in first.stdout.splitlines() if line.startswith("resume with: ")]
    run = tmp_path / "runs" / "cut"
    assert printed == [f"resume with: trainforge train --resume {run}"]
    # exactly the printed command, nothing added, from another working directory
    argv = shlex.split(printed[0].removeprefix("resume with: "))
    assert argv[0] == "trainforge"
    resumed = subprocess.run(
        [sys.executable, "-m", "trainforge", *argv[1:]],
        cwd=REPO, capture_output=True, text=True, timeout=DEADLINE_S,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert (
        "(epoch 0, step 13)" in resumed.stdout and "done: finished after 24 steps" in resumed.stdout
    )
    whole = subprocess.run(
        [sys.executable, "-m", "trainforge", "train", *flags(tmp_path / "runs", "whole")],
        cwd=tmp_path, capture_output=True, text=True, timeout=DEADLINE_S,
    )  # fmt: skip
    assert whole.returncode == 0, whole.stderr
    other = tmp_path / "runs" / "whole"
    a, b = load_file(str(RunFolder(run).model)), load_file(str(RunFolder(other).model))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)

    # validation records bitwise (times aside); train steps strictly increasing, no repeats
    def scores(path: Path) -> list[dict]:
        return [{k: v for k, v in r.items() if not k.endswith("_s") and k != "time"}
                for r in records(path, "val")]  # fmt: skip

    assert scores(run) == scores(other) and len(scores(run)) == 3
    assert steps(run) == list(range(1, 25)) == steps(other)


def test_a_finished_run_extended_trains_step_n_plus_1_first(tmp_path, monkeypatch, capsys):
    base = flags(tmp_path, "ext")
    base[base.index("--max_steps") + 1] = "12"
    code, out, err = run_in_process(monkeypatch, capsys, "train", *base)
    assert code == 0, err
    run = RunFolder(tmp_path / "ext")
    # the end of the run left a verified checkpoint of its last step (save_steps is 10)
    assert ckpt.verify(run.checkpoints / "checkpoint-12") is None
    assert f"checkpoints: {run.checkpoints}" in out
    code, out, err = run_in_process(
        monkeypatch, capsys, "train", "--resume", str(run.path), "--max_steps", "15"
    )
    assert code == 0, err
    assert "resuming with a changed config (1): training.max_steps: 12 -> 15" in out
    assert "(epoch 0, step 12)" in out and "done: finished after 15 steps" in out
    assert steps(run.path) == list(range(1, 16))  # 13 is the first step trained again
    assert ckpt.verify(run.checkpoints / "checkpoint-15") is None


def test_a_run_shorter_than_the_save_interval_leaves_a_checkpoint(tmp_path, monkeypatch, capsys):
    base = [*DIGITS_TINY, "--output_dir", str(tmp_path), "--run_name", "short", "--max_steps", "3",
            "--set", "checkpoint.save_steps=100"]  # fmt: skip
    code, out, err = run_in_process(monkeypatch, capsys, "train", *base)
    assert code == 0, err
    run = RunFolder(tmp_path / "short")
    assert ckpt.latest(run.checkpoints).path.name == "checkpoint-3"
    # the summary names only what exists: TensorBoard is off in this run
    assert "TensorBoard:" not in out and not run.tensorboard.exists()
    for line in out.splitlines():
        if line.startswith(("checkpoints:", "metrics:", "final model:")):
            assert Path(line.split(":", 1)[1].strip()).exists(), line


def test_a_fresh_run_into_an_occupied_folder_is_refused_and_overwrite_starts_clean(
    tmp_path, monkeypatch, capsys
):
    base = [*DIGITS_TINY, "--output_dir", str(tmp_path), "--run_name", "one", "--max_steps", "4",
            "--logging_steps", "1"]  # fmt: skip
    code, _, err = run_in_process(monkeypatch, capsys, "train", *base)
    assert code == 0, err
    run = RunFolder(tmp_path / "one")
    before = sorted((p, p.stat().st_mtime_ns) for p in run.path.rglob("*"))
    code, _, err = run_in_process(monkeypatch, capsys, "train", *base, "--max_steps", "6")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"trainforge train --resume {run.path}" in err and "--overwrite" in err
    assert sorted((p, p.stat().st_mtime_ns) for p in run.path.rglob("*")) == before
    code, _out, err = run_in_process(
        monkeypatch, capsys, "train", *base, "--max_steps", "6", "--overwrite"
    )
    assert code == 0, err
    assert steps(run.path) == [1, 2, 3, 4, 5, 6]  # only the new run's records
    assert [p.name for p in run.checkpoints.iterdir() if p.is_dir()] != []
    assert json.loads(run.run_json.read_text())["total_steps"] == 6


@pytest.mark.parametrize("flag", ["--resume", "--resume_from"])
def test_a_resume_after_a_crash_replays_no_step_twice_in_metrics_or_tensorboard(
    tmp_path, monkeypatch, capsys, flag
):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.summary.writer import event_file_writer

    # Both runs share this process, so their event files can share the second and the pid
    # and differ only by TensorBoard's process-wide counter; from 9 to 10 it sorts backwards
    # ("...10" < "...9"). A fresh counter keeps the order the two runs had.
    monkeypatch.setattr(event_file_writer, "_global_uid", event_file_writer.AtomicCounter(0))
    base = flags(tmp_path, "crash")
    base[base.index("--max_steps") + 1] = "14"
    code, _, err = run_in_process(
        monkeypatch, capsys, "train", *base, "--set", "logging.tensorboard=true"
    )
    assert code == 0, err
    run = RunFolder(tmp_path / "crash")
    # As if killed after step 14 was logged but before its checkpoint: resume from step 10.
    import shutil

    shutil.rmtree(run.checkpoints / "checkpoint-14")
    for path in (run.model, run.summary):
        path.unlink()
    code, out, err = run_in_process(monkeypatch, capsys, "train", flag, str(run.path))
    assert code == 0, err
    assert "(epoch 0, step 10)" in out
    assert steps(run.path) == list(range(1, 15))
    events = EventAccumulator(str(run.tensorboard))
    events.Reload()
    tag = next(t for t in events.Tags()["scalars"] if "loss" in t and "train" in t)
    seen = [e.step for e in events.Scalars(tag)]
    assert seen == sorted(set(seen)) and seen[-1] == 14


def test_resume_of_a_folder_that_is_no_run_is_one_line(tmp_path, monkeypatch, capsys):
    code, _, err = run_in_process(monkeypatch, capsys, "train", "--resume", str(tmp_path / "none"))
    assert code == 2 and err.count("\n") == 1 and "not found" in err


def test_a_time_limit_prints_the_command_that_continues_the_run(tmp_path, monkeypatch, capsys):
    base = flags(tmp_path, "limit")
    code, out, err = run_in_process(
        monkeypatch, capsys, "train", *base, "--max_training_hours", "1e-9"
    )
    assert code == 0, err
    run = RunFolder(tmp_path / "limit")
    printed = [line for line in out.splitlines() if line.startswith("resume with: ")]
    assert printed == [
        f"resume with: trainforge train --resume {run.path} --max_training_hours 2e-09"
    ]
    assert "done: time limit of 1e-09 h reached after 0 steps" in out
    argv = [
        *shlex.split(printed[0].removeprefix("resume with: "))[1:-2],
        "--max_training_hours",
        "1",
    ]
    code, out, err = run_in_process(monkeypatch, capsys, *argv)
    assert code == 0, err
    assert "resumed from " in out and "done: finished after 24 steps" in out


def test_a_folder_in_use_by_another_training_is_refused_naming_the_holder(tmp_path):
    import pytest

    from trainforge.errors import UserError

    folder = RunFolder(tmp_path / "busy")
    held = folder.lock()
    try:
        assert not any(folder.path.iterdir())  # taking the lock wrote nothing
        folder.mark_holder()
        with pytest.raises(UserError, match=rf"in use by process {os.getpid()}"):
            RunFolder(tmp_path / "busy").lock()
        assert folder.holder() == f"process {os.getpid()} (trainforge train)"
    finally:
        os.close(held)
    assert folder.holder() is None  # released: the next training may take it
    os.close(folder.lock())


def test_a_hold_takes_the_lock_once_and_lets_it_go_when_the_block_ends(tmp_path):
    import pytest

    from trainforge.errors import UserError

    folder = RunFolder(tmp_path / "held")
    with pytest.raises(RuntimeError, match="the run failed"), folder.hold() as hold:
        assert not hold.taken and folder.holder() is None  # taken when the run needs it
        hold.take()
        hold.take()  # a second take keeps the one lock
        folder.mark_holder()
        with pytest.raises(UserError, match="in use by process"):
            RunFolder(tmp_path / "held").lock()
        raise RuntimeError("the run failed")
    assert not hold.taken and folder.holder() is None  # let go, even after an error
    os.close(folder.lock())


def test_two_resumes_of_one_folder_the_second_refused_and_a_kill_9_lock_taken_over(tmp_path):
    """Two `trainforge train --resume runs/X` together: the second gets one line naming the
    first's process, exit 2. After kill -9 of the first (its `.lock` file left behind), the
    next resume takes the folder over and finishes."""
    import time

    out = tmp_path / "runs"
    run = RunFolder(out / "shared")
    first_flags = [
        *flags(out, "shared"),
        "--max_steps",
        "100000",
        "--set",
        "checkpoint.save_steps=5",
    ]
    first = subprocess.Popen(
        [sys.executable, "-m", "trainforge", "train", *first_flags],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + DEADLINE_S  # waits for events; the deadline is a hang
        while not (run.lock_file.is_file() and ckpt.list_checkpoints(run.checkpoints)):
            assert first.poll() is None, first.stderr.read() if first.stderr else ""
            assert time.monotonic() < deadline, "the first run never saved a checkpoint"
            time.sleep(0.2)
        second = subprocess.run(
            [sys.executable, "-m", "trainforge", "train", "--resume", str(run.path)],
            cwd=tmp_path, capture_output=True, text=True, timeout=DEADLINE_S,
        )  # fmt: skip
        assert second.returncode == 2, second.stdout + second.stderr
        (line,) = second.stderr.strip().splitlines()
        assert f"is in use by process {first.pid} (trainforge train)" in line
        assert "Traceback" not in second.stdout + second.stderr
        assert first.poll() is None  # the refusal touched nothing of the first run
    finally:
        first.kill()  # SIGKILL: no handler runs, the `.lock` file stays behind
        first.wait(timeout=DEADLINE_S)
    assert run.lock_file.is_file() and run.holder() is None  # a stale marker, no holder
    last = ckpt.list_checkpoints(run.checkpoints)[-1].global_step
    third = subprocess.run(
        [sys.executable, "-m", "trainforge", "train", "--resume", str(run.path),
         "--max_steps", str(last + 2)],
        cwd=tmp_path, capture_output=True, text=True, timeout=DEADLINE_S,
    )  # fmt: skip
    assert third.returncode == 0, third.stdout + third.stderr
    assert f"done: finished after {last + 2} steps" in third.stdout
