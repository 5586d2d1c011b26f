"""A run folder is the run: it continues with another micro-batch, in another directory,
and says which guarantee its resume gives (exact: bitwise; continued: with the reasons)."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import signal
from pathlib import Path

import pytest
from safetensors.torch import load_file
from tests.fakes.cli_args import DIGITS_TINY
from tests.fakes.in_process import run_in_process

from trainforge.engine.callbacks import GracefulStop
from trainforge.engine.checkpointer import setup_changes

# A schedule that does not depend on the total: a run stopped at 6 of 12 steps is then the
# first half of the 12-step run.
LOGGED = [
    "--set", "logging.logging_steps=2", "--set", "data.horizontal_flip=true",
    "--set", "schedule.lr_scheduler_type=constant", "--set", "schedule.warmup_epochs=0",
]  # fmt: skip


def train(monkeypatch, capsys, tmp_path, name, steps, *extra):
    args = ["--set", f"output.dir={tmp_path}", "--set", f"output.run_name={name}"]
    code, out, err = run_in_process(
        monkeypatch, capsys, "train", *DIGITS_TINY, *LOGGED, *args,
        "--max_steps", str(steps), *extra,
    )  # fmt: skip
    assert code == 0, out[-2000:] + err[-2000:]
    return out


def train_losses(run_dir) -> dict[int, float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if r["split"] == "train"}


def test_a_run_continues_with_another_micro_batch_on_the_same_trajectory(
    monkeypatch, capsys, tmp_path
):
    train(monkeypatch, capsys, tmp_path, "whole", 12)
    train(monkeypatch, capsys, tmp_path, "moved", 6)
    out = train(monkeypatch, capsys, tmp_path, "moved", 12, "--resume", str(tmp_path / "moved"),
                "--set", "hardware.micro_batch_size=16")  # fmt: skip
    assert "continued: micro-batch 64 -> 16: sums accumulate in another order" in out
    assert "accumulation 1 -> 4" in out
    whole, moved = train_losses(tmp_path / "whole"), train_losses(tmp_path / "moved")
    assert sorted(whole) == sorted(moved)
    for step, loss in whole.items():
        assert moved[step] == pytest.approx(loss, rel=1e-4), step
    a = load_file(str(tmp_path / "whole" / "model.safetensors"))
    b = load_file(str(tmp_path / "moved" / "model.safetensors"))
    for key in a:
        if not key.endswith("attn.qkv.bias"):  # zero true gradient: AdamW-scaled noise
            assert (a[key] - b[key]).abs().max() < 1e-4, key
    segments = json.loads((tmp_path / "moved" / "run.json").read_text())["segments"]
    assert [(s["micro_batch"], s["accumulation"], s["resume"]) for s in segments] == [
        (64, 1, "start"), (16, 4, "continued")
    ]  # fmt: skip


def test_a_stop_at_an_epochs_end_continues_on_another_split_with_the_next_epoch(
    monkeypatch, capsys, tmp_path
):
    """A stop that lands on an epoch's short last step (the digits: 23 steps of 64, the last
    of 29), resumed on another split, starts the next epoch: it does not train that short
    step again (a torchrun job whose node joined at that moment left the trajectory)."""
    train(monkeypatch, capsys, tmp_path, "whole", 26)
    original = GracefulStop.on_batch_end

    def stop_at_epoch_end(self, trainer):
        if trainer.state.global_step == 23 and self.received is None:
            os.kill(os.getpid(), signal.SIGINT)  # the real handler and checkpoint
        return original(self, trainer)

    with monkeypatch.context() as patch:
        patch.setattr(GracefulStop, "on_batch_end", stop_at_epoch_end)
        _, out, err = run_in_process(
            patch, capsys, "train", *DIGITS_TINY, *LOGGED, "--set", f"output.dir={tmp_path}",
            "--set", "output.run_name=edge", "--max_steps", "26",
        )  # fmt: skip
    assert "SIGINT: checkpoint saved to" in out, out[-2000:] + err[-2000:]
    out = train(monkeypatch, capsys, tmp_path, "edge", 26, "--resume", str(tmp_path / "edge"),
                "--set", "hardware.micro_batch_size=16")  # fmt: skip
    assert "(epoch 0, step 23), continued: micro-batch 64 -> 16" in out, out
    whole, edge = train_losses(tmp_path / "whole"), train_losses(tmp_path / "edge")
    assert sorted(edge) == sorted(whole)
    for step, loss in whole.items():
        assert edge[step] == pytest.approx(loss, rel=1e-4), step


def test_loader_workers_decide_how_not_what_even_when_a_run_moves_between_them(
    monkeypatch, capsys, tmp_path
):
    """The worker count is the hardware profile's (0 on a laptop, 6 on a cluster node): the
    same recipe trains the same steps with any count, and a run continues under another."""
    train(monkeypatch, capsys, tmp_path, "none", 8)
    before = set(multiprocessing.active_children())
    train(monkeypatch, capsys, tmp_path, "two", 8, "--set", "data.dataloader_num_workers=2")
    # Its workers (persistent, restarted by the closing confusion-matrix pass) end with the
    # run, not later inside the garbage collector of a process that goes on.
    assert set(multiprocessing.active_children()) <= before
    train(monkeypatch, capsys, tmp_path, "moved", 4)
    out = train(monkeypatch, capsys, tmp_path, "moved", 8, "--resume", str(tmp_path / "moved"),
                "--set", "data.dataloader_num_workers=2")  # fmt: skip
    assert "loader workers 0 -> 2" in out
    none = train_losses(tmp_path / "none")
    assert train_losses(tmp_path / "two") == none  # bitwise: only the loading changed
    moved = train_losses(tmp_path / "moved")
    assert sorted(moved) == sorted(none)
    for step, loss in none.items():
        assert moved[step] == pytest.approx(loss, rel=1e-6), step


def test_a_copied_run_folder_continues_where_it_was_copied_to(monkeypatch, capsys, tmp_path):
    train(monkeypatch, capsys, tmp_path, "here", 4)
    elsewhere = tmp_path / "other-disk" / "here"
    shutil.copytree(tmp_path / "here", elsewhere)
    out = train(monkeypatch, capsys, tmp_path / "other-disk", "here", 6, "--resume",
                str(elsewhere))  # fmt: skip
    assert "exact (bitwise: the same setup)" in out
    assert json.loads((elsewhere / "summary.json").read_text())["global_step"] == 6
    assert json.loads((tmp_path / "here" / "summary.json").read_text())["global_step"] == 4
    segments = json.loads((elsewhere / "run.json").read_text())["segments"]
    assert [s["folder"] for s in segments] == [
        str((tmp_path / "here").resolve()), str(elsewhere.resolve())
    ]  # fmt: skip


def test_setup_changes_name_each_reason_and_whether_the_run_moves():
    saved = {"world_size": 1, "micro_batch": 64, "accumulation": 1, "device": "cuda",
             "precision": "bf16", "threads": 4, "workers": 0}  # fmt: skip
    assert setup_changes(saved, dict(saved)) == ([], False)
    now = dict(saved, device="cpu", precision="fp32")  # a GPU checkpoint resumed on a CPU
    reasons, moved = setup_changes(saved, now)
    assert not moved and reasons == [
        "device cuda -> cpu: other kernels round differently",
        "precision bf16 -> fp32: other rounding",
    ]
    reasons, moved = setup_changes(saved, dict(saved, world_size=2, micro_batch=32))
    assert moved and reasons[0] == "world size 1 -> 2: sums reduce in another order"
    assert setup_changes(None, saved) == ([], False)  # a checkpoint of an earlier version


def test_a_resume_says_what_changed_once_and_its_checkpoint_relative(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)  # the default relative runs/ folder, as a user has it

    def run(*extra: str) -> str:
        code, out, err = run_in_process(
            monkeypatch, capsys, "train", *DIGITS_TINY, *LOGGED, "--set", "output.dir=runs",
            "--set", "output.run_name=said", *extra,
        )  # fmt: skip
        assert code == 0, out[-2000:] + err[-2000:]
        return out

    run("--max_steps", "4")
    out = run("--max_steps", "6", "--resume", "runs/said")
    changed = [line for line in out.splitlines() if "max_steps" in line and "resum" in line]
    assert changed == ["resuming with a changed config (1): training.max_steps: 4 -> 6"], out
    assert "resumed from runs/said/checkpoints/checkpoint-4 (epoch 0, step 4)" in out, out
    assert "checkpoints: runs/said/checkpoints" in out
    done = re.search(r"done: finished after 6 steps in ([\d.]+) s of training in all; "
                     r"this segment 2 steps in ([\d.]+) s\n", out)  # fmt: skip
    assert done and float(done[2]) <= float(done[1]), out


def test_a_resume_through_a_checkpoints_second_name_says_the_name_given(tmp_path, monkeypatch):
    """`checkpoint_epoch_5` may be a link to `checkpoint-5` (one folder, two names): the
    resumed-from line says the name the user gave, relative like the other start lines."""
    from trainforge.run.resume import _shown

    root = tmp_path / "runs" / "r" / "checkpoints"
    (root / "checkpoint-5").mkdir(parents=True)
    (root / "checkpoint_epoch_5").symlink_to("checkpoint-5", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    assert _shown(root / "checkpoint_epoch_5") == Path("runs/r/checkpoints/checkpoint_epoch_5")
    assert _shown(Path("runs/r/checkpoints/checkpoint-5")) == Path(
        "runs/r/checkpoints/checkpoint-5"
    )
    assert _shown(Path("/elsewhere/checkpoint-5")) == Path("/elsewhere/checkpoint-5")
