"""Checkpoints from another model or another trainforge version: refused in one line that
says what differs, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from fakes.cli_args import DIGITS_TINY as TINY
from fakes.in_process import run_in_process
from trainforge.engine import checkpoint as ckpt
from trainforge.engine import checkpoint_write as cw
from trainforge.errors import UserError


def save(folder: Path, model: dict, **meta) -> Path:
    return ckpt.save_checkpoint(
        folder,
        model_state={"embed.weight": torch.zeros(4, model["embedding_dim"])},
        state={"epoch": 0},
        meta={"global_step": 2, **meta},
        config_yaml=yaml.safe_dump({"model": model}),
    )


def restamp(folder: Path, **changes) -> None:
    """Change meta.json and re-sign the manifest, as another trainforge would have written."""
    meta = json.loads((folder / "meta.json").read_text())
    meta.update(changes)
    (folder / "meta.json").write_text(json.dumps(meta))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["meta.json"] = cw.file_digest(folder / "meta.json")
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_checkpoints_record_their_format_and_a_newer_format_is_refused(tmp_path):
    folder = save(tmp_path / "checkpoint-2", {"arch": "vit", "embedding_dim": 8})
    assert ckpt.read_meta(folder)["format"] == ckpt.FORMAT
    ckpt.load_checkpoint(folder)  # this version's own format loads
    ckpt.check_format(folder)
    restamp(folder, format=ckpt.FORMAT + 1, versions={"trainforge": "9.9.0"})
    with pytest.raises(UserError, match="checkpoint format"):
        ckpt.check_format(folder)  # from meta.json alone, before anything is loaded
    with pytest.raises(UserError) as info:
        ckpt.load_checkpoint(folder)
    line = info.value.line()
    assert "\n" not in line and str(folder) in line
    assert f"written by trainforge 9.9.0 with checkpoint format {ckpt.FORMAT + 1}" in line
    assert f"reads format {ckpt.FORMAT}" in line


def test_a_checkpoint_from_before_the_format_number_still_loads(tmp_path):
    folder = save(tmp_path / "checkpoint-2", {"arch": "vit", "embedding_dim": 8})
    meta = json.loads((folder / "meta.json").read_text())
    del meta["format"]
    (folder / "meta.json").write_text(json.dumps(meta))
    restamp(folder)
    _, _, loaded = ckpt.load_checkpoint(folder)
    assert "format" not in loaded


def test_another_model_names_the_setting_that_differs(tmp_path):
    folder = save(tmp_path / "checkpoint-2", {"arch": "vit", "embedding_dim": 192})
    saved, _, _ = ckpt.load_checkpoint(folder)
    current = {"embed.weight": torch.zeros(4, 384)}
    with pytest.raises(UserError) as info:
        ckpt.check_model_fits(folder, saved, current, {"arch": "vit", "embedding_dim": 384})
    line = info.value.line()
    assert "\n" not in line
    assert f"checkpoint {folder} was written for model vit embedding_dim 192, " in line
    assert "this config has 384" in line and "embed.weight (4, 192) here (4, 384)" in line
    # Without the config, the first tensor that differs still says it.
    with pytest.raises(UserError, match=r"holds a different model .*embed\.weight"):
        ckpt.check_model_fits(folder, saved, current)
    # Settings that change no shape (dropout) are not a reason to refuse.
    ckpt.check_model_fits(folder, saved, {"embed.weight": torch.zeros(4, 192)}, {"dropout": 0.5})


def test_resume_and_export_refuse_another_format_without_writing(tmp_path, monkeypatch, capsys):
    args = ["--set", f"output.dir={tmp_path}", "--set", "training.max_steps=2"]
    status, _out, err = run_in_process(monkeypatch, capsys, "train", *TINY, *args)
    assert status == 0, err
    run_dir = tmp_path / "vit_digits"
    folder = run_dir / "checkpoints" / "checkpoint-2"
    restamp(folder, format=ckpt.FORMAT + 1, versions={"trainforge": "9.9.0"})
    (run_dir / "model.safetensors").unlink()  # export then reads the checkpoint
    before = sorted((str(p), p.stat().st_mtime_ns) for p in folder.parent.rglob("*"))
    for command in (
        ["train", *TINY, *args, "--resume_from", str(folder)],
        ["export", str(folder), "--format", "safetensors"],
    ):
        status, out, err = run_in_process(monkeypatch, capsys, *command)
        assert status == 2, (out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, err
        assert str(folder) in lines[0] and f"checkpoint format {ckpt.FORMAT + 1}" in lines[0]
    assert sorted((str(p), p.stat().st_mtime_ns) for p in folder.parent.rglob("*")) == before
    assert not (run_dir / "export").exists()


def test_resuming_with_another_embedding_dim_is_one_line(tmp_path, monkeypatch, capsys):
    args = ["--set", f"output.dir={tmp_path}", "--set", "training.max_steps=2"]
    status, _out, err = run_in_process(monkeypatch, capsys, "train", *TINY, *args)
    assert status == 0, err
    folder = tmp_path / "vit_digits" / "checkpoints" / "checkpoint-2"
    wider = [*args, "--set", "model.embedding_dim=32", "--resume_from", str(folder)]
    status, out, err = run_in_process(monkeypatch, capsys, "train", *TINY, *wider)
    assert status == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and str(folder) in lines[0], err
    assert ckpt.verify(folder) is None


def test_a_format_1_checkpoint_resumes_into_the_state_registry(
    tmp_path, points_task, points_config
):
    """Format 1 kept the non-finite counts and the best values inside "trainer"; a
    checkpoint of that layout restores them into the parts that own them now, and the run
    goes on exactly as from the same checkpoint in format 2."""
    from trainforge.engine.trainer import Trainer

    cfg = points_config(**{"training.max_steps": 4, "training.per_device_train_batch_size": 8})

    def trainer(run: str) -> Trainer:
        made = Trainer(points_task(n=64, batch_size=8, shuffle=True), cfg, run_dir=tmp_path / run,
                       device=torch.device("cpu"), callbacks=[])  # fmt: skip
        return made

    first = trainer("a")
    first.total_steps = 2
    first.fit()
    first.state.best_metric, first.state.best_step, first.state.best_fast = 0.5, 2, 0.25
    first.state.nonfinite_steps, first.state.consecutive_nonfinite = 3, 1
    new = first.save_checkpoint("checkpoint-2", wait=True)
    model_state, state, meta = ckpt.load_checkpoint(new)
    assert {"nonfinite", "best", "trainer"} <= set(state) and meta["format"] == ckpt.FORMAT
    old_state = {k: v for k, v in state.items() if k not in ("nonfinite", "best")}
    old_state["trainer"] = {**state["trainer"], **state["nonfinite"], **state["best"]}
    old_state["trainer"]["improved"] = True
    old = ckpt.save_checkpoint(
        tmp_path / "a" / "checkpoints" / "checkpoint-2-format-1", model_state=model_state,
        state=old_state, meta=meta, config_yaml="",
    )  # fmt: skip
    restamp(old, format=1)

    ends = []
    for folder in (new, old):
        resumed = trainer("b")
        assert resumed.load_checkpoint(folder)["global_step"] == 2
        s = resumed.state
        assert (s.best_metric, s.best_step, s.best_fast, s.improved) == (0.5, 2, 0.25, False)
        assert (s.nonfinite_steps, s.consecutive_nonfinite, s.global_step) == (3, 1, 2)
        resumed.fit()
        ends.append([p.detach().clone() for p in resumed.model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*ends, strict=True))
