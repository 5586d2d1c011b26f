"""What the `Trainer` saves and how it comes back: every part with state registered once
for the checkpointer (`state_registry`), what a checkpoint's meta says (`checkpoint_meta`),
the setup each checkpoint records (`run_setup`), what a change of setup means for a resume
(`setup_changes`), the save (`save`), the restore (`restore`): exact on the same
setup, moved on another split of the step, and what a fit leaves behind however it ends
(`leaving`). The trainer module keeps the loop; this one keeps its
checkpoint face (torchtitan keeps its stateful parts behind one checkpointer the same way).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainforge.data.loaders import LoaderPosition, park_workers
from trainforge.engine import checkpoint as ckpt
from trainforge.engine.guard import settle_skips
from trainforge.engine.stateful import (
    ModelState,
    OptimizerState,
    OptionalState,
    RngState,
    ScheduleState,
    StateRegistry,
    loader_workers_check,
)

if TYPE_CHECKING:
    from trainforge.engine.trainer import Trainer


@contextlib.contextmanager
def leaving(trainer: Trainer) -> Iterator[None]:
    """Around `fit`: every checkpoint is on disk when it returns, a save made at its very end
    (the closing validation's best model) included; when it fails, the write under way is
    finished first, unless the failure is a second Ctrl+C, which asks to abort at once
    (`CheckpointWriter.after_failure`: the writer thread is a daemon and nothing else waits
    for it). However it ends, the loaders' worker processes end with it (left alive, they
    would be joined later inside the garbage collector, 5 s each) and their position stays."""
    try:
        yield
        trainer.checkpointer.writer.wait()
    except BaseException as failure:
        trainer.checkpointer.writer.after_failure(failure)
        raise
    finally:
        park_workers(trainer.task.train_loader, trainer.task.val_loader)


def restore(trainer: Trainer, folder: Path) -> dict[str, Any]:
    """Restore every registered part from `folder`; returns the checkpoint's meta.

    On the same setup the run continues exactly where it stopped (`resume_guarantee`
    "exact"). On another split of the step over processes or micro-batches, the run
    moves: the parts that hold only for the old split stay fresh and the run restarts
    the interrupted optimizer step at its first sample, which the invariant sample
    stream (`data.sampling`) makes the same step ("continued", with the reasons)."""
    saved = ckpt.read_meta(folder)
    reasons, moved = setup_changes(saved.get("setup"), run_setup(trainer))
    sampler = trainer.task.train_loader.batch_sampler
    if moved and not hasattr(sampler, "start_at"):
        moved, reasons = False, []  # a loader without steps: only the same split resumes
    meta = trainer.checkpointer.load(folder, moved=moved)
    if moved:
        window = int(saved.get("micro_batch_in_window") or 0)
        if window:
            reasons.append(f"the step under way restarts from its first sample ({window} "
                           "micro-batch(es) done before)")  # fmt: skip
        state = trainer.state
        step = (state.batch_in_epoch - window) // int(saved["setup"]["accumulation"])
        sampler.start_at(state.epoch, step)
        state.batch_in_epoch = sampler.layout.step_start(step)
    trainer.resume_guarantee = ("continued" if reasons else "exact", reasons)
    return meta


def run_setup(trainer: Trainer) -> dict[str, Any]:
    """How this run computes (kept in each checkpoint's meta): what decides whether a
    resume is bitwise."""
    t = trainer.config.training
    return {
        "world_size": trainer.dist.world_size, "micro_batch": t.per_device_train_batch_size,
        "accumulation": trainer.accumulation, "device": trainer.device.type,
        "precision": str(t.precision), "threads": torch.get_num_threads(),
        "workers": int(getattr(trainer.task.train_loader, "num_workers", 0) or 0),
        "sharding": "fsdp" if trainer.sharded else "none",
    }  # fmt: skip


# What each difference of setup changes, in the resume line's words.
_SETUP_REASONS = {
    "world_size": ("world size", "sums reduce in another order"),
    "micro_batch": ("micro-batch", "sums accumulate in another order"),
    "accumulation": ("accumulation", "sums accumulate in another order"),
    "workers": ("loader workers", "the loader restarts at the step"),
    "device": ("device", "other kernels round differently"),
    "precision": ("precision", "other rounding"),
    "threads": ("CPU threads", "sums reduce in another order"),
    "sharding": ("sharding", "the state moves between shards and whole tensors through "
                 "torch.distributed.checkpoint, sums reduce in another order"),
}  # fmt: skip
# Keys whose change splits a step differently: the loader position cannot carry over.
_LAYOUT = ("world_size", "micro_batch", "accumulation", "workers")


def setup_changes(saved: dict[str, Any] | None, now: dict[str, Any]) -> tuple[list[str], bool]:
    """(reasons a resume from a checkpoint of setup `saved` is not bitwise, whether the run
    moves to another split). A checkpoint without a setup (earlier versions) resumes as
    before: the same process count, anything else as it was."""
    if not saved:
        return [], False
    reasons = []
    for key, (name, why) in _SETUP_REASONS.items():
        if key in saved and saved[key] != now[key]:
            reasons.append(f"{name} {saved[key]} -> {now[key]}: {why}")
    return reasons, any(key in saved and saved[key] != now[key] for key in _LAYOUT)


def state_registry(trainer: Trainer) -> StateRegistry:
    """Every part with state, once, in restore order (the RNG last)."""
    registry = StateRegistry()
    model_fits = None
    if not trainer.sharded:  # under FSDP torch.distributed.checkpoint refuses a misfit

        def model_fits(folder: Path, saved: Any) -> None:
            current, settings = trainer.model.state_dict(), trainer.config.model.model_dump()
            ckpt.check_model_fits(folder, saved, current, settings)

    model, sharded = trainer.model, trainer.sharded
    registry.register("model", ModelState(model, sharded), weights=True, sharded=True,
                      check=model_fits)  # fmt: skip
    registry.register("optimizer", OptimizerState(model, trainer.optimizer, sharded), sharded=True)
    registry.register("scheduler", ScheduleState(trainer.scheduler))
    registry.register("scaler", OptionalState(lambda: trainer.precision.scaler))
    loader = trainer.task.train_loader
    registry.register("train_loader", LoaderPosition(loader), per_rank=True,
                      check=loader_workers_check(loader), layout_bound=True)  # fmt: skip
    registry.register("trainer", trainer.state)
    registry.register("nonfinite", trainer.guard)
    registry.register("best", trainer.best)
    registry.register("accumulation", trainer.accumulation_sums, layout_bound=True)
    registry.register("rng", RngState(), per_rank=True)
    return registry


def checkpoint_meta(trainer: Trainer) -> dict[str, Any]:
    """What a checkpoint's meta.json (and checkpoint_meta.json) says besides its name."""
    s = trainer.state
    return {
        "epoch": s.epoch, "global_step": s.global_step, "batch_in_epoch": s.batch_in_epoch,
        "micro_batch_in_window": trainer.accumulation_sums.micro, "best_val": s.best_metric,
        "best_metric": trainer.best.metric, "best_step": s.best_step,
        "best_epoch": s.best_epoch, "best_val_loss": trainer.best.best.best_loss,
        "best_val_step": s.best_step, "config_hash": trainer.config_hash,
        "timestamp": datetime.now(UTC).isoformat(timespec="microseconds"),
        "versions": ckpt.library_versions(), "world_size": trainer.dist.world_size,
        "sharded": trainer.sharded, "setup": run_setup(trainer),
    }  # fmt: skip


def save(trainer: Trainer, name: str, *, wait: bool = False) -> Path:
    """Save every registered part as checkpoint `name` (`engine.checkpointer`): copied to
    CPU memory, then written on the background thread unless `checkpoint.async_save` is off
    or `wait`. The loop stalls only for the copy. Weights holding NaN or Inf are never
    written: the write is dropped with one line and the previous checkpoints stay the
    newest. The time it takes is paused out of the throughput meter."""
    paused_from = trainer.meter.clock()  # the trainer's clock, which times the whole loop
    settle_skips(trainer)  # the skip counters go into the checkpoint
    trainer.last_checkpoint_step = trainer.state.global_step  # every rank, every save path
    trainer.checkpointer.writer.wait()  # the copy buffers are free again
    trainer.state.train_time_s = trainer.elapsed_s()
    trainer.restart_clock()
    folder = trainer.checkpointer.root / name
    reports = trainer.checkpointer.save(name, wait=wait)
    trainer.last_checkpoint = folder
    if reports:
        trainer.meter.paused_s += trainer.meter.clock() - paused_from
        trainer.emit("on_save", folder)
    return folder
