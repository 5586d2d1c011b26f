"""What a run says about itself at start, and the platform facts behind those lines: the
platform, task, device, batch and recipe lines, the launcher hint (`hardware.launcher`), the
disk the checkpoints need (and a warning when it is short), a warning when the logging
cadence would write more metrics records than a run should, the telemetry sampler, the
device's name and its peak TFLOP/s for MFU.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainforge.config import ResolvedConfig, RunConfig
from trainforge.run.recipe import recipe_line
from trainforge.runfolder import RunFolder

if TYPE_CHECKING:
    from trainforge.engine.loop import Loop


def print_start(
    resolved: ResolvedConfig,
    platform: Any,
    loop: Loop,
    device: Any,
    precision: str,
    run_dir: Path,
    notes: list[str],
) -> None:
    """The start lines, then `notes` (config notes, the batch fit, the schedule) that say
    something. `device`, `precision`: those the run uses (`engine.precision`)."""
    from trainforge import parallel

    c = resolved.config
    t = c.training
    dist = parallel.context()
    world = dist.world_size
    if resolved.recipe:  # `train NAME`: which file that was, and how to edit it
        print(
            f"config: recipe {resolved.recipe}, packaged with trainforge ({resolved.path}); "
            f"a copy to edit: trainforge recipes copy {resolved.recipe}"
        )
    print(
        f"platform: {platform.kind} ({platform.device})   profile: {resolved.profile.name} "
        f"({resolved.profile_reason})"
    )
    if getattr(platform, "memory_source", "host") != "host":  # a container or Slurm's --mem
        print(f"memory: {platform.memory_gib:.2f} GiB ({platform.memory_source})")
    print(
        f"task: {c.task.kind}   data: {c.data.dataset} ({loop.task.num_train_samples} "
        f"training samples)   model: {c.model.arch} "
        f"{sum(p.numel() for p in loop.task.model.parameters()):,} parameters"
    )
    print(
        f"device: {device}   precision: {precision}   "
        f"{batch_text(t, world)}   steps: {loop.total_steps} ({loop.steps_per_epoch}/epoch)"
    )
    print(recipe_line(resolved))
    print(validation_line(c, loop))
    if world > 1:  # torch.distributed runs: sharded exactly when the config asks for FSDP
        mode = "FSDP2 (fully_shard)" if c.hardware.data_parallel == "fsdp" else "DDP"
        print(f"distributed: {world} processes, backend {dist.backend}, {mode}")
    print(f"run folder: {run_dir}")
    volume = logging_volume_line(c, loop.total_steps, loop.steps_per_epoch)
    for line in [launcher_line(resolved, platform, world), volume, *notes]:
        if line:
            print(line)


def launcher_line(resolved: ResolvedConfig, platform: Any, world: int) -> str | None:
    """`hardware.launcher` is how the profile expects the job to start. A single process on
    a machine with several GPUs, where the profile expects torchrun or Slurm, uses one of
    them: the line says so, with the command that starts all of them."""
    launcher = resolved.config.hardware.launcher
    gpus = len(getattr(platform, "gpus", None) or ())
    if launcher == "local" or world > 1 or gpus <= 1:
        return None
    config = resolved.path or "CONFIG"
    how = (
        f"trainforge slurm {config} --gpus-per-node {gpus} --submit"
        if launcher == "slurm"
        else f"torchrun --standalone --nproc-per-node {gpus} -m trainforge train {config}"
    )
    return (
        f"launcher: profile {resolved.profile.name} starts this job with {launcher}; this one "
        f"process trains on 1 of {gpus} GPUs (all of them: {how})"
    )


# Above this many train records over a planned run, the start says what the logging costs.
MANY_RECORDS = 10**7
# Bytes on disk per train record, measured on `vit_digits` at logging_steps=1 (11 metrics a
# record; docs/observability.md, "A day of logging_steps=1 on disk"): one metrics.jsonl line,
# and the TensorBoard scalar events of one logged step (framing included).
JSONL_RECORD_BYTES = 450
TENSORBOARD_RECORD_BYTES = 600


def train_records(total_steps: int, logging_steps: int, steps_per_epoch: int) -> int:
    """Train records a run of `total_steps` writes: one every `logging_steps`, one at each
    epoch's end and one at the last step (each step once, `MetricsCallback`'s points)."""
    every, epoch = max(1, logging_steps), max(1, steps_per_epoch)
    both = every * epoch // math.gcd(every, epoch)
    records = total_steps // every + total_steps // epoch - total_steps // both
    return records + (1 if total_steps % every and total_steps % epoch else 0)


def logging_volume_line(config: RunConfig, total_steps: int, steps_per_epoch: int) -> str | None:
    """A warning line when `logging.logging_steps` writes more than `MANY_RECORDS` train
    records over the planned run (the run goes on); else None."""
    from trainforge.storage import size_text

    logging = config.logging
    records = train_records(total_steps, logging.logging_steps, steps_per_epoch)
    if records <= MANY_RECORDS:
        return None
    per_record = JSONL_RECORD_BYTES * logging.jsonl + TENSORBOARD_RECORD_BYTES * logging.tensorboard
    files = (RunFolder(Path()).metrics.name, logging.jsonl), ("TensorBoard", logging.tensorboard)
    where = " and ".join(name for name, on in files if on)
    disk = f" (about {size_text(records * per_record)} in {where})" if per_record else ""
    return (
        f"warning: logging.logging_steps={logging.logging_steps} writes about {records:,} train "
        f"records over {total_steps:,} steps{disk}; "
        + _fewer_records(total_steps, logging.logging_steps, steps_per_epoch)
    )


def _fewer_records(total_steps: int, logging_steps: int, steps_per_epoch: int) -> str:
    """How to stay under `MANY_RECORDS`: a logging_steps that does (each epoch's
    end writes a record too, so with many short epochs none may)."""
    every = max(logging_steps + 1, math.ceil(total_steps / MANY_RECORDS))
    while every < total_steps and train_records(total_steps, every, steps_per_epoch) > (
        MANY_RECORDS
    ):
        every *= 2
    if train_records(total_steps, every, steps_per_epoch) > MANY_RECORDS:
        return (
            f"each of its {total_steps // max(1, steps_per_epoch):,} epochs ends with a record "
            "too: fewer, longer epochs write fewer"
        )
    return f"--set logging.logging_steps={every} or more keeps it under {MANY_RECORDS:,}"


def batch_text(t: Any, world: int) -> str:
    """`batch: 32 x 1 accumulation x 2 processes = 64`: the planned split of the batch;
    `21-22 x 1 accumulation x 3 processes = 64` where its micro-batches differ by one."""
    micro, accumulation = t.per_device_train_batch_size, t.gradient_accumulation_steps
    total = t.global_batch_size or micro * accumulation * world
    smallest = total // (accumulation * world)
    sizes = f"{smallest}-{micro}" if smallest != micro else str(micro)
    processes = f" x {world} processes" if world > 1 else ""
    return f"batch: {sizes} x {accumulation} accumulation{processes} = {total}"


def validation_line(config: RunConfig, loop: Loop) -> str:
    """When validation runs and, for a task that decodes, how many prompts it decodes."""
    from trainforge.engine.callbacks import EvalCadence

    e = config.evaluation
    cadence = EvalCadence(e.eval_steps, e.eval_every_epochs)
    if cadence.by_epoch(loop.steps_per_epoch):
        when = f"every {e.eval_every_epochs} epoch(s)"
        when += f" and every {e.eval_steps} steps" if e.eval_steps else ""
    elif e.eval_steps:
        when = f"every {e.eval_steps} steps and at the end"
        if e.eval_every_epochs:
            when += f" (by step: an epoch is {loop.steps_per_epoch} step(s))"
    else:
        when = "off"
    line = f"validation: {when}"
    dataset = getattr(loop.task.val_loader, "dataset", None)
    decoded = getattr(dataset, "num_generated", 0)
    if decoded:
        line += (
            f"; greedy-decodes {decoded} of {len(dataset)} prompts "
            "(evaluation.generation_samples), all of them at the end"
        )
    return line


def warn_space(folder: RunFolder, config: RunConfig, model: Any, steps_per_epoch: int) -> None:
    """The disk the checkpoints the run keeps will need (one line at start), and a warning
    line when the disk cannot hold them: counted from the run's own steps per epoch, so
    checkpoints by `save_steps` count as the epoch ones do."""
    from trainforge.engine import checkpoint as ckpt
    from trainforge.storage import free_bytes, size_text

    one = ckpt.estimate_bytes(model)
    kept = ckpt.checkpoints_kept(config.checkpoint, config.training, steps_per_epoch) or 1
    free = free_bytes(folder.path)
    print(
        f"disk: checkpoints need about {size_text(one * kept)} ({kept} kept at most x "
        f"{size_text(one)})" + (f", {size_text(free)} free" if free is not None else "")
    )
    line = ckpt.space_warning(folder.path, one, kept)
    if line:
        print(line)


def telemetry(config: RunConfig, platform: Any) -> Any:
    """The run's telemetry sampler, or None (off, or no source on this machine)."""
    if not config.hardware.telemetry:
        return None
    from trainforge.hardware.telemetry import TelemetrySampler, available_sources

    sources, notes = available_sources(platform)
    for note in notes:
        print(note)
    if not sources:
        return None
    # Sampled at logging points, on the training thread: no sampler thread competes with
    # the training threads for the CPU between them.
    return TelemetrySampler(sources, config.hardware.telemetry_interval_s, background=False)


def device_name(platform: Any, device: Any) -> str | None:
    if device.type == "cuda":
        import torch

        return torch.cuda.get_device_name(device)
    return platform.gpus[0].name if platform.gpus else None


def measured_peak_tflops(config: RunConfig, device: Any) -> float | None:
    """The device's measured dense peak in the run's precision (cached), or None when off."""
    if not config.hardware.measure_peak or device.type not in ("cuda", "cpu"):
        return None
    from trainforge.engine.precision import resolve_precision
    from trainforge.hardware.peak_probe import measured_peak

    return measured_peak(device, resolve_precision(config.training.precision, device)).tflops


def peak_tflops(config: RunConfig, platform: Any, device: Any) -> float | None:
    if config.hardware.peak_tflops:
        return config.hardware.peak_tflops
    if device.type != "cuda":
        return None  # CPU peaks vary too much to tabulate; set hardware.peak_tflops
    from trainforge.engine.precision import resolve_precision
    from trainforge.hardware.peaks import platform_peak_tflops

    precision = resolve_precision(config.training.precision, device)
    # On a Jetson the board model names the module (torch calls every Orin GPU "Orin").
    return platform_peak_tflops(platform, device_name(platform, device), precision)
