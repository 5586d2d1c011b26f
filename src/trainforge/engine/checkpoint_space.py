"""How many checkpoint folders a run keeps at its worst moment and the disk they need: the count
from the cadence (`save_steps`, `save_every_epochs`, the run's last step) and rotation
(`save_total_limit`), the bytes of one checkpoint of a model, and the start line's warning
when the disk cannot hold them. `doctor` and the run's start line read it; re-exported by
`engine.checkpoint`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def most_kept(save_total_limit: int | None, periodic_saves: int, save_best: bool) -> int:
    """Checkpoint folders on disk at the worst moment of a run: the periodic ones rotation
    keeps (`save_total_limit`, else every one of `periodic_saves`), the best one, one
    interrupted or time-limit checkpoint, and the one being written before rotation deletes
    the oldest."""
    periodic = save_total_limit if save_total_limit is not None else max(1, periodic_saves)
    return periodic + int(save_best) + 2


def periodic_saves(checkpoint: Any, training: Any, steps_per_epoch: int | None) -> int | None:
    """The rotated checkpoints a run writes, as `callbacks.CheckpointCadence` writes them:
    one every `save_steps`, one every `save_every_epochs` (skipped where epochs are shorter
    than `save_steps`), and the run's last step where neither landed on it; an epoch's end on
    a `save_steps` step counts twice though it is one folder and a link (`alias`), so the
    count bounds the disk from above. None where that
    needs the steps per epoch and they are not known (a config checked before its data is
    read, with `save_steps` and no `max_steps`)."""
    import math

    every, by_step = checkpoint.save_every_epochs, checkpoint.save_steps
    if steps_per_epoch:
        total = (
            training.max_steps
            if training.max_steps > 0
            else max(1, math.ceil(training.num_train_epochs * steps_per_epoch))
        )
        epochs, ends_an_epoch = math.ceil(total / steps_per_epoch), total % steps_per_epoch == 0
    elif training.max_steps > 0:
        total, epochs, ends_an_epoch = training.max_steps, None, False
    else:
        epochs = math.ceil(training.num_train_epochs)
        total, ends_an_epoch = None, epochs == training.num_train_epochs
    saves, last_saved = 0, False
    if by_step:
        if total is None:
            return None
        saves, last_saved = total // by_step, total % by_step == 0
    shorter = by_step and steps_per_epoch and steps_per_epoch * (every or 0) < by_step
    if every and not shorter:
        if epochs is None:
            return None
        saves += epochs // every
        last_saved = last_saved or (ends_an_epoch and epochs % every == 0)
    return saves + (0 if last_saved else 1)


def checkpoints_kept(checkpoint: Any, training: Any, steps_per_epoch: int | None) -> int | None:
    """Checkpoint folders on disk at the worst moment of a run (`most_kept` over
    `periodic_saves`); None where rotation keeps every one and their count is not known."""
    saves = periodic_saves(checkpoint, training, steps_per_epoch)
    if saves is None and checkpoint.save_total_limit is None:
        return None
    return most_kept(checkpoint.save_total_limit, saves or 1, checkpoint.save_best)


def estimate_bytes(model: torch.nn.Module, optimizer_slots: int = 2) -> int:
    """Bytes of one checkpoint of `model`: the weights plus `optimizer_slots` tensors of the
    same size per trainable weight (AdamW keeps two moments)."""
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return weights + optimizer_slots * trainable


def space_warning(run_dir: Path, bytes_per_checkpoint: int, num_kept: int) -> str | None:
    """One warning line when the disk under `run_dir` cannot hold `num_kept` checkpoints of
    `bytes_per_checkpoint` (those already in RUN/checkpoints count as written); else None."""
    from trainforge.storage import free_bytes, size_text

    free = free_bytes(run_dir)
    if free is None:
        return None
    from trainforge.runfolder import RunFolder

    root = RunFolder(Path(run_dir)).checkpoints
    present = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.is_dir() else 0
    need = max(0, bytes_per_checkpoint * num_kept - present)
    if need <= free:
        return None
    return (
        f"warning: checkpoints need about {size_text(need)} at {run_dir} ({num_kept} x "
        f"{size_text(bytes_per_checkpoint)}), only {size_text(free)} free; a save that does "
        "not fit stops the run (checkpoint.on_save_error) - free space, lower "
        "checkpoint.save_total_limit, or set output.dir to a bigger disk"
    )
