"""Full and read-only disks at checkpoint, report and export writes.

The disk error is injected (a writer that raises ENOSPC or EACCES for one path), so the
tests run on any machine without mounting a tmpfs. Each refused write must end in one line
naming the path, the reason and the space needed, exit 2, with the previous checkpoint
verified intact, nothing half-written left behind, and a resume that finishes.
"""

from __future__ import annotations

import errno
import json
import os

import pytest
import torch

from fakes.cli_args import DIGITS_TINY as TINY
from fakes.in_process import run_in_process
from trainforge.engine import checkpoint as ckpt
from trainforge.engine import checkpoint_write as cw
from trainforge.engine.trainer import Trainer
from trainforge.storage import StorageError

CPU = torch.device("cpu")
REASONS = {errno.ENOSPC: "No space left on device", errno.EACCES: "Permission denied"}


def train(monkeypatch, capsys, tmp_path, max_steps, *extra):
    args = ["--set", f"output.dir={tmp_path}", "--set", f"training.max_steps={max_steps}"]
    return run_in_process(monkeypatch, capsys, "train", *TINY, *args, *extra)


def refuse(code: int, marker: str, real):
    """`real` (a writer taking the output file first), failing for paths holding `marker`."""

    def writer(out, *args, **kwargs):
        if marker in str(getattr(out, "path", out)):
            raise OSError(code, os.strerror(code))
        return real(out, *args, **kwargs)

    return writer


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES])
def test_refused_checkpoint_stops_in_one_line_and_the_run_resumes(
    tmp_path, monkeypatch, capsys, code
):
    root = tmp_path / "vit_digits" / "checkpoints"
    real = cw.write_safetensors
    monkeypatch.setattr(cw, "write_safetensors", refuse(code, "checkpoint-4", real))
    status, _out, err = train(monkeypatch, capsys, tmp_path, 4)
    assert status == 2
    line = one_line(err)
    assert f"cannot write checkpoint {root / 'checkpoint-4'}: {REASONS[code]}" in line
    assert "it needs about" in line and "free there" in line
    assert f"the previous checkpoint {root / 'checkpoint-2'} is intact" in line
    assert ckpt.verify(root / "checkpoint-2") is None
    assert sorted(p.name for p in root.iterdir()) == ["checkpoint-2", "checkpoint_meta.json"]

    monkeypatch.setattr(cw, "write_safetensors", real)  # room again
    status, out, err = train(monkeypatch, capsys, tmp_path, 4, "--resume", "auto")
    assert status == 0, err
    assert f"resumed from {root / 'checkpoint-2'}" in out
    assert json.loads((root.parent / "summary.json").read_text())["global_step"] == 4
    assert ckpt.verify(root / "checkpoint-4") is None


def test_refused_report_and_export_writes_are_one_line_and_keep_what_was_there(
    tmp_path, monkeypatch, capsys
):
    from trainforge.export import weights
    from trainforge.observe import report

    run_dir = tmp_path / "vit_digits"
    status, _out, err = train(monkeypatch, capsys, tmp_path, 2, "--set", "logging.report=true")
    assert status == 0, err
    page = (run_dir / "report.html").read_bytes()

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(report.Path, "write_text", full)
        status, _out, err = run_in_process(monkeypatch, capsys, "report", str(run_dir))
    assert status == 2
    line = one_line(err)
    assert f"cannot write the report {run_dir / 'report.html'}: No space left" in line
    assert "it needs about" in line
    assert (run_dir / "report.html").read_bytes() == page
    assert not (run_dir / ".report.html.tmp").exists()

    status, _out, err = run_in_process(
        monkeypatch, capsys, "export", str(run_dir), "--format", "safetensors"
    )
    assert status == 0, err
    artifact = run_dir / "export" / "safetensors"
    before = {p.name: p.read_bytes() for p in artifact.iterdir()}
    with monkeypatch.context() as patch:
        patch.setattr(weights, "save_file", refuse(errno.EACCES, "", weights.save_file))
        status, _out, err = run_in_process(
            monkeypatch, capsys, "export", str(run_dir), "--format", "safetensors"
        )
    assert status == 2
    line = one_line(err)
    assert f"cannot write export {artifact}: Permission denied" in line
    assert {p.name: p.read_bytes() for p in artifact.iterdir()} == before
    assert not [p for p in artifact.parent.iterdir() if p.name.startswith(".")]
    assert ckpt.verify(run_dir / "checkpoints" / "checkpoint-2") is None


def test_continue_mode_drops_the_refused_save_and_trains_on(
    tmp_path, points_task, points_config, monkeypatch, capsys
):
    cfg = points_config(**{"training.max_steps": 1, "checkpoint.on_save_error": "continue"})
    trainer = Trainer(points_task(), cfg, run_dir=tmp_path, device=CPU, callbacks=[])
    trainer.checkpointer.writer = cw.CheckpointWriter(on_error=cfg.checkpoint.on_save_error)
    trainer.fit()
    root = tmp_path / "checkpoints"
    trainer.save_checkpoint("checkpoint-1", wait=True)
    real = cw.write_safetensors
    monkeypatch.setattr(cw, "write_safetensors", refuse(errno.ENOSPC, "checkpoint-2", real))
    capsys.readouterr()
    trainer.save_checkpoint("checkpoint-2")
    trainer.checkpointer.writer.wait()  # nothing raised: the run goes on
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("checkpoint not written, training continues")
    assert str(root / "checkpoint-2") in out and "No space left on device" in out
    trainer.save_checkpoint("checkpoint-2b")  # refused again: said once, not twice
    trainer.checkpointer.writer.wait()
    assert capsys.readouterr().out == "" and len(trainer.checkpointer.writer.skipped) == 2
    monkeypatch.setattr(cw, "write_safetensors", real)
    trainer.save_checkpoint("checkpoint-3", wait=True)
    assert [c.path.name for c in ckpt.list_checkpoints(root)] == ["checkpoint-1", "checkpoint-3"]


def test_stop_mode_raises_on_the_training_thread_and_continue_keeps_other_errors():
    def disk_full():
        raise StorageError("cannot write checkpoint x: No space left on device")

    def bug():
        raise RuntimeError("a bug")

    for background in (True, False):
        writer = cw.CheckpointWriter(background=background)
        with pytest.raises(StorageError):
            writer.submit(disk_full)
            writer.wait()
        lenient = cw.CheckpointWriter(background=background, on_error="continue")
        lenient.submit(disk_full)
        lenient.wait()
        assert len(lenient.skipped) == 1
        with pytest.raises(RuntimeError, match="a bug"):
            lenient.submit(bug)
            lenient.wait()


def test_space_warning_when_the_checkpoints_will_not_fit(tmp_path, monkeypatch):
    from trainforge import storage

    monkeypatch.setattr(storage, "free_bytes", lambda path: 10 * 10**6)
    line = ckpt.space_warning(tmp_path / "run", 4 * 10**6, 3)
    assert line is not None and "12.0 MB" in line and "10.0 MB free" in line
    assert str(tmp_path / "run") in line and "\n" not in line
    assert ckpt.space_warning(tmp_path / "run", 3 * 10**6, 3) is None
    model = torch.nn.Linear(10, 10)  # 110 float32 weights: 440 bytes, x3 with AdamW moments
    assert ckpt.estimate_bytes(model) == 3 * 440


class FillsUp:
    """A file on a disk that fills up after `room_bytes`: later writes go to /dev/full,
    which refuses them with the kernel's ENOSPC."""

    def __init__(self, path, room_bytes: int) -> None:
        self.fh = open(path, "wb")  # noqa: SIM115 - closed by close()
        self.full = open("/dev/full", "wb", buffering=0)  # noqa: SIM115
        self.room_bytes = room_bytes

    def write(self, data) -> int:
        self.room_bytes -= memoryview(data).nbytes
        return (self.fh if self.room_bytes >= 0 else self.full).write(data)

    def flush(self) -> None:
        self.fh.flush()

    def fileno(self) -> int:
        return self.fh.fileno()

    def close(self) -> None:
        self.fh.close()
        self.full.close()


def test_a_disk_filling_up_inside_torch_save_raises_the_disk_error_itself(tmp_path, monkeypatch):
    """torch's zip writer turns a write refused mid-file into `RuntimeError: [enforce fail
    at inline_container.cc] unexpected pos`; the checkpoint writer raises the disk's own
    error, which becomes the one-line `StorageError`."""
    from trainforge.engine import checkpoint_write

    monkeypatch.setattr(checkpoint_write, "open", lambda path, mode: FillsUp(path, 300_000),
                        raising=False)  # fmt: skip
    state = {"a": torch.zeros(1 << 18), "b": torch.zeros(1 << 18)}  # 2 MB
    with pytest.raises(OSError) as info:
        checkpoint_write.write_file(tmp_path / "state.pt", lambda out: torch.save(state, out))
    assert info.value.errno == errno.ENOSPC
    with pytest.raises(StorageError, match=r"cannot write checkpoint .*: No space left on"):
        ckpt.save_checkpoint(
            tmp_path / "checkpoints" / "checkpoint-1", model_state={"w": torch.zeros(4)},
            state=state, meta={}, config_yaml="",
        )  # fmt: skip
    assert not list((tmp_path / "checkpoints").iterdir())


def test_a_library_error_caused_by_a_refusing_disk_is_one_line():
    from trainforge.storage import disk_cause, disk_error_line

    try:
        try:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), "/runs/r/tensorboard/ev")
        except OSError as err:
            raise RuntimeError("a library's wrapper") from err
    except RuntimeError as err:
        wrapped = err
    line = disk_error_line(wrapped)
    assert line is not None and "\n" not in line
    assert line.startswith("cannot write file /runs/r/tensorboard/ev: Read-only file system")
    assert "make the folder writable" in line
    assert disk_cause(RuntimeError("a bug")) is None
    assert disk_error_line(ValueError("no disk involved")) is None
