"""Progress lines without a terminal, on the real training loop with a fake clock: a line
at every logging point and every `interval_s`, steps/s and ETA, validation figures only when
fresh, and real figures on the first line after a resume."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import torch

from trainforge.engine.callbacks import EvalCadence
from trainforge.engine.trainer import Trainer
from trainforge.observe.progress import ProgressDisplay, format_eta, format_metrics
from trainforge.observe.reporting import MetricsCallback

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from conftest import make_config, make_task

CPU = torch.device("cpu")


class FakeClock:
    """Advances `tick` seconds on every read: the display sees time pass step by step."""

    def __init__(self, tick: float) -> None:
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def fit(run_dir: Path, *, interval_s: float, tick: float, logging_steps: int, steps: int,
        eval_steps=None, n=160, resume=None):  # fmt: skip
    stream = io.StringIO()  # not a terminal
    progress = ProgressDisplay(stream=stream, interval_s=interval_s, clock=FakeClock(tick))
    cfg = make_config(**{"training.max_steps": steps, "training.per_device_train_batch_size": 16})
    callbacks = [
        EvalCadence(eval_steps, None),
        MetricsCallback([], logging_steps, listeners=[progress]),
        progress,
    ]
    trainer = Trainer(make_task(n=n), cfg, run_dir=run_dir, device=CPU, callbacks=callbacks)
    if resume is not None:
        trainer.load_checkpoint(resume)
    trainer.fit()
    return trainer, stream.getvalue().splitlines()


def step_of(line: str) -> int:
    return int(re.search(r"step (\d+)/", line).group(1))


def test_a_line_every_interval_before_the_first_epoch_ends(tmp_path):
    # 10 steps per epoch, logging only every 100 steps: the clock alone prints lines.
    trainer, lines = fit(tmp_path, interval_s=3.0, tick=1.0, logging_steps=100, steps=20)
    assert trainer.steps_per_epoch == 10
    within_epoch = [ln for ln in lines if step_of(ln) < trainer.steps_per_epoch]
    assert within_epoch, lines
    first = within_epoch[0]
    assert first.startswith("epoch 1/2  step ")
    assert re.search(r"[\d.]+ steps/s", first) and re.search(r"ETA \d+:\d\d:\d\d", first)
    assert "samples/s" in first and "lr " in first
    assert "0.00e+00" not in first  # the optimizer's learning rate, not a placeholder
    # one clock read per step and per line: lines come at most every 3 s of fake time
    assert 2 <= len(within_epoch) <= 4


def test_every_logging_point_prints_and_validation_only_when_fresh(tmp_path):
    _, lines = fit(tmp_path, interval_s=1e9, tick=0.0, logging_steps=2, steps=8, eval_steps=4)
    steps = [step_of(ln) for ln in lines]
    assert steps == [2, 4, 6, 8]  # every logging point, once
    with_val = [step_of(ln) for ln in lines if "| val loss" in ln]
    assert with_val == [4, 8]
    assert all("loss " in ln and "acc " in ln and "data wait" in ln for ln in lines)


def test_first_line_after_a_resume_shows_real_figures(tmp_path):
    first_run, _ = fit(tmp_path / "a", interval_s=1e9, tick=0.1, logging_steps=5, steps=5)
    first_run.save_checkpoint("checkpoint-5", wait=True)
    checkpoint = first_run.last_checkpoint
    _, lines = fit(tmp_path / "b", interval_s=0.0, tick=0.1, logging_steps=100, steps=12,
                   resume=checkpoint)  # fmt: skip
    first = lines[0]
    assert step_of(first) == 6, lines
    lr = float(re.search(r"lr ([\d.e+-]+)", first).group(1))
    assert lr > 0
    samples = float(re.search(r"([\d,]+) samples/s", first).group(1).replace(",", ""))
    assert samples > 0 and "steps/s" in first


def test_formats():
    shown = format_metrics({"loss": 0.5, "accuracy": 0.25, "per": 0.031, "wer": 0.4, "x": 1})
    assert shown == "loss 0.5000  acc 25.00%  per 3.10%  wer 40.00%"
    assert format_metrics({"loss": 1.0}, "val ") == "val loss 1.0000"
    assert format_eta(3725.4) == "1:02:05" and format_eta(-3) == "0:00:00"


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_eta_follows_the_recent_rate_and_an_hour_in_lines_show_elapsed_and_steps_per_hour():
    """1,000 steps at 1 s, then 2,000 at 0.1 s, of a 4,000-step run: 1,000 steps are left at
    0.1 s, so 100 s. The mean since the start (0.4 s a step) would say 400 s."""
    from types import SimpleNamespace

    clock = ManualClock()
    display = ProgressDisplay(stream=io.StringIO(), interval_s=0.0, clock=clock)
    state = SimpleNamespace(global_step=0, epoch=0)
    config = SimpleNamespace(
        logging=SimpleNamespace(progress_interval_s=0.0),
        training=SimpleNamespace(per_device_train_batch_size=None),
    )
    loop = SimpleNamespace(state=state, config=config, total_steps=4_000, steps_per_epoch=4_000,
                           current_lr=lambda: 1e-3)  # fmt: skip
    display.on_fit_start(loop)
    lines = []
    for step in range(10, 3_001, 10):  # a line every 10 steps
        clock.now += 10.0 if step <= 1_000 else 1.0
        state.global_step = step
        lines.append(display.line(loop, 1))
    eta = re.search(r"ETA (\d+):(\d\d):(\d\d)", lines[-1]).groups()
    assert int(eta[0]) * 3600 + int(eta[1]) * 60 + int(eta[2]) == 100, lines[-1]
    assert "elapsed" not in lines[-1]  # 1,200 s in: not an hour yet
    for step in range(3_010, 3_500, 10):  # slower again: 50 s for 10 steps, past the hour
        clock.now += 50.0
        state.global_step = step
        lines.append(display.line(loop, 1))
    assert re.search(r"elapsed 1:\d\d:\d\d  720 steps/h", lines[-1]), lines[-1]
    assert "ETA 0:42:30" in lines[-1]  # 510 steps left at 5 s


def test_an_epochs_validation_after_its_last_line_adds_only_its_figures(tmp_path):
    stream = io.StringIO()
    progress = ProgressDisplay(stream=stream, interval_s=1e9, clock=FakeClock(0.1))
    cfg = make_config(**{"training.max_steps": 20, "training.per_device_train_batch_size": 16})
    callbacks = [EvalCadence(None, 1), MetricsCallback([], 10, listeners=[progress]), progress]
    Trainer(make_task(n=160), cfg, run_dir=tmp_path, device=CPU, callbacks=callbacks).fit()
    lines = stream.getvalue().splitlines()
    at_ten = [ln for ln in lines if step_of(ln) == 10]
    assert len(at_ten) == 2, lines
    assert "samples/s" in at_ten[0] and "| val" not in at_ten[0]
    assert re.fullmatch(r"epoch 1/2  step 10/20  \| val loss [\d.]+  val acc [\d.]+%", at_ten[1])
