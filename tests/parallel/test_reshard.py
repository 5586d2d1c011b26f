"""Sharded (FSDP2) and unsharded checkpoints move both ways, on the trajectory.

The digits ViT at batch 64 for 12 steps, logged every 2. A run stopped at step 6 continues
to step 12 on another kind of run: FSDP2 on 2 processes -> 1 process, -> DDP on 2, -> FSDP2
on 3, and DDP on 2 -> FSDP2 on 2; `evaluate`, `export` and `model.init_from` read the sharded
checkpoint on one process. torch.distributed.checkpoint reads the sharded state whole
(one process reads it without a process group) or cuts the whole state into this run's
shards. Each resume says `continued` with the reason, and every logged loss and the final
weights agree with the uninterrupted one-process run to 1e-4 relative.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file
from tests.parallel.test_ddp import command, final_weights, records, run

from fakes.weights import relative_difference

HALF, STEPS = 6, 12
LOGGED = ["--set", "logging.logging_steps=2"]
FSDP = ["--set", "hardware.data_parallel=fsdp"]


def train(root: Path, name: str, procs: int, steps: int, *extra: str):
    done = run(command(root, name, procs, 64, steps, *LOGGED, *extra), timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def resume(folder: Path, procs: int, *extra: str):
    args = ["-m", "trainforge", "train", "--resume", str(folder), "--max_steps", str(STEPS)]
    launch = [sys.executable]
    if procs > 1:
        launch += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={procs}"]
    done = run([*launch, *args, *extra], timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("one")
    train(root, "one", 1, STEPS)
    return root / "one"


@pytest.fixture(scope="module")
def fsdp_half(tmp_path_factory) -> Path:
    """FSDP2 on 2 processes, stopped at step 6: its newest checkpoint is sharded."""
    root = tmp_path_factory.mktemp("fsdp")
    done = train(root, "half", 2, HALF, *FSDP)
    assert "FSDP2 (fully_shard)" in done.stdout
    checkpoint = root / "half" / "checkpoints" / f"checkpoint-{HALF}"
    assert (checkpoint / "dcp").is_dir() and not (checkpoint / "model.safetensors").exists()
    return root / "half"


def assert_on_the_trajectory(baseline: Path, moved: Path) -> None:
    first = {r["step"]: r["loss"] for r in records(baseline.parent, baseline.name, "train")}
    second = {r["step"]: r["loss"] for r in records(moved.parent, moved.name, "train")}
    assert sorted(first) == sorted(second) == list(range(2, STEPS + 1, 2)), (first, second)
    for step, loss in first.items():
        assert second[step] == pytest.approx(loss, rel=1e-4), (moved, step)
    a = final_weights(baseline.parent, baseline.name)
    assert relative_difference(a, final_weights(moved.parent, moved.name)) < 1e-4


@pytest.mark.dist
@pytest.mark.parametrize(
    ("procs", "extra", "reasons"),
    [
        (1, [], ["world size 2 -> 1", "sharding fsdp -> none"]),
        (2, ["--set", "hardware.data_parallel=ddp"], ["sharding fsdp -> none"]),
        (3, [], ["world size 2 -> 3"]),
    ],
    ids=["fsdp2-to-1-process", "fsdp2-to-ddp", "fsdp2-2-to-3"],
)
def test_a_sharded_run_continues_on_another_kind_of_run(
    tmp_path, one_process, fsdp_half, procs, extra, reasons
):
    moved = tmp_path / "moved"
    shutil.copytree(fsdp_half, moved)
    done = resume(moved, procs, *extra)
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("resumed from"))
    assert f"checkpoint-{HALF} (epoch 0, step {HALF}), continued: " in line, line
    assert all(reason in line for reason in reasons), line
    assert "Warning" not in done.stdout + done.stderr
    assert_on_the_trajectory(one_process, moved)


@pytest.mark.dist
def test_a_ddp_run_continues_sharded(tmp_path, one_process):
    train(tmp_path, "moved", 2, HALF)
    checkpoint = tmp_path / "moved" / "checkpoints" / f"checkpoint-{HALF}"
    assert (checkpoint / "model.safetensors").exists()
    done = resume(tmp_path / "moved", 2, *FSDP)
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("resumed from"))
    assert "continued: sharding none -> fsdp: " in line, line
    assert "FSDP2 (fully_shard)" in done.stdout
    assert_on_the_trajectory(one_process, tmp_path / "moved")


@pytest.mark.dist
def test_evaluate_export_and_init_from_read_a_sharded_checkpoint(fsdp_half, tmp_path):
    """The trip home of a sharded run's checkpoint, without a resume: `evaluate`, `export`
    and `model.init_from` read its `dcp/` whole, each process alone. The run stopped at the
    checkpoint's step, so its final model (gathered whole) is the same weights."""
    checkpoint = fsdp_half / "checkpoints" / f"checkpoint-{HALF}"
    final = final_weights(fsdp_half.parent, fsdp_half.name)
    trainforge = [sys.executable, "-m", "trainforge"]

    shards = run([*trainforge, "evaluate", str(checkpoint), "--json", str(tmp_path / "a.json")])
    assert shards.returncode == 0, shards.stderr[-2000:]
    assert f"weights: checkpoint {checkpoint / 'dcp'}" in shards.stdout
    scored = json.loads((tmp_path / "a.json").read_text())
    assert scored["step"] == HALF and scored["results"]["validation"]["accuracy"] > 0.0

    # the weights read are the run's own, to the bit: the export writes what it read
    out = tmp_path / "export"
    exported = run([*trainforge, "export", str(checkpoint), "-f", "safetensors", "-o", str(out)])
    assert exported.returncode == 0, exported.stderr[-2000:]
    artefact = load_file(str(out / "safetensors" / "model.safetensors"))
    assert artefact.keys() == final.keys()
    assert relative_difference(final, artefact) == 0.0

    # on two DDP processes: each rank reads the shards alone inside its process group
    started = run(
        command(tmp_path, "from_shards", 2, 64, 1, "--set", f"model.init_from={checkpoint}")
    )
    assert started.returncode == 0, started.stderr[-2000:]
    assert f"init_from {checkpoint}: weights: checkpoint {checkpoint / 'dcp'}" in started.stdout
