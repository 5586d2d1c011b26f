"""Per-step warmup + cosine matches the ViT guide's epoch formula at epoch boundaries."""

from __future__ import annotations

import math

import pytest
import torch

from trainforge.config.schema import ScheduleConfig
from trainforge.engine.schedule import WarmupDecay, build_scheduler


def guide_lr(epoch: float, peak: float, warmup_epochs: float, max_epochs: float) -> float:
    """The formula printed in the ViT guide (minimum LR 0)."""
    if epoch < warmup_epochs:
        return peak * (epoch / warmup_epochs)
    progress = (epoch - warmup_epochs) / (max_epochs - warmup_epochs)
    return peak * 0.5 * (1 + math.cos(math.pi * progress))


@pytest.mark.parametrize("epoch", [0, 1, 2.5, 4, 5, 6, 10, 25, 49, 50])
def test_matches_guide_formula(epoch):
    steps_per_epoch, peak = 20, 3e-4
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([param], lr=peak)
    sched = build_scheduler(
        opt,
        ScheduleConfig(warmup_epochs=5, min_lr=0.0),
        peak_lr=peak,
        total_steps=50 * steps_per_epoch,
        steps_per_epoch=steps_per_epoch,
    )
    step = round(epoch * steps_per_epoch)
    for _ in range(step):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(guide_lr(epoch, peak, 5, 50), abs=1e-12)


def test_min_lr_floor_and_linear_shape():
    fn = WarmupDecay(warmup_steps=10, total_steps=110, min_ratio=0.1, kind="linear")
    assert fn(0) == 0.0
    assert fn(5) == pytest.approx(0.5)
    assert fn(10) == pytest.approx(1.0)
    assert fn(60) == pytest.approx(0.1 + 0.9 * 0.5)
    assert fn(110) == pytest.approx(0.1)
    assert fn(500) == pytest.approx(0.1)


def test_schedule_state_survives_weights_only_round_trip(tmp_path):
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([param], lr=1.0)
    sched = build_scheduler(
        opt, ScheduleConfig(warmup_steps=3), peak_lr=1.0, total_steps=10, steps_per_epoch=5
    )
    for _ in range(4):
        opt.step()
        sched.step()
    torch.save(sched.state_dict(), tmp_path / "s.pt")
    state = torch.load(tmp_path / "s.pt", weights_only=True)
    opt2 = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched2 = build_scheduler(
        opt2, ScheduleConfig(warmup_steps=3), peak_lr=1.0, total_steps=10, steps_per_epoch=5
    )
    sched2.load_state_dict(state)
    opt.step()
    sched.step()
    opt2.step()
    sched2.step()
    assert opt2.param_groups[0]["lr"] == pytest.approx(opt.param_groups[0]["lr"])


def test_a_warmup_in_epochs_longer_than_a_step_budget_is_shortened_with_a_notice():
    from trainforge.config.schema import ScheduleConfig
    from trainforge.engine.schedule import fit_warmup

    cfg = ScheduleConfig(warmup_epochs=3)  # 3 x 23 = 69 steps, in a 24-step run
    fitted, note = fit_warmup(cfg, steps_per_epoch=23, total_steps=24)
    assert fitted.warmup_steps == 2
    assert note == (
        "schedule: warmup of 3 epochs = 69 steps does not fit the 24-step run; shortened to 2 "
        "(a tenth of the run)"
    )
    same, none = fit_warmup(cfg, steps_per_epoch=23, total_steps=100)
    assert same is cfg and none == ""
