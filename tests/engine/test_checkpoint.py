"""Checkpoint files: atomic folders, verified manifests, safe loading, rotation; and what
breaks them: damaged files, full and read-only disks, crash leftovers."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from trainforge.engine import checkpoint as ckpt
from trainforge.engine import checkpoint_write as cw
from trainforge.engine.trainer import Trainer
from trainforge.errors import UserError


def save(folder, step=1, value=1.0):
    """A small checkpoint whose weights are `value` and whose step is `step`."""
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


# ------------------------------------------------------------ broken checkpoint files
def damage_folder(folder: Path, damage: str) -> None:
    if damage == "garbage weights":
        (folder / "model.safetensors").write_bytes(b"garbage")
    elif damage == "truncated weights":
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif damage == "flipped byte in state":
        data = bytearray((folder / "state.pt").read_bytes())
        data[len(data) // 2] ^= 0xFF
        (folder / "state.pt").write_bytes(bytes(data))
    elif damage == "missing manifest":
        (folder / "manifest.json").unlink()
    else:
        (folder / "manifest.json").write_text("{not json")


@pytest.mark.parametrize(
    "damage",
    [
        "garbage weights",
        "truncated weights",
        "flipped byte in state",
        "missing manifest",
        "manifest of garbage",
    ],
)
def test_a_damaged_checkpoint_is_reported_and_skipped_for_the_newest_good_one(
    tmp_path, capsys, damage
):
    root = tmp_path / "checkpoints"
    save(root / "checkpoint-1", step=1)
    bad = save(root / "checkpoint-2", step=2)
    damage_folder(bad, damage)
    assert ckpt.latest(root).path.name == "checkpoint-1"
    lines = [line for line in capsys.readouterr().out.splitlines() if "checkpoint-2" in line]
    assert len(lines) == 1 and lines[0].startswith("skipping checkpoint")
    if damage == "garbage weights":
        assert "checksum mismatch in model.safetensors" in lines[0]
    with pytest.raises(UserError, match="not usable"):
        ckpt.load_checkpoint(bad)


def test_a_damaged_checkpoint_is_reported_once_however_often_listed(tmp_path, capsys):
    # Rotation lists the checkpoints at every save; the same damaged folder must not flood
    # the log, and each report is one whole line.
    root = tmp_path / "checkpoints"
    save(root / "checkpoint-1", step=1)
    (save(root / "checkpoint-2", step=2) / "manifest.json").unlink()
    for _ in range(3):
        assert ckpt.latest(root).path.name == "checkpoint-1"
    ckpt.rotate(root, keep=1)
    out = capsys.readouterr().out
    assert out.count("skipping checkpoint") == 1
    assert out.endswith("no manifest (incomplete write)\n")


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
    manifest["state.pt"] = cw.file_digest(folder / "state.pt")
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="refused"):
        ckpt.load_checkpoint(folder)
    assert not canary.exists()


def test_recover_cleans_crash_leftovers_and_restores_an_interrupted_replace(tmp_path):
    root = tmp_path / "checkpoints"
    save(root / "checkpoint-1", step=1)
    best = save(root / "best_model", step=2)
    (root / ".tmp-checkpoint-3-999").mkdir()  # a write killed half-way
    best.rename(root / ".old-best_model-999")  # killed between the two renames of a replace
    actions = ckpt.recover(root)
    assert any("restored best_model" in a for a in actions)
    assert sorted(p.name for p in root.iterdir()) == ["best_model", "checkpoint-1"]
    assert ckpt.verify(root / "best_model") is None


# ------------------------------------------------------------------------- rotation
def test_rotation_keeps_the_limit_and_never_deletes_best_or_newest(tmp_path):
    root = tmp_path / "checkpoints"
    save(root / "best_model", step=2)
    for step in (1, 3, 5, 7):
        save(root / f"checkpoint-{step}", step=step)
    removed = ckpt.rotate(root, keep=2)
    assert sorted(p.name for p in removed) == ["checkpoint-1", "checkpoint-3"]
    assert sorted(p.name for p in root.iterdir()) == ["best_model", "checkpoint-5", "checkpoint-7"]
    # best_model the oldest step of all; an epoch checkpoint the newest
    save(root / "best_model", step=0)
    save(root / "checkpoint_epoch_1", step=8)
    ckpt.rotate(root, keep=1)
    assert sorted(p.name for p in root.iterdir()) == ["best_model", "checkpoint_epoch_1"]
    # The newest verified checkpoint survives even when it is the only periodic one left.
    shutil.rmtree(root / "best_model")
    ckpt.rotate(root, keep=1)
    assert [p.name for p in root.iterdir()] == ["checkpoint_epoch_1"]


def test_every_checkpoint_name_comes_from_the_table_and_only_periodic_ones_rotate():
    names = {
        ckpt.step_name(40): True,
        ckpt.epoch_name(3): True,
        ckpt.best_name(): False,
        ckpt.time_limit_name(): False,
        ckpt.interrupted_name(): False,
    }
    assert list(names)[:2] == ["checkpoint-40", "checkpoint_epoch_3"]
    assert {name: ckpt.is_periodic(name) for name in names} == names
    assert not ckpt.is_periodic("checkpoint-") and not ckpt.is_periodic("checkpoint-4x")
    # The doctor's worst case: the periodic ones kept, best, a stop checkpoint, one in flight.
    assert ckpt.most_kept(3, 50, save_best=True) == 3 + 1 + 2
    assert ckpt.most_kept(None, 0, save_best=False) == 1 + 0 + 2


def test_the_names_table_imports_no_torch():
    """The web app and the report name checkpoints through this module without torch."""
    code = (
        "import sys\nfrom trainforge.engine import checkpoint as c\n"
        "assert c.interrupted_name() == 'checkpoint_interrupted'\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# ------------------------------------------------------------- full and read-only disks
def test_write_failure_is_one_line_and_keeps_previous(tmp_path, monkeypatch):
    folder = save(tmp_path / "checkpoints" / "checkpoint-1", value=1.0)

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(UserError, match="No space left on device") as info:
        save(folder, value=2.0)
    assert "\n" not in str(info.value)
    model_state, _, _ = ckpt.load_checkpoint(folder)
    assert torch.equal(model_state["w"], torch.ones(2, 2))


def test_full_disk_in_a_background_write_is_one_error_and_keeps_the_previous(
    tmp_path, points_task, points_config, monkeypatch
):
    cfg = points_config(**{"training.max_steps": 1})
    trainer = Trainer(
        points_task(), cfg, run_dir=tmp_path, device=torch.device("cpu"), callbacks=[]
    )
    trainer.fit()
    trainer.save_checkpoint("best_model", wait=True)
    before = (tmp_path / "checkpoints/best_model/model.safetensors").read_bytes()

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cw, "write_safetensors", full)
    trainer.save_checkpoint("best_model")  # returns at once; the write fails behind
    with pytest.raises(UserError, match="No space left on device") as info:
        trainer.checkpointer.writer.wait()
    assert "\n" not in info.value.line()
    assert (tmp_path / "checkpoints/best_model/model.safetensors").read_bytes() == before
    assert ckpt.verify(tmp_path / "checkpoints/best_model") is None
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".tmp")]


@pytest.fixture
def open_tmp():
    """A temporary folder an unprivileged user can reach (pytest's is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="trainforge-ro-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_read_only_checkpoint_folder_as_an_unprivileged_user(open_tmp):
    """Real permission denied: a child process drops root (when we are root) and writes
    into a read-only folder; the error is one line and the old checkpoint is untouched."""
    root = open_tmp / "checkpoints"
    save(root / "checkpoint-1", step=1)
    os.chmod(root, 0o555)
    code = (
        "import os, sys, torch\n"
        "if os.getuid() == 0: os.setgid(65534); os.setuid(65534)\n"
        "from pathlib import Path\n"
        "from trainforge.engine import checkpoint as ckpt\n"
        "from trainforge.errors import UserError\n"
        "try:\n"
        f"    ckpt.save_checkpoint(Path({str(root)!r}) / 'checkpoint-1',"
        " model_state={'w': torch.zeros(2)}, state={}, meta={}, config_yaml='')\n"
        "except UserError as err:\n"
        "    print(err.line()); sys.exit(2)\n"
    )
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    finally:
        os.chmod(root, 0o755)
    assert done.returncode == 2, done.stderr
    assert "Permission denied" in done.stdout and done.stdout.count("\n") == 1
    weights, _, _ = ckpt.load_checkpoint(root / "checkpoint-1")
    assert torch.equal(weights["w"], torch.full((2, 2), 1.0))


# ------------------------------------------------------------------ the file format
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
        assert digest.startswith("xxh3_128:"), name
        assert cw.file_digest(folder / name) == digest, name


def test_a_manifest_of_sha256_sums_from_earlier_versions_still_verifies(tmp_path):
    import hashlib

    root = tmp_path / "checkpoints"
    folder = save(root / "checkpoint-1")
    manifest = {
        name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
        for name in json.loads((folder / "manifest.json").read_text())
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert [c.path.name for c in ckpt.list_checkpoints(root)] == ["checkpoint-1"]
    ckpt.load_checkpoint(folder)
    (folder / "config.yaml").write_text("changed: true\n")  # a changed byte is still caught
    assert ckpt.list_checkpoints(root) == []


def test_rotation_rehashes_only_what_changed_since_this_process_wrote_it(tmp_path, monkeypatch):
    root = tmp_path / "checkpoints"
    for step in (1, 2):
        save(root / f"checkpoint-{step}", step=step)
    hashed = []
    real = cw.file_digest
    monkeypatch.setattr(
        cw, "file_digest", lambda path, like=None: hashed.append(path.name) or real(path, like)
    )
    ckpt.rotate(root, keep=5)
    assert hashed == []  # both were written here and have not changed
    (root / "checkpoint-1" / "model.safetensors").write_bytes(b"garbage")
    assert [c.path.name for c in ckpt.list_checkpoints(root, cached=True)] == ["checkpoint-2"]
    assert "model.safetensors" in hashed


def test_finite_check_sees_nan_inf_and_overflowing_finite_sums():
    big = torch.full((4,), 3e38)  # finite, but its float32 sum overflows
    assert cw.all_finite({"a": big, "b": torch.ones(3)})
    assert not cw.all_finite({"a": torch.tensor([1.0, float("nan")])})
    assert not cw.all_finite({"a": torch.tensor([float("inf"), -float("inf")])})
    assert cw.all_finite({"i": torch.tensor([1, 2])})


def test_full_disk_at_the_final_weights_keeps_the_previous_file(tmp_path, monkeypatch):
    path = ckpt.save_weights(tmp_path / "model.safetensors", {"w": torch.ones(2)})
    before = path.read_bytes()

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cw, "write_safetensors", full)
    with pytest.raises(UserError, match=r"cannot write weights .*model\.safetensors: No space"):
        ckpt.save_weights(path, {"w": torch.zeros(2)})
    assert path.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_snapshot_without_copy_hands_cpu_tensors_over_as_they_are():
    weight = torch.ones(3)
    shared = cw.Snapshot(copy=False).copy({"w": weight})
    copied = cw.Snapshot().copy({"w": weight})
    assert shared["w"].data_ptr() == weight.data_ptr()
    assert copied["w"].data_ptr() != weight.data_ptr() and torch.equal(copied["w"], weight)


def test_deferred_copy_holds_the_state_of_the_moment_the_step_waits_for_it():
    """Weights and moments are copied off the loop; the next optimizer step waits for the
    copy, so the snapshot holds the values at `copy` time, never a later step's."""
    model = torch.nn.Linear(256, 256)  # 256 KiB of weights: deferred
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(2, 256)).sum().backward()
    optimizer.step()
    snap = cw.Snapshot(optimizer=optimizer)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    moment = optimizer.state[model.weight]["exp_avg"].clone()
    saved, opt_state = snap.copy((model.state_dict(), optimizer.state_dict()))
    optimizer.step()  # the pre-hook waits for the copy before the weights change
    assert not torch.equal(model.weight, expected["weight"])
    cw.wait_for_copies()
    assert all(torch.equal(saved[k], expected[k]) for k in expected)
    assert torch.equal(opt_state["state"][0]["exp_avg"], moment)
    assert saved["weight"].data_ptr() != model.weight.data_ptr()
