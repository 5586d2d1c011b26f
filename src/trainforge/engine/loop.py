"""The loop as its readers see it: what callbacks, the run's outputs and the other readers
may read of a training loop (`Loop`), and how a fit ended (`Outcome`).

`engine.trainer.Trainer` is the one implementation; nothing outside it names the Trainer's
other attributes (its parts, its clocks, its optimizer). A callback hook receives a `Loop`
(torchtitan's validator and checkpointer receive the model parts and the step the same
way, not the trainer), so a reader that needs something more takes it at construction or
asks for it to be declared here. `tests/test_parts.py` keeps this view small and checks
that its readers use nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from trainforge.config.schema import RunConfig
    from trainforge.engine.state import TrainerState
    from trainforge.engine.task import Task


@dataclass
class Outcome:
    """How the fit is ending: why it stopped, by which signal, whether it diverged, and its
    newest checkpoint (folder, step)."""

    reason: str = "finished"
    signal: str | None = None  # the signal that stopped it (then `interrupted`)
    interrupted: bool = False
    diverged: bool = False
    last_checkpoint: Path | None = None
    last_checkpoint_step: int | None = None
    # Where this fit began (a resume's step and training time): the closing line tells the
    # run's totals from this segment's share.
    start_step: int = 0
    start_time_s: float = 0.0


class Loop(Protocol):
    """The declared view of a training loop (16 members)."""

    state: TrainerState  # counters: epoch, global_step, batch_in_epoch, best values, ...
    task: Task  # the task it trains (its model, loaders and declared hooks)
    config: RunConfig  # the run's recipe and hardware settings, as finalized
    steps_per_epoch: int
    total_steps: int
    should_stop: bool
    outcome: Outcome

    def stop(self, reason: str, *, signal: str | None = None) -> None:
        """Stop at the next boundary; `signal`: a signal asked for it (an interruption)."""
        ...

    def step_due(self, every: int | None) -> bool:
        """Whether the step just taken is a multiple of `every` (settles skips first)."""
        ...

    def all_steps_done(self) -> bool: ...

    def elapsed_s(self) -> float:
        """Training time of the whole run so far, resumes included."""
        ...

    def save_checkpoint(self, name: str, *, wait: bool = False) -> Path: ...

    def evaluate(self) -> dict[str, float]:
        """Full validation (emits `on_eval_end`); {} when a stop request cut it short."""
        ...

    def evaluate_fast(self) -> tuple[dict[str, float], bool]:
        """Validation on the fixed subset: (metrics, whether it improved)."""
        ...

    def pop_train_metrics(self) -> dict[str, float]:
        """The logging interval's training metrics; starts a new interval."""
        ...

    def current_lr(self) -> float: ...
