"""The profiler window: off adds nothing; on, it records N steps after the wait, writes a
Chrome trace JSON (Perfetto, TensorBoard's profiler view) and prints the top operators."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import torch

from trainforge.config.schema import LoggingConfig
from trainforge.observe.profiler import ProfilerWindow, profiler_callbacks


class StepTrainer:
    """Just what the callback reads of the loop view: the step counter and the task's model
    (its device)."""

    def __init__(self) -> None:
        self.state = SimpleNamespace(global_step=0)
        self.task = SimpleNamespace(model=torch.nn.Linear(2, 2))
        self.weights = torch.randn(64, 64)

    def step(self, callback: ProfilerWindow) -> None:
        (self.weights @ self.weights).relu_()
        self.state.global_step += 1
        callback.on_step_end(self)


def test_off_by_default_adds_no_callback(tmp_path: Path):
    assert LoggingConfig().profile_steps is None
    assert profiler_callbacks(LoggingConfig(), tmp_path) == []


def test_window_after_warm_up_writes_a_trace_and_prints_top_operators(tmp_path: Path, capsys):
    [window] = profiler_callbacks(LoggingConfig(profile_steps=3, profile_wait_steps=2), tmp_path)
    trainer = StepTrainer()
    window.on_fit_start(trainer)
    for expected_open in (False, False, True, True, True, False, False):
        assert (window._profiler is not None) is expected_open, trainer.state.global_step
        trainer.step(window)
    window.on_fit_end(trainer)
    assert window.trace is not None and window.trace.parent == tmp_path / "profiler"
    assert window.trace.name.endswith(".pt.trace.json")
    events = json.loads(window.trace.read_text())["traceEvents"]
    assert any(e.get("name") == "aten::mm" for e in events)
    out = capsys.readouterr().out
    assert "profiler: 3 steps after step 2" in out and "aten::mm" in out
    assert f"profiler trace: {window.trace}" in out


def test_a_run_that_ends_inside_the_window_still_writes_its_trace(tmp_path: Path, capsys):
    window = ProfilerWindow(num_steps=100, wait_steps=0, out_dir=tmp_path)
    trainer = StepTrainer()
    window.on_fit_start(trainer)
    trainer.step(window)
    window.on_fit_end(trainer)
    assert window.trace is not None and window.trace.is_file()
    assert "profiler: 1 steps after step 0" in capsys.readouterr().out
