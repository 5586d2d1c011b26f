"""One flipped byte in a checkpoint file: a resume falls back to the newest checkpoint that
verifies, naming the damaged file in one line, and `trainforge verify` finds it."""

from __future__ import annotations

import json

import pytest

from fakes.cli_args import DIGITS_TINY as TINY
from fakes.in_process import run_in_process
from trainforge.engine import checkpoint as ckpt


def train(monkeypatch, capsys, tmp_path, *extra):
    args = ["--set", f"output.dir={tmp_path}", "--set", "training.max_steps=6"]
    return run_in_process(monkeypatch, capsys, "train", *TINY, *args, *extra)


def flip(path, offset_from_end: int = 100) -> None:
    """Change one byte, as a failing disk or a bad copy would (the size stays)."""
    data = bytearray(path.read_bytes())
    data[len(data) - offset_from_end] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name", ["model.safetensors", "state.pt"])
def test_one_flipped_byte_falls_back_to_the_previous_checkpoint_and_verify_finds_it(
    tmp_path, monkeypatch, capsys, name
):
    run = tmp_path / "vit_digits"
    root = run / "checkpoints"
    status, _out, err = train(monkeypatch, capsys, tmp_path)
    assert status == 0, err
    status, out, _err = run_in_process(monkeypatch, capsys, "verify", str(run))
    assert status == 0 and out.splitlines()[-1] == "3 checkpoints, 0 damaged", out

    flip(root / "checkpoint-6" / name)
    ckpt._VERIFIED.clear()  # as a new process: nothing verified yet
    status, out, err = run_in_process(monkeypatch, capsys, "verify", str(run))
    assert status == 1 and not err
    rows = {line.split()[0]: line for line in out.splitlines()[1:-1]}
    assert rows["checkpoint-6"].endswith(f"DAMAGED: checksum mismatch in {name}")
    assert rows["checkpoint-4"].split()[1:] == ["4", "4", "ok"]
    assert out.splitlines()[0].split() == ["checkpoint", "step", "files", "status"]
    assert out.splitlines()[-1] == "3 checkpoints, 1 damaged"
    status, out, _err = run_in_process(monkeypatch, capsys, "verify", str(root / "checkpoint-4"))
    assert status == 0 and out.splitlines()[-1] == "1 checkpoint, 0 damaged"

    status, out, err = train(monkeypatch, capsys, tmp_path, "--resume", "auto")
    assert status == 0, err
    skipped = [line for line in out.splitlines() if line.startswith("skipping checkpoint")]
    assert skipped == [f"skipping checkpoint {root / 'checkpoint-6'}: checksum mismatch in {name}"]
    assert f"resumed from {root / 'checkpoint-4'}" in out
    assert json.loads((run / "summary.json").read_text())["global_step"] == 6
    assert ckpt.verify(root / "checkpoint-6") is None  # written again, whole


def test_verify_names_what_is_not_a_run(tmp_path, monkeypatch, capsys):
    status, _out, err = run_in_process(monkeypatch, capsys, "verify", str(tmp_path / "nope"))
    assert status == 2 and err.startswith(f"verify {tmp_path / 'nope'}: no run folder")
