"""The profiler window: `torch.profiler` over N training steps after a warm-up, written as a
trace that TensorBoard's profiler view and Perfetto open, with the top operators printed.

The assets README's advice for slow training ends with "profile with PyTorch profiler";
`logging.profile_steps: N` does that inside a real run. The window starts after
`logging.profile_wait_steps` optimizer steps (the first steps pay for allocator warm-up,
cuDNN autotuning and lazy initialisation) and covers N steps; the trace goes to
RUN/profiler/ through `torch.profiler.tensorboard_trace_handler`, whose `*.pt.trace.json`
file is Chrome trace JSON: https://ui.perfetto.dev opens it as is, and
`tensorboard --logdir runs/NAME` shows it with the PyTorch profiler plugin installed.

Kineto, the tracing library under torch.profiler, logs to stderr from C++: "USDT ...
profiler_start/profiler_stop" on every window and, on a machine without a CUDA driver,
"ERROR ... gpuGetDeviceCount failed with code 35". None of it is about the trace written
(the window's own lines say where it is), so its log is off unless the user sets
`KINETO_LOG_LEVEL` (0: everything), which kineto reads when the first profiler starts.

Off by default and free when off: the run adds this callback only when `profile_steps` is
set, so an unprofiled run has no profiler object and no per-step check at all.
Considered: torch.profiler's own `schedule(wait, warmup, active)`, which would need the
profiler object alive (and stepped) from the first step; starting it at the window is
simpler and counts steps from where the run starts, so a resumed run profiles too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainforge.engine.callbacks import Callback

if TYPE_CHECKING:
    from trainforge.config.schema import LoggingConfig
    from trainforge.engine.loop import Loop

NUM_TOP_OPERATORS = 12
KINETO_LOG_ENV = "KINETO_LOG_LEVEL"
# Above kineto's highest severity (VERBOSE 0 ... ERROR 4, USDT 5): nothing is logged.
KINETO_QUIET = "6"


class ProfilerWindow(Callback):
    """Record `num_steps` optimizer steps after `wait_steps`, then write and summarise."""

    def __init__(self, num_steps: int, wait_steps: int, out_dir: Path) -> None:
        self.num_steps = num_steps
        self.wait_steps = wait_steps
        self.out_dir = Path(out_dir)
        self._profiler: Any = None
        self._start_step: int | None = None
        self._stop_step: int | None = None
        self.trace: Path | None = None
        self.table: str | None = None

    def on_fit_start(self, loop: Loop) -> None:
        first = loop.state.global_step
        self._start_step = first + self.wait_steps
        self._stop_step = self._start_step + self.num_steps
        if self.wait_steps == 0:
            self._start(loop)

    def on_step_end(self, loop: Loop) -> None:
        step = loop.state.global_step
        if self._profiler is None:
            if self.trace is None and step == self._start_step:
                self._start(loop)
            return
        self._profiler.step()
        if step >= (self._stop_step or 0):
            self._finish(loop)

    def on_fit_end(self, loop: Loop) -> None:
        if self._profiler is not None:  # the run ended inside the window
            self._finish(loop)

    def _start(self, loop: Loop) -> None:
        from torch.profiler import ProfilerActivity, profile

        os.environ.setdefault(KINETO_LOG_ENV, KINETO_QUIET)
        activities = [ProfilerActivity.CPU]
        if _on_cuda(loop):
            activities.append(ProfilerActivity.CUDA)
        self._profiler = profile(activities=activities, record_shapes=True)
        self._profiler.start()

    def _finish(self, loop: Loop) -> None:
        from torch.profiler import tensorboard_trace_handler

        profiler, self._profiler = self._profiler, None
        profiler.stop()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        before = set(self.out_dir.glob("*.pt.trace.json"))
        tensorboard_trace_handler(str(self.out_dir), worker_name="trainforge")(profiler)
        written = sorted(set(self.out_dir.glob("*.pt.trace.json")) - before)
        self.trace = written[-1] if written else self.out_dir
        cuda = _on_cuda(loop)
        sort_by = "self_cuda_time_total" if cuda else "self_cpu_time_total"
        self.table = profiler.key_averages().table(sort_by=sort_by, row_limit=NUM_TOP_OPERATORS)
        steps = loop.state.global_step - (self._start_step or 0)
        print(
            f"profiler: {steps} steps after step {self._start_step}, top operators by "
            f"{sort_by.replace('_', ' ')}:\n{self.table}"
        )
        print(f"profiler trace: {self.trace} (open in https://ui.perfetto.dev or TensorBoard)")


def profiler_callbacks(logging: LoggingConfig, run_dir: Path) -> list[Callback]:
    """[ProfilerWindow] when `logging.profile_steps` is set, else [] (nothing added)."""
    steps = getattr(logging, "profile_steps", None)
    if not steps:
        return []
    wait = getattr(logging, "profile_wait_steps", 5)
    from trainforge.runfolder import RunFolder

    return [ProfilerWindow(steps, wait, RunFolder(Path(run_dir)).profiler)]


def _on_cuda(loop: Loop) -> bool:
    """Whether the run's model is on a CUDA device (its first parameter's device)."""
    first = next(iter(loop.task.model.parameters()), None)
    return first is not None and first.device.type == "cuda"
