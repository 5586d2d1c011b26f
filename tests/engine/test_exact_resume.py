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


def test_grad_scaler_state_round_trips_exactly(tmp_path, points_task, points_config):
    """A loss scaler's scale and growth tracker come back exactly, and a resumed run's scaler
    goes on as the uninterrupted one's (CPU GradScaler, the same class CUDA fp16 uses)."""
    cfg = points_config(**{"training.max_steps": 5, "training.per_device_train_batch_size": 8})

    def trainer(run: str, init_scale: float, growth_interval: int) -> Trainer:
        made = Trainer(
            points_task(n=64, batch_size=8),
            cfg,
            run_dir=tmp_path / run,
            device=torch.device("cpu"),
            callbacks=[],
        )
        made.precision.scaler = torch.amp.GradScaler(
            "cpu", init_scale=init_scale, growth_interval=growth_interval
        )
        return made

    whole = trainer("whole", 1024.0, 2)
    whole.fit()
    cut = trainer("cut", 1024.0, 2)
    cut.total_steps = 3
    cut.fit()
    saved = cut.precision.scaler.state_dict()
    # Two steps grow the scale once (growth interval 2); the third leaves the tracker at 1.
    assert saved["scale"] == 2048.0 and saved["_growth_tracker"] == 1
    path = cut.save_checkpoint("checkpoint-3", wait=True)

    resumed = trainer("cut", 65536.0, 2000)  # a fresh scaler with other settings
    resumed.load_checkpoint(path)
    assert resumed.precision.scaler.state_dict() == saved
    assert resumed.precision.scaler.get_scale() == 2048.0
    resumed.fit()
    assert resumed.precision.scaler.state_dict() == whole.precision.scaler.state_dict()
    assert resumed.precision.scaler.get_scale() == 4096.0  # grew again at step 4
    assert digest(resumed) == digest(whole)


def test_first_logging_window_after_resume_excludes_the_load(tmp_path, points_task, points_config):
    """Time between building the trainer (loading a checkpoint) and fit() is not training:
    the resumed run's first window times its own steps only."""
    import time

    def trainer(max_steps: int, callbacks: list) -> Trainer:
        cfg = points_config(
            **{"training.max_steps": max_steps, "training.per_device_train_batch_size": 8}
        )
        task = points_task(n=64, batch_size=8)
        return Trainer(task, cfg, run_dir=tmp_path, device=torch.device("cpu"), callbacks=callbacks)

    first = trainer(2, [])
    first.fit()
    path = first.save_checkpoint("checkpoint-2", wait=True)

    windows = []

    class Log(Callback):
        def on_step_end(self, trainer):
            if trainer.state.global_step == 4:
                windows.append(trainer.pop_train_metrics())

    resumed = trainer(4, [Log()])
    resumed.load_checkpoint(path)
    slow_load_s = 1.0
    time.sleep(slow_load_s)  # a slow checkpoint load, model build or data set-up
    resumed.fit()
    (window,) = windows
    window_s = window["step_time_s"] * 2  # steps 3 and 4
    assert window_s < slow_load_s / 2, window
    assert window["samples_per_s"] > 16 / (slow_load_s / 2)


def test_best_fast_validation_value_survives_a_resume(tmp_path, points_task, points_config):
    """The best fast-validation value is trainer state: a resumed run does not take its first
    fast validation for an improvement (and run an extra full validation)."""
    cfg = points_config(**{"training.max_steps": 2})

    def trainer() -> Trainer:
        return Trainer(
            points_task(n=32, batch_size=8),
            cfg,
            run_dir=tmp_path / "run",
            device=torch.device("cpu"),
            callbacks=[],
        )

    first = trainer()
    first.fit()
    first.state.best_fast = 0.875
    path = first.save_checkpoint("checkpoint-2", wait=True)
    resumed = trainer()
    assert resumed.state.best_fast is None
    resumed.load_checkpoint(path)
    assert resumed.state.best_fast == 0.875


def test_a_stopped_run_lets_its_loader_workers_go_and_continues_exactly(setup):
    """A run stopped mid-epoch ends its loader workers when `fit` returns (else the garbage
    collector joins them later, 5 s each), and the same trainer continues where it stopped."""
    import multiprocessing

    make = setup(2, 2)
    full = Recorder()
    reference = make("full", full)
    reference.fit()
    before = set(multiprocessing.active_children())
    first = Recorder(cut_at=3)
    trainer = make("cut", first)
    trainer.fit()
    assert trainer.should_stop and trainer.state.batch_in_epoch == 3
    assert set(multiprocessing.active_children()) <= before  # no worker outlives fit
    saved = trainer.checkpointer.registry.state_dict(lambda e: e.name == "train_loader")
    assert set(multiprocessing.active_children()) <= before  # saying the position starts none
    assert saved["train_loader"] == trainer.task.train_loader.next_iter_state
    first.cut_at, trainer.should_stop = None, False
    trainer.fit()
    assert first.losses == full.losses
    assert digest(trainer) == digest(reference)
