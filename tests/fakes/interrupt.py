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
