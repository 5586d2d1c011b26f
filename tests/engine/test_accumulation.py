"""Gradient accumulation gives the same update as one big batch (tolerance 1e-6)."""

from __future__ import annotations

import torch

from trainforge.engine.callbacks import Callback
from trainforge.engine.trainer import Trainer


def train_once(tmp_path, task, config):
    trainer = Trainer(task, config, run_dir=tmp_path, device=torch.device("cpu"), callbacks=[])
    norms = []

    class Spy(Callback):
        def on_step_end(self, trainer):
            norms.append(float(trainer.last_grad_norm))

    trainer.callbacks.append(Spy())
    trainer.fit()
    return [p.detach().clone() for p in trainer.model.parameters()], norms


def test_four_micro_batches_of_16_equal_one_batch_of_64(tmp_path, points_task, points_config):
    big_params, big_norms = train_once(
        tmp_path / "a",
        points_task(n=64, batch_size=64),
        points_config(**{"training.max_steps": 1, "training.per_device_train_batch_size": 64}),
    )
    acc_params, acc_norms = train_once(
        tmp_path / "b",
        points_task(n=64, batch_size=16),
        points_config(
            **{
                "training.max_steps": 1,
                "training.per_device_train_batch_size": 16,
                "training.gradient_accumulation_steps": 4,
            }
        ),
    )
    assert len(big_norms) == len(acc_norms) == 1
    assert abs(big_norms[0] - acc_norms[0]) < 1e-6 * max(1.0, big_norms[0])
    for a, b in zip(big_params, acc_params, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_partial_last_window_is_weighted_by_its_samples(tmp_path, points_task, points_config):
    # 72 samples, micro-batch 16, accumulation 4: windows of 64 samples then 8 (a short batch).
    # The reference sees the same samples as one batch of 64 and one of 8.

    ref_task = points_task(n=72, batch_size=64)
    ref_cfg = points_config(**{"training.num_train_epochs": 1, "schedule.warmup_epochs": 0})
    ref_params, ref_norms = train_once(tmp_path / "a", ref_task, ref_cfg)

    acc_task = points_task(n=72, batch_size=16)
    acc_cfg = points_config(
        **{
            "training.num_train_epochs": 1,
            "schedule.warmup_epochs": 0,
            "training.gradient_accumulation_steps": 4,
        }
    )
    acc_params, acc_norms = train_once(tmp_path / "b", acc_task, acc_cfg)
    assert len(ref_norms) == len(acc_norms) == 2
    for a, b in zip(ref_norms, acc_norms, strict=True):
        assert abs(a - b) < 1e-5 * max(1.0, a)
    for a, b in zip(ref_params, acc_params, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_accumulation_changes_the_step_count(tmp_path, points_task, points_config):
    trainer = Trainer(
        points_task(n=64, batch_size=8),
        points_config(**{"training.gradient_accumulation_steps": 3}),
        run_dir=tmp_path,
        device=torch.device("cpu"),
        callbacks=[],
    )
    assert trainer.steps_per_epoch == 3  # 8 micro-batches -> windows of 3, 3, 2
