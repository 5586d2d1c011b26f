"""Per-step warmup + cosine matches the ViT guide's epoch formula at epoch boundaries; the
SCHEDULES registry's contract: every name builds, warms up then takes its shape, round-trips
its state and rewinds; a schedule registered from a test file runs in a real fit."""

from __future__ import annotations

import math

import pytest
import torch

from trainforge.config.schema import ScheduleConfig
from trainforge.engine.schedule import WarmupDecay, build_scheduler
from trainforge.registry import SCHEDULES


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


def test_the_plan_and_the_schedule_fit_a_warmup_by_the_same_rule():
    """One rule (`config.plan.fitted_warmup`): what the plan says for a 300-step warmup in a
    run cut to 200 steps on the command line is what the schedule says once steps count."""
    from trainforge.config.plan import fitted_warmup
    from trainforge.config.schema import ScheduleConfig
    from trainforge.engine.schedule import fit_warmup

    assert fitted_warmup(300, 200, "step") == (
        20,
        "schedule: warmup of 300 steps does not fit the 200-step run; shortened to 20 "
        "(a tenth of the run)",
    )
    fitted, note = fit_warmup(ScheduleConfig(warmup_steps=300), 50, total_steps=200)
    assert (fitted.warmup_steps, note) == fitted_warmup(300, 200, "step")
    assert fitted_warmup(2.0, 1.5, "epoch")[1].endswith(
        "the 1.5-epoch run; shortened to 0.15 (a tenth of the run)"
    )
    assert fitted_warmup(0, 10, "step") is None and fitted_warmup(9, 10, "step") is None


# ------------------------------------------------------------------ the SCHEDULES registry
NAMES = SCHEDULES.names()


def schedule_config(points_config, name: str, **sets):
    return points_config(**{"schedule.lr_scheduler_type": name, **sets})


def test_the_built_in_schedules_are_registered():
    assert {"cosine", "linear", "constant"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_schedule_warms_up_linearly_then_takes_its_shape(name):
    shape = SCHEDULES.get(name)
    fn = WarmupDecay(warmup_steps=4, total_steps=20, min_ratio=0.1, kind=name)
    assert [fn(step) for step in range(4)] == [0.0, 0.25, 0.5, 0.75]
    assert fn(4) == pytest.approx(1.0)  # every shape starts at the peak
    assert fn(12) == shape(0.5, 0.1) and fn(20) == shape(1.0, 0.1) == fn(500)
    assert all(0.1 <= shape(p / 10, 0.1) <= 1.0 for p in range(11))  # between floor and peak


@pytest.mark.parametrize("name", NAMES)
def test_every_schedule_builds_from_the_config_and_round_trips_its_state(
    name, points_config, tmp_path
):
    from trainforge.engine.stateful import ScheduleState

    cfg = schedule_config(points_config, name, **{"schedule.warmup_steps": 2})

    def build():
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        sched = build_scheduler(opt, cfg.schedule, peak_lr=1.0, total_steps=10, steps_per_epoch=5)
        return opt, sched

    opt, sched = build()
    for _ in range(4):
        opt.step()
        sched.step()
    torch.save(ScheduleState(sched).state_dict(), tmp_path / "s.pt")
    opt2, sched2 = build()
    ScheduleState(sched2).load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True))
    for _ in range(3):
        opt.step()
        sched.step()
        opt2.step()
        sched2.step()
        assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]


@pytest.mark.parametrize("name", NAMES)
def test_rewind_equals_a_scheduler_that_never_took_the_steps(name, points_config):
    from trainforge.engine.schedule import rewind

    cfg = schedule_config(points_config, name, **{"schedule.warmup_steps": 2})

    def stepped(num_steps):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        sched = build_scheduler(opt, cfg.schedule, peak_lr=1.0, total_steps=10, steps_per_epoch=5)
        for _ in range(num_steps):
            opt.step()
            sched.step()
        return opt, sched

    opt, sched = stepped(7)
    rewind(sched, 3)
    clean_opt, clean = stepped(4)
    assert sched.state_dict() == clean.state_dict()
    assert opt.param_groups[0]["lr"] == clean_opt.param_groups[0]["lr"]


def test_an_unknown_schedule_is_one_line_naming_the_key(points_config):
    from trainforge.errors import UserError

    cfg = points_config()
    schedule = cfg.schedule.model_copy(update={"lr_scheduler_type": "cosin"})
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(UserError) as info:
        build_scheduler(opt, schedule, peak_lr=1.0, total_steps=10, steps_per_epoch=5)
    line = info.value.line()
    assert "schedule.lr_scheduler_type = 'cosin'" in line and "did you mean 'cosine'" in line


def test_a_schedule_registered_from_a_test_file_runs_in_a_real_fit(
    tmp_path, points_task, points_config
):
    """One file adds a schedule: a step down to half the peak at mid-run."""
    from trainforge.engine.callbacks import Callback
    from trainforge.engine.trainer import Trainer

    SCHEDULES.register("toy-step", lambda progress, min_ratio: 0.5 if progress >= 0.5 else 1.0)
    try:
        cfg = points_config(**{"training.max_steps": 6, "training.per_device_train_batch_size": 8})
        peak = cfg.optimizer.learning_rate
        # The schema lists the allowed names; the registry is what the engine reads.
        schedule = cfg.schedule.model_copy(update={"lr_scheduler_type": "toy-step"})
        cfg = cfg.model_copy(update={"schedule": schedule})
        seen = []

        class Rates(Callback):
            def on_step_end(self, trainer):
                seen.append(trainer.current_lr())

        trainer = Trainer(
            points_task(n=64, batch_size=8), cfg, run_dir=tmp_path, device=torch.device("cpu"),
            callbacks=[Rates()],
        )  # fmt: skip
        trainer.fit()
    finally:
        SCHEDULES.unregister("toy-step")
    assert seen == [peak, peak, 0.5 * peak, 0.5 * peak, 0.5 * peak, 0.5 * peak]
