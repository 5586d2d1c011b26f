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


def test_hand_written_safetensors_load_with_the_library_in_every_dtype(tmp_path):
    from safetensors.torch import load_file

    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    tensors = {
        "f32": base,
        "bf16": base.to(torch.bfloat16),
        "f16": base.half(),
        "i64": base.long(),
        "bool": base > 5,
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
        "column": base[:, 1],  # not contiguous
        "tied": base,  # shares storage with f32
    }
    path = ckpt.save_weights(tmp_path / "model.safetensors", tensors, {"config_hash": "abc"})
    loaded = load_file(str(path))
    assert loaded.keys() == tensors.keys()
    for name, tensor in tensors.items():
        assert loaded[name].dtype == tensor.dtype and torch.equal(loaded[name], tensor), name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_manifest_hashes_match_the_bytes_on_disk(tmp_path):
    folder = save(tmp_path / "checkpoints" / "checkpoint-1")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert sorted(manifest) == ["config.yaml", "meta.json", "model.safetensors", "state.pt"]
    for name, digest in manifest.items():
        assert ckpt._sha256(folder / name) == digest, name


def test_rotation_rehashes_only_what_changed_since_this_process_wrote_it(tmp_path, monkeypatch):
    root = tmp_path / "checkpoints"
    for step in (1, 2):
        save(root / f"checkpoint-{step}", step=step)
    hashed = []
    real = ckpt._sha256
    monkeypatch.setattr(ckpt, "_sha256", lambda path: hashed.append(path.name) or real(path))
    ckpt.rotate(root, keep=5)
    assert hashed == []  # both were written here and have not changed
    (root / "checkpoint-1" / "model.safetensors").write_bytes(b"garbage")
    assert [c.path.name for c in ckpt.list_checkpoints(root, cached=True)] == ["checkpoint-2"]
    assert "model.safetensors" in hashed


def test_finite_check_sees_nan_inf_and_overflowing_finite_sums():
    big = torch.full((4,), 3e38)  # finite, but its float32 sum overflows
    assert ckpt.all_finite({"a": big, "b": torch.ones(3)})
    assert not ckpt.all_finite({"a": torch.tensor([1.0, float("nan")])})
    assert not ckpt.all_finite({"a": torch.tensor([float("inf"), -float("inf")])})
    assert ckpt.all_finite({"i": torch.tensor([1, 2])})


def test_full_disk_at_the_final_weights_keeps_the_previous_file(tmp_path, monkeypatch):
    path = ckpt.save_weights(tmp_path / "model.safetensors", {"w": torch.ones(2)})
    before = path.read_bytes()

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt, "write_safetensors", full)
    with pytest.raises(UserError, match=r"cannot write weights .*model\.safetensors: No space"):
        ckpt.save_weights(path, {"w": torch.zeros(2)})
    assert path.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_snapshot_without_copy_hands_cpu_tensors_over_as_they_are():
    weight = torch.ones(3)
    shared = ckpt.Snapshot(copy=False).copy({"w": weight})
    copied = ckpt.Snapshot().copy({"w": weight})
    assert shared["w"].data_ptr() == weight.data_ptr()
    assert copied["w"].data_ptr() != weight.data_ptr() and torch.equal(copied["w"], weight)


def test_deferred_copy_holds_the_state_of_the_moment_the_step_waits_for_it():
    """Weights and moments are copied off the loop; the next optimizer step waits for the
    copy, so the snapshot holds the values at `copy` time, never a later step's."""
    model = torch.nn.Linear(256, 256)  # 256 KiB of weights: deferred
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(2, 256)).sum().backward()
    optimizer.step()
    snap = ckpt.Snapshot(optimizer=optimizer)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    moment = optimizer.state[model.weight]["exp_avg"].clone()
    saved, opt_state = snap.copy((model.state_dict(), optimizer.state_dict()))
    optimizer.step()  # the pre-hook waits for the copy before the weights change
    assert not torch.equal(model.weight, expected["weight"])
    ckpt.wait_for_copies()
    assert all(torch.equal(saved[k], expected[k]) for k in expected)
    assert torch.equal(opt_state["state"][0]["exp_avg"], moment)
    assert saved["weight"].data_ptr() != model.weight.data_ptr()
