"""Any process count trains the recipe's batch on the same trajectory as one process.

The digits ViT (random crops and flips on, dropout off), batch 64, for 30 steps logged every
5: 3 processes cut each step into micro-batches of 22, 21 and 21 samples, 5 processes into
13, 13, 13, 13 and 12, and both agree with one process x 64 on every logged loss and on
the final weights to 1e-4 relative (only the order of float sums differs). The learning
rate is the recipe's on every count, and a run resumed on 3 processes keeps its batch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tests.parallel.test_ddp import command, final_weights, records, run

from fakes.weights import relative_difference

STEPS = 30
# Random augmentation on (keyed per sample), a learning rate that moves the weights.
INVARIANT = [
    "data.random_crop_padding=1", "data.horizontal_flip=true", "logging.logging_steps=5",
    "optimizer.learning_rate=1e-3",
]  # fmt: skip


def train(root: Path, name: str, procs: int, steps: int = STEPS):
    args = [a for s in INVARIANT for a in ("--set", s)]
    done = run(command(root, name, procs, 64, steps, *args), timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> Path:
    """The uninterrupted one-process run every count is compared with."""
    root = tmp_path_factory.mktemp("one")
    train(root, "one", 1)
    return root / "one"


def assert_on_the_trajectory(baseline: Path, other: Path) -> None:
    first = {r["step"]: r for r in records(baseline.parent, baseline.name, "train")}
    second = {r["step"]: r for r in records(other.parent, other.name, "train")}
    assert sorted(first) == sorted(second), (first, second)
    assert set(range(5, STEPS + 1, 5)) <= set(first)
    for step, record in first.items():
        assert second[step]["loss"] == pytest.approx(record["loss"], rel=1e-4), (other, step)
        assert second[step]["lr"] == pytest.approx(record["lr"], rel=1e-9), (other, step)
    a = final_weights(baseline.parent, baseline.name)
    assert relative_difference(a, final_weights(other.parent, other.name)) < 1e-4


@pytest.mark.dist
@pytest.mark.parametrize(("procs", "line"), [(3, "21-22 x 1"), (5, "12-13 x 1")])
def test_3_and_5_processes_train_64_on_the_trajectory_of_one(tmp_path, one_process, procs, line):
    done = train(tmp_path, "many", procs)
    assert f"batch: {line} accumulation x {procs} processes = 64" in done.stdout, done.stdout
    assert "recipe: effective batch 64 " in done.stdout
    assert_on_the_trajectory(one_process, tmp_path / "many")
    assert json.loads((tmp_path / "many" / "run.json").read_text())["effective_batch"] == 64


@pytest.mark.dist
def test_a_run_resumed_on_3_processes_keeps_its_batch(tmp_path, one_process):
    train(tmp_path, "moved", 1, steps=15)
    resume = ["-m", "trainforge", "train", "--resume", str(tmp_path / "moved")]
    done = run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node=3", *resume, "--max_steps", str(STEPS)], timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "batch: 21-22 x 1 accumulation x 3 processes = 64" in done.stdout, done.stdout
    assert "continued: world size 1 -> 3" in done.stdout
    changed = [ln for ln in done.stdout.splitlines() if ln.startswith("resuming with a changed")]
    assert changed and "global_batch_size" not in changed[0]  # the micro-batch only
    assert_on_the_trajectory(one_process, tmp_path / "moved")


@pytest.mark.dist
def test_more_processes_than_samples_is_refused_in_one_line(tmp_path):
    done = run(command(tmp_path, "many", 3, 2, 2), timeout=300)
    assert done.returncode != 0
    lines = [ln for ln in done.stderr.splitlines() if "cannot be split over 3 processes" in ln]
    assert lines and "--nproc-per-node 2" in lines[0], done.stderr[-3000:]
    assert "(exitcode: 2)" in done.stderr  # a user error; torchrun adds its own summary
    assert "src/trainforge" not in done.stderr  # no traceback through trainforge
    assert not (tmp_path / "many").exists()  # nothing written
