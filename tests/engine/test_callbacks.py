"""Time limit, evaluation cadence, best checkpoint and precision on the real loop."""

from __future__ import annotations

import json
import os
import time

import torch

from trainforge.engine import checkpoint as ckpt
from trainforge.engine.callbacks import (
    Callback,
    CheckpointCadence,
    EvalCadence,
    TimeLimit,
    listeners,
)
from trainforge.engine.precision import PrecisionPlan, resolve_precision
from trainforge.engine.trainer import Trainer


def make_trainer(tmp_path, task, config, callbacks):
    return Trainer(task, config, run_dir=tmp_path, device=torch.device("cpu"), callbacks=callbacks)


def test_time_limit_saves_and_stops(tmp_path, points_task, points_config):
    cfg = points_config(**{"training.num_train_epochs": 50})
    trainer = make_trainer(tmp_path, points_task(n=64, batch_size=8), cfg, [TimeLimit(2.5, True)])
    trainer.elapsed_s = lambda: trainer.state.global_step * 3600.0  # one hour per step
    result = trainer.fit()
    assert result.stop_reason == "time limit of 2.5 h reached"
    assert result.state.global_step == 3  # checked after every step, not only per epoch
    assert (tmp_path / "checkpoints" / "checkpoint_time_limit" / "manifest.json").is_file()


def test_eval_and_checkpoint_cadence(tmp_path, points_task, points_config):
    cfg = points_config(**{"training.num_train_epochs": 4, "checkpoint.save_total_limit": 10})
    evals = []

    class Spy(EvalCadence):
        def on_eval_end(self, trainer, metrics):
            evals.append((trainer.state.global_step, metrics["accuracy"]))

    callbacks = [Spy(every_steps=3, every_epochs=2), CheckpointCadence(5, 2, save_best=True)]
    trainer = make_trainer(tmp_path, points_task(n=32, batch_size=8), cfg, callbacks)
    trainer.fit()
    steps = [s for s, _ in evals]
    # every 3 steps (3, 6, 9, 12, 15) and every 2 epochs of 4 steps (8, 16)
    assert steps == [3, 6, 8, 9, 12, 15, 16]
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert "best_model" in names and "checkpoint-5" in names and "checkpoint-10" in names
    assert "checkpoint_epoch_2" in names and "checkpoint_epoch_4" in names
    best = trainer.state.best_metric
    assert best == max(acc for _, acc in evals)


def test_precision_resolution_and_bf16_on_cpu(tmp_path, points_task, points_config):
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu) == "fp32"
    assert PrecisionPlan.create("fp32", cpu).scaler is None
    cfg = points_config(**{"training.precision": "bf16", "training.max_steps": 3})
    trainer = make_trainer(tmp_path, points_task(), cfg, [])
    assert trainer.precision.name == "bf16" and trainer.precision.scaler is None
    with trainer.precision.autocast():
        out = trainer.model(torch.randn(2, 8))
    assert out.dtype == torch.bfloat16
    trainer.fit()
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_best_model_by_a_smaller_is_better_metric_tracks_the_minimum(
    tmp_path, points_task, points_config
):
    cfg = points_config(
        **{
            "training.max_steps": 5,
            "training.per_device_train_batch_size": 8,
            "evaluation.metric_for_best_model": "loss",
            "evaluation.greater_is_better": "false",
            "checkpoint.save_total_limit": 10,
        }
    )
    # Validation losses that go down, up and down again: only the minimum is the best.
    losses = iter([0.5, 0.3, 0.4, 0.2, 0.6])
    saved = []

    class Spy(CheckpointCadence):
        def on_eval_end(self, trainer, metrics):
            super().on_eval_end(trainer, metrics)
            if trainer.state.improved:
                saved.append(trainer.state.global_step)

    trainer = make_trainer(
        tmp_path,
        points_task(n=64, batch_size=8),
        cfg,
        [EvalCadence(every_steps=1, every_epochs=None), Spy(None, None, save_best=True)],
    )
    trainer.validation.run = lambda loader: {"loss": next(losses), "accuracy": 0.5}
    trainer.fit()
    assert trainer.state.best_metric == 0.2 and trainer.state.best_step == 4
    assert saved == [1, 2, 4]  # improvements only: 0.5, 0.3, 0.2
    meta = ckpt.read_meta(tmp_path / "checkpoints" / "best_model")
    assert meta["global_step"] == 4 and meta["best_val"] == 0.2 and meta["best_metric"] == "loss"
    beside = json.loads((tmp_path / "checkpoints" / "checkpoint_meta.json").read_text())
    assert beside["best_val"] == 0.2 and beside["best_step"] == 4


def test_a_save_made_as_fit_ends_is_on_disk_when_fit_returns(tmp_path, points_task, points_config):
    """The closing validation may save the best model in the background after the loop's
    last wait; the writer thread is a daemon (a second Ctrl+C must not wait for it), so
    `fit` itself waits, or the process could end before the write does."""

    class SaveAtTheEnd(CheckpointCadence):
        def on_fit_end(self, trainer):
            trainer.save_checkpoint("best_model")  # in the background, as on_eval_end does

    def slow(write):  # a big model's write: still running when on_fit_end returns
        time.sleep(1.0)
        write()

    cfg = points_config(**{"training.max_steps": 2})
    trainer = make_trainer(tmp_path, points_task(), cfg, [SaveAtTheEnd(None, None, False)])
    submit = trainer.checkpointer.writer.submit
    trainer.checkpointer.writer.submit = lambda job: submit(lambda: slow(job))
    trainer.fit()
    assert ckpt.verify(tmp_path / "checkpoints" / "best_model") is None


def test_the_loop_calls_only_the_hooks_a_callback_acts_on():
    class Steps(Callback):
        def on_step_end(self, trainer) -> None: ...

    class Duck:  # not a Callback: every hook it has is called
        def on_step_end(self, trainer) -> None: ...

    given = Callback()
    given.on_step_end = lambda trainer: None  # set on the object itself
    steps, duck, idle = Steps(), Duck(), Callback()
    hooks = listeners([steps, idle, given, duck], "on_step_end")
    assert hooks == [steps.on_step_end, given.on_step_end, duck.on_step_end]
    assert listeners([steps, idle, given], "on_batch_end") == []


def test_a_checkpoint_due_under_two_names_at_one_step_is_one_folder(
    tmp_path, points_task, points_config
):
    """One-step epochs, a save every 2 steps and every 3 epochs: at step 6 the epoch's name is
    a second name (a relative link) of the step's folder, not a second copy. It resolves,
    is never listed twice, goes when rotation deletes its folder, and a fit resumed from it
    keeps the next such name a link too."""
    root = tmp_path / "checkpoints"
    cfg = points_config(**{"training.num_train_epochs": 6, "checkpoint.save_total_limit": 20})
    cadence = [CheckpointCadence(2, 3, save_best=False)]
    make_trainer(tmp_path, points_task(n=8, batch_size=8), cfg, cadence).fit()  # 1 step/epoch
    link = root / "checkpoint_epoch_6"
    assert link.is_symlink() and os.readlink(link) == "checkpoint-6"
    assert ckpt.read_meta(link)["global_step"] == 6 and ckpt.verify(link) is None
    assert not (root / "checkpoint_epoch_3").is_symlink()  # step 3 saved under one name
    listed = sorted(c.path.name for c in ckpt.list_checkpoints(root))
    assert listed == ["checkpoint-2", "checkpoint-4", "checkpoint-6", "checkpoint_epoch_3"]

    cfg = points_config(**{"training.num_train_epochs": 12, "checkpoint.save_total_limit": 2})
    again = make_trainer(tmp_path, points_task(n=8, batch_size=8), cfg, cadence)
    again.load_checkpoint(link)
    again.fit()
    assert os.readlink(root / "checkpoint_epoch_12") == "checkpoint-12"
    left = sorted(p.name for p in root.iterdir() if p.name.startswith("checkpoint-"))
    links = sorted(p.name for p in root.iterdir() if p.is_symlink())
    assert left == ["checkpoint-10", "checkpoint-12"] and links == ["checkpoint_epoch_12"]
    # A full save under a second name (no step given) replaces the link, not its folder.
    again.checkpointer.save("checkpoint_epoch_12", wait=True)
    assert not (root / "checkpoint_epoch_12").is_symlink()
    assert ckpt.verify(root / "checkpoint_epoch_12") is None
    assert ckpt.verify(root / "checkpoint-12") is None
