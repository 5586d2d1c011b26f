"""One callback list for `trainforge train` and for pruning's fine-tune: what each gets."""

from __future__ import annotations

from trainforge.config import load
from trainforge.engine.callbacks import CheckpointCadence, EvalCadence, GracefulStop, TimeLimit
from trainforge.observe import MetricsCallback, ProgressDisplay
from trainforge.observe.profiler import ProfilerWindow
from trainforge.run.callbacks import build_callbacks, metrics_callback


def config(*sets: str):
    return load(None, overrides=list(sets), profile="cpu").config


def test_a_resumable_run_validates_saves_stops_logs_and_shows_progress(tmp_path):
    c = config("evaluation.eval_steps=7", "checkpoint.save_steps=5", "logging.profile_steps=2")
    callbacks = build_callbacks(c, ["logger"], params={"a": 1}, profile_dir=tmp_path)
    kinds = [type(cb) for cb in callbacks]
    assert kinds == [
        EvalCadence, CheckpointCadence, TimeLimit, GracefulStop, MetricsCallback,
        ProgressDisplay, ProfilerWindow,
    ]  # fmt: skip
    assert callbacks[0].every_steps == 7 and callbacks[1].save_steps == 5
    metrics = metrics_callback(callbacks)
    assert metrics.loggers == ["logger"] and metrics.params == {"a": 1}
    assert metrics.listeners == [callbacks[5]]  # the progress display hears every record


def test_a_finetune_validates_per_epoch_and_keeps_no_checkpoints():
    c = config("evaluation.eval_steps=7", "evaluation.fast_eval_steps=3")
    callbacks = build_callbacks(c, [], resumable=False, progress=False)
    assert [type(cb) for cb in callbacks] == [EvalCadence, MetricsCallback, ProgressDisplay]
    cadence = callbacks[0]
    assert (cadence.every_steps, cadence.fast_steps) == (None, None)
    assert cadence.every_epochs == c.evaluation.eval_every_epochs
