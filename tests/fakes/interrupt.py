"""A real Ctrl+C at a chosen step: a wrapper around `python -m trainforge` that makes the
process send SIGINT to itself after optimizer step $STOP_AT_STEP, so the interruption lands
at the same step on any machine; the signal handler and the checkpoint are the real ones."""

from __future__ import annotations

from pathlib import Path

INTERRUPT_AT = """
import os, runpy, signal, sys
from trainforge.engine.callbacks import GracefulStop
stop_at, original = int(os.environ["STOP_AT_STEP"]), GracefulStop.on_batch_end
def on_batch_end(self, trainer):
    if trainer.state.global_step == stop_at and self.received is None:
        os.kill(os.getpid(), signal.SIGINT)
    return original(self, trainer)
GracefulStop.on_batch_end = on_batch_end
sys.argv = ["trainforge", *sys.argv[1:]]
runpy.run_module("trainforge", run_name="__main__")
"""


def interrupt_script(folder: Path) -> Path:
    """Write the wrapper into `folder`; run it as `python SCRIPT train ...`."""
    script = folder / "interrupt_at.py"
    script.write_text(INTERRUPT_AT)
    return script


HOLD_AT = """
import os, runpy, sys, time
from trainforge.engine.callbacks import GracefulStop
hold_at, original = int(os.environ["HOLD_AT_STEP"]), GracefulStop.on_batch_end
def on_batch_end(self, trainer):
    if trainer.state.global_step == hold_at and os.environ.get("WORLD_SIZE") == "1":
        while self.received is None:  # until a signal stops this process (a new rendezvous)
            time.sleep(0.05)
    return original(self, trainer)
GracefulStop.on_batch_end = on_batch_end
sys.argv = ["trainforge", *sys.argv[1:]]
runpy.run_module("trainforge", run_name="__main__")
"""


def hold_script(folder: Path) -> Path:
    """A wrapper like `interrupt_script` whose one-process run waits after optimizer step
    $HOLD_AT_STEP until a signal stops it: a torchrun job whose node joins is then restarted
    at that step on any machine, never after the run has finished alone."""
    script = folder / "hold_at.py"
    script.write_text(HOLD_AT)
    return script
