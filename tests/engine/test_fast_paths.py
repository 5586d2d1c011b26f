"""Speed never changes results silently: the fast paths on and off give the same loss curve.

The real image task (digits ViT, batched augmentation on uint8 batches held in memory) trains
30 optimizer steps from a fixed seed with each fast path on and off: AdamW's fused kernel
(the default on CPU and CUDA) against torch's per-tensor loop, channels-last memory format,
and `torch.compile` (slow: compiling takes a while on 2 cores). They do the same arithmetic
in another order, so the per-step losses agree to a stated tolerance, not bitwise; the
defaults themselves are bitwise reproducible (the exact-resume tests pin that down).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainforge.config.loading import load
from trainforge.engine.callbacks import Callback
from trainforge.engine.trainer import Trainer
from trainforge.tasks.vision import ImageClassification

ROOT = Path(__file__).resolve().parents[2]
STEPS = 60
# Per-step training loss, relative: float32 sums in another order drift by ~1e-6 per step;
# the loss moves by ~1e-2 per step here, so a changed update would show far above this.
RTOL = 2e-4


class Losses(Callback):
    def __init__(self) -> None:
        self.values: list[float] = []

    def on_step_end(self, trainer) -> None:
        self.values.append(float(trainer.last_step_loss))


def loss_curve(tmp_path: Path, **sets: object) -> tuple[list[float], Trainer]:
    overrides = {
        "model.embedding_dim": 32,
        "model.num_layers": 2,
        "model.num_heads": 2,
        "model.mlp_size": 64,
        "training.max_steps": STEPS,
        "training.per_device_train_batch_size": 32,
        "schedule.warmup_steps": 3,
        "optimizer.learning_rate": 0.005,
        "logging.tensorboard": False,
        **sets,
    }
    config = load(
        ROOT / "config" / "vit_digits.yaml",
        overrides=[f"{key}={str(value).lower()}" for key, value in overrides.items()],
        profile="cpu",
    ).config
    torch.manual_seed(config.training.seed)
    task = ImageClassification.from_config(config)
    recorder = Losses()
    trainer = Trainer(
        task, config, run_dir=tmp_path, device=torch.device("cpu"), callbacks=[recorder]
    )
    trainer.fit()
    return recorder.values, trainer


def assert_same_curve(fast: list[float], slow: list[float]) -> None:
    assert len(fast) == len(slow) == STEPS
    torch.testing.assert_close(torch.tensor(fast), torch.tensor(slow), rtol=RTOL, atol=0.0)
    moved = fast[0] - sum(fast[-5:]) / 5
    assert moved > 0.05, "the curve must move for the comparison to mean anything"


def test_fused_adamw_is_the_cpu_default_and_matches_the_per_tensor_loop(tmp_path):
    fast, trainer = loss_curve(tmp_path / "fused")
    assert trainer.optimizer.defaults["fused"] is True
    slow, plain = loss_curve(tmp_path / "per-tensor", **{"optimizer.fused": False})
    assert not plain.optimizer.defaults["fused"]
    assert_same_curve(fast, slow)


def test_channels_last_matches_the_default_layout(tmp_path):
    default, _ = loss_curve(tmp_path / "default")
    last, trainer = loss_curve(tmp_path / "channels-last", **{"training.channels_last": True})
    conv = next(m for m in trainer.model.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    images, _ = trainer.task.to_device(next(iter(trainer.task.train_loader)), trainer.device, True)
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert_same_curve(last, default)


def test_the_defaults_are_bitwise_reproducible(tmp_path):
    first, _ = loss_curve(tmp_path / "a")
    second, _ = loss_curve(tmp_path / "b")
    assert first == second


@pytest.mark.slow
def test_torch_compile_matches_eager(tmp_path):
    eager, _ = loss_curve(tmp_path / "eager")
    compiled, trainer = loss_curve(tmp_path / "compiled", **{"training.compile": True})
    assert trainer.forward_model is not trainer.model  # really went through torch.compile
    assert_same_curve(compiled, eager)


class GeneralPathOnly(Trainer):
    """The same trainer with the loop's one-micro-batch path turned off."""

    _plain_backward = property(lambda self: False, lambda self, value: None)


def test_the_one_micro_batch_path_matches_the_general_path_bitwise(
    tmp_path, points_task, points_config, monkeypatch
):
    """One fp32 micro-batch per step on one process skips the general path's no-op contexts;
    the losses and the weights stay bitwise those of the general path."""
    import trainforge.engine.trainer as trainer_module

    entered: list[int] = []
    counter = trainer_module.flop_counter
    monkeypatch.setattr(
        trainer_module, "flop_counter", lambda state: entered.append(1) or counter(state)
    )
    config = points_config(**{"training.max_steps": 6})
    runs = {}
    for cls in (Trainer, GeneralPathOnly):
        entered.clear()
        recorder = Losses()
        trainer = cls(points_task(), config, run_dir=tmp_path / cls.__name__,
                      device=torch.device("cpu"), callbacks=[recorder])  # fmt: skip
        trainer.fit()
        weights = [p.detach().clone() for p in trainer.model.parameters()]
        runs[cls] = recorder.values, weights, len(entered)
    (fast_losses, fast_weights, fast_entered), (losses, weights, general_entered) = runs.values()
    # The general path enters the FLOP counter's check on every micro-batch; the one-micro-batch
    # path only on the first (which counts the FLOPs), so it really ran on the other five.
    assert (fast_entered, general_entered) == (1, 6)
    assert len(fast_losses) == 6 and fast_losses == losses
    assert all(torch.equal(a, b) for a, b in zip(fast_weights, weights, strict=True))


class ClipsSeparately(Trainer):
    """The same trainer with clipping as its own pass (`clip_grad_norm_`), not folded."""

    _fold_clip = property(lambda self: False, lambda self, value: None)


def test_clipping_folded_into_the_fused_kernel_matches_a_separate_clip(
    tmp_path, points_task, points_config
):
    """Fused AdamW divides each gradient by the clip's inverse as it reads it: no separate
    pass multiplies the gradients, and the run is the clipped run up to rounding."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class CountMuls(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            CountMuls.count += func is torch.ops.aten._foreach_mul_.Tensor
            return func(*args, **(kwargs or {}))

    def run(cls, name, max_grad_norm):
        config = points_config(**{"training.max_steps": 12, "optimizer.learning_rate": 0.05,
                                  "training.max_grad_norm": max_grad_norm})  # fmt: skip
        recorder, norms = Losses(), []
        recorder.on_step_end = lambda t: (
            recorder.values.append(float(t.last_step_loss)),
            norms.append(float(t.last_grad_norm)),
        )
        trainer = cls(points_task(), config, run_dir=tmp_path / name,
                      device=torch.device("cpu"), callbacks=[recorder])  # fmt: skip
        CountMuls.count = 0
        with CountMuls():
            trainer.fit()
        weights = [p.detach().clone() for p in trainer.model.parameters()]
        return recorder.values, norms, weights, CountMuls.count, trainer

    folded = run(Trainer, "folded", 0.05)
    separate = run(ClipsSeparately, "separate", 0.05)
    unclipped = run(Trainer, "unclipped", "null")
    assert folded[4]._fold_clip and folded[4].optimizer.defaults["fused"]
    assert (folded[3], separate[3]) == (0, 12)  # torch's clip multiplies once per step
    assert min(folded[1]) > 0.05  # every step was clipped
    torch.testing.assert_close(folded[0], separate[0], rtol=1e-5, atol=0.0)
    torch.testing.assert_close(folded[1], separate[1], rtol=1e-5, atol=0.0)
    for a, b in zip(folded[2], separate[2], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    # The clip mattered: without it the same run ends elsewhere.
    moved = max((a - b).abs().max().item() for a, b in zip(folded[2], unclipped[2], strict=True))
    assert moved > 1e-3


def test_a_folded_clip_reaches_the_kernel_in_float32_for_half_precision_parameters():
    """bf16 parameters give a bf16 norm; the fused kernels read their `grad_scale` as fp32."""
    from trainforge.engine.gradients import _clip

    param = torch.nn.Parameter(torch.ones(16, dtype=torch.bfloat16))
    optimizer = torch.optim.AdamW([param], lr=0.1, fused=True)
    param.grad = torch.full((16,), 10.0, dtype=torch.bfloat16)
    norm = _clip([param], 1.0, True, False, optimizer)
    assert norm.dtype == torch.bfloat16 and optimizer.grad_scale.dtype == torch.float32
    assert optimizer.grad_scale.item() == pytest.approx(40.0, rel=1e-2)  # norm 40 over 1.0
    optimizer.step()  # a bf16 scale would fail here
    assert torch.all(param < 1.0)
