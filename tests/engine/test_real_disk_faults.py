"""Real full and read-only disks: the run folder on a small tmpfs that fills up or is
remounted read-only in the middle of a run (root, as CI runs).

The fault is the kernel's own ENOSPC or EROFS. Only its moment is chosen: right after a
checkpoint lands (a wrapper of the real `write_run_meta`), the disk is filled with a file or
remounted read-only. Each run must end in one line naming the path, exit 2, with the
previous checkpoint verified intact; the next start on a disk with room again tidies what
the failed write left and the resume finishes.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakes.cli_args import DIGITS_TINY as TINY
from fakes.in_process import run_in_process
from trainforge.engine import checkpoint as ckpt

pytestmark = pytest.mark.slow
REAL_RUN_META = ckpt.write_run_meta


@dataclass
class Disk:
    path: Path

    def remount(self, options: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{options}", str(self.path)], check=True)

    def fill(self, leave_bytes: int = 0) -> None:
        """Write a file until the kernel refuses (ENOSPC), then give back `leave_bytes`."""
        filler = self.path / "filler"
        with filler.open("wb", buffering=0) as fh:
            try:
                while True:
                    fh.write(b"\0" * (1 << 16))
            except OSError as err:
                assert err.errno == errno.ENOSPC, err
        if leave_bytes:
            os.truncate(filler, max(0, filler.stat().st_size - leave_bytes))


@pytest.fixture
def disk(tmp_path):
    """A 4 MB tmpfs, unmounted afterwards whatever happened."""
    if os.geteuid() != 0:
        pytest.fail("mounting a tmpfs needs root: run the slow tests as root, as CI does")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True)
    try:
        yield Disk(mount)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def train(monkeypatch, capsys, disk: Disk, max_steps: int, *extra: str):
    args = ["--set", f"output.dir={disk.path}", "--set", f"training.max_steps={max_steps}"]
    return run_in_process(monkeypatch, capsys, "train", *TINY, *args, *extra)


def after_save(monkeypatch, name: str, fault) -> None:
    """Run `fault()` once, right after checkpoint `name` and the run's checkpoint summary
    have landed (the summary is the save's last write)."""

    def write_run_meta(root, meta):
        REAL_RUN_META(root, meta)
        if meta.get("name") == name:
            fault()

    monkeypatch.setattr(ckpt, "write_run_meta", write_run_meta)


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def resumes(monkeypatch, capsys, disk: Disk, max_steps: int, *extra: str) -> str:
    """The next start on a disk with room: it tidies, resumes and finishes."""
    monkeypatch.setattr(ckpt, "write_run_meta", REAL_RUN_META)
    status, out, err = train(monkeypatch, capsys, disk, max_steps, "--resume", "auto", *extra)
    assert status == 0, err
    root = disk.path / "vit_digits" / "checkpoints"
    assert not [p.name for p in root.iterdir() if p.name.startswith(".")]
    summary = json.loads((disk.path / "vit_digits" / "summary.json").read_text())
    assert summary["global_step"] == max_steps
    return out


def test_a_full_disk_at_a_checkpoint_stops_in_one_line_and_the_run_resumes(
    disk, monkeypatch, capsys
):
    root = disk.path / "vit_digits" / "checkpoints"
    # 16 kB left: room for metrics lines, not for the next checkpoint (about 76 kB)
    after_save(monkeypatch, "checkpoint-2", lambda: disk.fill(leave_bytes=16 << 10))
    status, _out, err = train(monkeypatch, capsys, disk, 6)
    assert status == 2
    line = one_line(err)
    assert f"cannot write checkpoint {root / 'checkpoint-4'}: No space left on device" in line
    assert "it needs about" in line
    assert f"the previous checkpoint {root / 'checkpoint-2'} is intact" in line
    assert ckpt.verify(root / "checkpoint-2") is None

    disk.remount("size=64m")  # the disk grew
    out = resumes(monkeypatch, capsys, disk, 6)
    assert f"resumed from {root / 'checkpoint-2'}" in out
    assert ckpt.verify(root / "checkpoint-6") is None


@pytest.mark.parametrize("writer", ["metrics", "TensorBoard events"])
def test_a_full_disk_at_a_metrics_or_tensorboard_write_stops_in_one_line_and_resumes(
    disk, monkeypatch, capsys, writer
):
    run = disk.path / "vit_digits"
    after_save(monkeypatch, "checkpoint-40", lambda: disk.fill())
    # a record per step, 39 of them (over a 4 kB page) before the next checkpoint
    extra = ["--set", "logging.logging_steps=1", "--set", "checkpoint.save_steps=40"]
    if writer == "metrics":
        path = run / "metrics.jsonl"
    else:
        path = run / "tensorboard"
        extra += ["--set", "logging.tensorboard=true", "--set", "logging.jsonl=false"]
    status, _out, err = train(monkeypatch, capsys, disk, 80, *extra)
    assert status == 2, err
    line = one_line(err)
    assert f"cannot write {writer} {path}: No space left on device" in line
    assert ckpt.verify(run / "checkpoints" / "checkpoint-40") is None

    disk.remount("size=64m")
    out = resumes(monkeypatch, capsys, disk, 80, *extra)
    assert f"resumed from {run / 'checkpoints' / 'checkpoint-40'}" in out


def test_a_read_only_remount_mid_run_stops_in_one_line_and_the_run_resumes(
    disk, monkeypatch, capsys
):
    root = disk.path / "vit_digits" / "checkpoints"
    after_save(monkeypatch, "checkpoint-2", lambda: disk.remount("ro"))
    status, _out, err = train(monkeypatch, capsys, disk, 6)
    assert status == 2
    line = one_line(err)
    assert "Read-only file system" in line and str(disk.path / "vit_digits") in line
    assert "make the folder writable" in line
    assert ckpt.verify(root / "checkpoint-2") is None

    disk.remount("rw")
    out = resumes(monkeypatch, capsys, disk, 6)
    assert f"resumed from {root / 'checkpoint-2'}" in out
