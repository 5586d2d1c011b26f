"""fp16 AMP with its GradScaler, bf16, and the non-finite guard's GPU path: fused AdamW's
`found_inf` skips the step on the device and the skips are read at logging points."""

from __future__ import annotations

import math

import pytest
import torch

from fakes.cuda_runs import Losses, make_trainer
from fakes.poison import Poison
from trainforge.engine.callbacks import Callback

pytestmark = pytest.mark.gpu


class LogAt(Callback):
    """A logging point at chosen steps: (step, metrics) of every read. A settled skip takes
    its step back, so a step number can log twice."""

    def __init__(self, steps) -> None:
        self.steps, self.reads = set(steps), []

    def on_step_end(self, trainer):
        if trainer.state.global_step in self.steps:
            self.reads.append((trainer.state.global_step, trainer.pop_train_metrics()))

    def skipped(self) -> list[float]:
        return [m.get("nonfinite_steps", 0.0) for _, m in self.reads]


def test_fp16_amp_trains_with_a_grad_scaler_and_checkpoints_its_scale(tmp_path):
    losses = Losses()
    trainer = make_trainer(tmp_path, "fp16", [losses], **{"training.precision": "fp16",
                                                           "training.max_steps": 60})  # fmt: skip
    assert trainer.precision.name == "fp16" and trainer.precision.scaler is not None
    trainer.fit()
    assert all(math.isfinite(x) for x in losses.losses) and len(losses.losses) == 60
    assert sum(losses.losses[-5:]) < sum(losses.losses[:5])
    scale = trainer.precision.scaler.get_scale()
    assert scale > 0
    folder = trainer.save_checkpoint("scaled", wait=True)
    again = make_trainer(tmp_path, "fp16-again", **{"training.precision": "fp16"})
    again.load_checkpoint(folder)
    assert again.precision.scaler.get_scale() == scale


def test_bf16_trains_without_a_scaler_and_keeps_fp32_master_weights(tmp_path):
    losses = Losses()
    trainer = make_trainer(tmp_path, "bf16", [losses], **{"training.precision": "bf16",
                                                           "training.max_steps": 60})  # fmt: skip
    trainer.fit()
    assert trainer.precision.name == "bf16" and trainer.precision.scaler is None
    assert all(p.dtype == torch.float32 and p.is_cuda for p in trainer.model.parameters())
    assert all(math.isfinite(x) for x in losses.losses)
    assert sum(losses.losses[-5:]) < sum(losses.losses[:5])


@pytest.mark.parametrize("fault", ["nan_loss", "inf_grad"])
def test_fused_adamw_skips_a_non_finite_step_on_the_gpu(tmp_path, fault):
    # Logging points at steps 2, 4 and 6: the skipped micro-batch 3 is settled at step 4 (a
    # window with trained steps in it: one holding only skipped steps reports nothing).
    log = LogAt({2, 4, 6})
    trainer = make_trainer(tmp_path, fault, [log], **{"training.precision": "bf16",
                                                       "training.max_steps": 6})  # fmt: skip
    Poison(trainer.task, **{f"{fault}_steps": (3,)})
    assert trainer.optimizer.defaults.get("fused") and trainer.guard.device_skip
    trainer.fit()
    assert trainer.state.global_step == 6 and trainer.state.nonfinite_steps == 1
    assert trainer.state.batch_in_epoch == 7  # the skipped step was made up
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    assert sum(log.skipped()) == 1


def test_the_skips_counted_on_the_gpu_are_read_at_the_next_logging_point(tmp_path):
    log = LogAt({5, 10})
    trainer = make_trainer(tmp_path, "late", [log], **{"training.precision": "bf16",
                                                        "training.max_steps": 10})  # fmt: skip
    Poison(trainer.task, nan_loss_steps=(2, 7))
    trainer.fit()
    assert trainer.state.nonfinite_steps == 2 and trainer.state.global_step == 10
    # Each skip is read at the first logging point after it: steps 5 and 10.
    assert sum(log.skipped()) == 2
    assert log.reads[0][0] == 5 and log.skipped()[0] == 1


def test_fp16_scaler_skips_an_inf_gradient_and_backs_off_its_scale(tmp_path):
    trainer = make_trainer(tmp_path, "backoff", **{"training.precision": "fp16",
                                                    "training.max_steps": 4})  # fmt: skip
    Poison(trainer.task, inf_grad_steps=(2,))
    initial = trainer.precision.scaler.get_scale()
    trainer.fit()
    assert trainer.precision.scaler.get_scale() < initial  # GradScaler halved it
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    assert trainer.state.global_step == 4
