"""Interrupt anywhere, resume, and end bitwise identical to the uninterrupted run.

The digest covers the model and the optimizer state; the loss trace is every optimizer
step's loss as a float. Cuts land mid-epoch, mid accumulation window, at the last batch of
an epoch, just after an epoch boundary, with 0 and 2 loader workers, shuffling and dropout.
"""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pytest
import torch

from trainforge.engine.callbacks import Callback
from trainforge.engine.trainer import Trainer


class Recorder(Callback):
    """Per-step losses; optionally checkpoints and stops after micro-batch `cut_at`."""

    def __init__(self, cut_at: int | None = None, at_epoch_end: int | None = None) -> None:
        self.losses: list[float] = []
        self.micro = 0
        self.cut_at = cut_at
        self.at_epoch_end = at_epoch_end
        self.path = None

    def on_step_end(self, trainer):
        self.losses.append(float(trainer.last_step_loss))

    def _cut(self, trainer):
        self.path = trainer.save_checkpoint("checkpoint_cut", wait=True)
        trainer.stop("cut")

    def on_batch_end(self, trainer):
        self.micro += 1
        if self.micro == self.cut_at:
            self._cut(trainer)

    def on_epoch_end(self, trainer):
        if trainer.state.epoch == self.at_epoch_end:
            self._cut(trainer)


def digest(trainer: Trainer) -> str:
    h = hashlib.sha256()
    for key, value in sorted(trainer.model.state_dict().items()):
        h.update(key.encode())
        h.update(value.detach().contiguous().numpy().tobytes())
    for index, per_param in sorted(trainer.optimizer.state_dict()["state"].items()):
        for key, value in sorted(per_param.items()):
            h.update(f"{index}.{key}".encode())
            h.update(torch.as_tensor(value).contiguous().numpy().tobytes())
    return h.hexdigest()


def disturb_rngs() -> None:
    """A resumed process starts from other RNG states; resume must restore all of them."""
    random.seed(12345)
    np.random.seed(12345)
    torch.manual_seed(12345)


@pytest.fixture
def setup(tmp_path, points_task, points_config):
    def make(num_workers: int, accumulation: int):
        cfg = points_config(
            **{
                "training.num_train_epochs": 3,
                "training.per_device_train_batch_size": 8,
                "training.gradient_accumulation_steps": accumulation,
                "schedule.lr_scheduler_type": "cosine",
                "schedule.warmup_steps": 2,
                "optimizer.learning_rate": 0.05,
            }
        )

        def trainer(run: str, recorder: Recorder) -> Trainer:
            task = points_task(n=40, batch_size=8, shuffle=True, num_workers=num_workers)
            task.model[2].p = 0.2  # dropout draws from the torch RNG every step
            return Trainer(
                task, cfg, run_dir=tmp_path / run, device=torch.device("cpu"), callbacks=[recorder]
            )

        return trainer

    return make


def straight_and_resumed(make, cut_at=None, at_epoch_end=None):
    full = Recorder()
    reference = make("full", full)
    reference.fit()

    first = Recorder(cut_at=cut_at, at_epoch_end=at_epoch_end)
    make("cut", first).fit()
    assert first.path is not None and first.path.is_dir()
    disturb_rngs()
    rest = Recorder()
    resumed = make("cut", rest)
    resumed.load_checkpoint(first.path)
    resumed.fit()
    return reference, full.losses, resumed, first.losses + rest.losses


# 40 samples / batch 8 = 5 micro-batches per epoch; with accumulation 2 the windows are
# [2, 2, 1] per epoch, so micro-batch 3 is mid-window and 5 is the epoch's last batch.
CUTS = {
    "mid-epoch": (1, 2),
    "mid-accumulation-window": (2, 3),
    "last-batch-of-epoch": (2, 5),
    "mid-window-after-epoch-boundary": (2, 6),
    "late-mid-window": (2, 11),
}


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("case", list(CUTS))
def test_resume_is_bitwise_exact(setup, num_workers, case):
    accumulation, cut_at = CUTS[case]
    make = setup(num_workers, accumulation)
    reference, losses, resumed, resumed_losses = straight_and_resumed(make, cut_at=cut_at)
    assert resumed.state.global_step == reference.state.global_step
    assert resumed_losses == losses
    assert digest(resumed) == digest(reference)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_from_epoch_end_checkpoint_is_exact(setup, num_workers):
    make = setup(num_workers, 2)
    reference, losses, resumed, resumed_losses = straight_and_resumed(make, at_epoch_end=1)
    assert resumed_losses == losses
    assert digest(resumed) == digest(reference)


def test_the_digest_notices_a_one_step_difference(setup):
    """Guard for the tests above: a resume that skips a batch must not compare equal."""
    make = setup(0, 1)
    full = Recorder()
    reference = make("full", full)
    reference.fit()
    first = Recorder(cut_at=4)
    make("cut", first).fit()
    resumed = make("cut", Recorder())
    resumed.load_checkpoint(first.path)
    next(iter(resumed.task.train_loader))  # lose one batch
    resumed.fit()
    assert digest(resumed) != digest(reference)


def test_mid_window_checkpoint_records_its_position(setup):
    make = setup(0, 2)
    first = Recorder(cut_at=3)
    trainer = make("cut", first)
    trainer.fit()
    from trainforge.engine import checkpoint as ckpt

    _, state, meta = ckpt.load_checkpoint(first.path)
    assert meta["micro_batch_in_window"] == 1 and meta["batch_in_epoch"] == 3
    assert state["accumulation"]["micro"] == 1
    assert all(g is not None for g in state["accumulation"]["grads"])
    for key in ("torch", "numpy", "safetensors", "python", "trainforge"):
        assert key in meta["versions"]
    beside = ckpt.read_run_meta(first.path.parent)
    assert beside["latest"] == "checkpoint_cut" and beside["config_hash"] == meta["config_hash"]
