"""A stop request that the long passes without optimizer steps poll: validation between
its batches, greedy generation between its tokens, the final evaluation of a finished run.

A signal handler (`engine.callbacks.GracefulStop`, `watch` below) only sets the flag, the
one thing a handler may safely do; the pass that sees it raises `StopRequested`, and the
loop, back at a safe point, saves `checkpoint_interrupted`. The flag is process-wide
because a signal is. Under torch.distributed no pass polls it: ranks agree to stop at an
optimizer step instead, and a pass left early on one rank only would hang its peers.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

_state = {"signal": None}  # the name of the signal that asked to stop, or None

SIGNALS = ("SIGINT", "SIGTERM", "SIGUSR1")


class StopRequested(Exception):
    """A signal asked the run to stop during a pass that has no safe point of its own."""


def request(signal_name: str) -> None:
    _state["signal"] = signal_name


def requested() -> str | None:
    """The signal that asked to stop, or None."""
    return _state["signal"]


def clear() -> None:
    _state["signal"] = None


def check() -> None:
    """Raise `StopRequested` when a stop was asked for."""
    if _state["signal"] is not None:
        raise StopRequested(_state["signal"])


@contextlib.contextmanager
def watch() -> Iterator[None]:
    """Within: SIGINT/SIGTERM/SIGUSR1 request a stop instead of their default action (a
    second signal of a kind acts as before). The previous handlers come back after."""
    previous: dict[int, Any] = {}

    def handler(signum: int, _frame: Any) -> None:
        request(signal.Signals(signum).name)
        old = previous[signum]
        signal.signal(signum, old if old is not None else signal.SIG_DFL)

    try:
        for name in SIGNALS:
            sig = getattr(signal, name, None)
            if sig is not None:
                previous[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main thread: signals stay as they are
        pass
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


class GenerationStop:
    """A `transformers` stopping criterion: end generation when a stop was asked for."""

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        done = requested() is not None
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)
