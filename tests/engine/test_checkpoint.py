"""Checkpoint files: atomic folders, verified manifests, safe loading, rotation, resume."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

from trainforge.engine import checkpoint as ckpt
from trainforge.errors import UserError


def save(folder, step=1, value=1.0):
    return ckpt.save_checkpoint(
        folder,
        model_state={"w": torch.full((2, 2), value)},
        state={"n": torch.tensor([step]), "epoch": 1},
        meta={"global_step": step, "timestamp": f"t{step:04d}"},
        config_yaml="a: 1\n",
    )


def test_round_trip_and_manifest(tmp_path):
    folder = save(tmp_path / "checkpoints" / "checkpoint-1")
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.yaml",
        "manifest.json",
        "meta.json",
        "model.safetensors",
        "state.pt",
    ]
    model_state, state, meta = ckpt.load_checkpoint(folder)
    assert torch.equal(model_state["w"], torch.ones(2, 2))
    assert state["epoch"] == 1 and meta["global_step"] == 1
    assert not any(p.name.startswith(".") for p in folder.parent.iterdir())


def test_corrupt_checkpoint_is_skipped_for_the_newest_good_one(tmp_path, capsys):
    root = tmp_path / "checkpoints"
    save(root / "checkpoint-1", step=1)
    bad = save(root / "checkpoint-2", step=2)
    (bad / "model.safetensors").write_bytes(b"garbage")
    assert ckpt.latest(root).path.name == "checkpoint-1"
    assert "checksum mismatch in model.safetensors" in capsys.readouterr().out
    with pytest.raises(UserError, match="not usable"):
        ckpt.load_checkpoint(bad)


def test_folder_without_manifest_is_not_a_checkpoint(tmp_path):
    folder = save(tmp_path / "checkpoints" / "checkpoint-5")
    (folder / "manifest.json").unlink()
    assert ckpt.verify(folder) == "no manifest (incomplete write)"
    assert ckpt.latest(tmp_path / "checkpoints") is None


class Canary:
    """Unpickling this writes a file: proof that code ran."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_malicious_pickle_is_refused(tmp_path):
    folder = save(tmp_path / "checkpoints" / "checkpoint-1")
    canary = tmp_path / "canary.txt"
    with open(folder / "state.pt", "wb") as fh:
        pickle.dump({"x": Canary(str(canary))}, fh)
    # Re-sign the manifest so only the pickle check stands between the file and execution.
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["state.pt"] = ckpt._sha256(folder / "state.pt")
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="refused"):
        ckpt.load_checkpoint(folder)
    assert not canary.exists()


def test_rotation_keeps_limit_and_never_best(tmp_path):
    root = tmp_path / "checkpoints"
    save(root / "best_model", step=2)
    for step in (1, 3, 5, 7):
        save(root / f"checkpoint-{step}", step=step)
    removed = ckpt.rotate(root, keep=2)
    assert sorted(p.name for p in removed) == ["checkpoint-1", "checkpoint-3"]
    assert sorted(p.name for p in root.iterdir()) == ["best_model", "checkpoint-5", "checkpoint-7"]


def test_write_failure_is_one_line_and_keeps_previous(tmp_path, monkeypatch):
    folder = save(tmp_path / "checkpoints" / "checkpoint-1", value=1.0)

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt.torch, "save", full_disk)
    with pytest.raises(UserError, match="No space left on device") as info:
        save(folder, value=2.0)
    assert "\n" not in str(info.value)
    model_state, _, _ = ckpt.load_checkpoint(folder)
    assert torch.equal(model_state["w"], torch.ones(2, 2))
