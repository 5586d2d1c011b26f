"""The resource checks behind `trainforge doctor`: disk for the checkpoints a run keeps,
/dev/shm for loader workers (the DGX Spark plan runs containers with --ipc=host for this), the
profile's memory budget and swap on Jetson (the Jetson training guide). Each is `Context` ->
one `Finding`; `doctor.checks` holds them in its one table with the software and driver
checks."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from trainforge.doctor.finding import Context, Finding
from trainforge.registry import TASKS

if TYPE_CHECKING:
    from trainforge.config import RunConfig

# Docker's default --shm-size (docs.docker.com, `docker run --shm-size`: "default 64MB").
DOCKER_DEFAULT_SHM_BYTES = 64 * 1024**2
# Checkpoint bytes per parameter: fp32 weights (4) + AdamW's exp_avg and exp_avg_sq (4 + 4).
# Checked on a real run: vit_digits (534,410 parameters) writes 6.2 MiB per checkpoint.
CHECKPOINT_BYTES_PER_PARAM = 12
FINAL_MODEL_BYTES_PER_PARAM = 4


def estimate_parameters(config: RunConfig) -> int | None:
    """The model's parameter count, from the real model built on the meta device; None when
    PyTorch or the model builder is unavailable for this config."""
    if getattr(config.model, "arch", None) != "vit":
        return None
    try:
        import torch  # lazy: only when a config asks for the estimate

        from trainforge.config import image_shape
        from trainforge.models.vit import build_vit
    except Exception:
        return None
    side, channels = image_shape(config)
    with torch.device("meta"):
        # The head's class count barely moves the total; 10 is CIFAR-10's and digits'.
        model = build_vit(config.model, image_size=side, channels=channels, num_classes=10)
    return sum(p.numel() for p in model.parameters())


def check_disk(ctx: Context, estimate: Callable[[RunConfig], int | None]) -> Finding:
    facts = ctx.facts
    if facts.disk_free_bytes is None:
        return Finding("disk space", "skip", f"cannot read free space at {facts.disk_path}")
    free_gib = facts.disk_free_bytes / 1024**3
    params = estimate(ctx.config) if ctx.config is not None else None
    if params is None or ctx.config is None:
        return Finding("disk space", "ok", f"{free_gib:.1f} GiB free at {facts.disk_path}")
    from trainforge.engine import checkpoint as ckpt

    config = ctx.config
    # No data is read here: where the count needs the steps per epoch, the run's start
    # line gives it (`run.header.warn_space`).
    kept = ckpt.checkpoints_kept(config.checkpoint, config.training, None)
    if kept is None:
        return Finding(
            "disk space", "ok",
            f"{free_gib:.1f} GiB free at {facts.disk_path}; every save_steps checkpoint is kept "
            "(checkpoint.save_total_limit: null), so the need depends on the data's steps per "
            "epoch: the run's start line says it",
        )  # fmt: skip
    need = params * (CHECKPOINT_BYTES_PER_PARAM * kept + FINAL_MODEL_BYTES_PER_PARAM)
    need_gib = need / 1024**3
    detail = (
        f"{free_gib:.2f} GiB free at {facts.disk_path}; the run needs about {need_gib:.2f} GiB "
        f"({kept} checkpoints of {params * CHECKPOINT_BYTES_PER_PARAM / 1024**2:.0f} MiB)"
    )
    if facts.disk_free_bytes < need:
        return Finding(
            "disk space",
            "problem",
            detail,
            "free space, set output.dir to a bigger disk, or lower checkpoint.save_total_limit",
        )
    return Finding("disk space", "ok", detail)


def check_shm(ctx: Context) -> Finding:
    facts, config = ctx.facts, ctx.config
    if facts.shm_total_bytes is None:
        return Finding("/dev/shm", "skip", "no /dev/shm on this system")
    total_mib = facts.shm_total_bytes / 1024**2
    workers = config.data.dataloader_num_workers if config is not None else 0
    if workers == 0:
        return Finding("/dev/shm", "ok", f"{total_mib:.0f} MiB (no loader workers configured)")
    label = _plural(workers, "loader worker")
    need = _shm_need_bytes(config)
    free = facts.shm_free_bytes if facts.shm_free_bytes is not None else facts.shm_total_bytes
    fix = "run the container with --ipc=host (scripts/run-dgx-container.sh does) or --shm-size"
    if need is not None and need > free:
        return Finding(
            "/dev/shm",
            "problem",
            f"{free / 1024**2:.0f} MiB free; {label} keep about "
            f"{need / 1024**2:.0f} MiB of batches in it (workers crash with a bus error)",
            fix + ", or lower data.dataloader_num_workers",
        )
    if facts.shm_total_bytes <= DOCKER_DEFAULT_SHM_BYTES:
        return Finding(
            "/dev/shm",
            "warn",
            f"{total_mib:.0f} MiB, Docker's default: tight for {label}",
            fix,
        )
    return Finding("/dev/shm", "ok", f"{total_mib:.0f} MiB for {label}")


def _shm_need_bytes(config: RunConfig | None) -> int | None:
    """Batches in flight between loader workers and the trainer, in bytes (uint8 images)."""
    # Only a kind whose batches are images passes uint8 tensors between the workers.
    if config is None or not TASKS.get(config.task.kind).images:
        return None
    from trainforge.config import image_shape

    side, channels = image_shape(config)
    micro = config.training.per_device_train_batch_size
    if micro == "auto":  # fitted at start: at most the global batch it keeps
        from trainforge.config.plan import AUTO_GLOBAL_BATCH

        micro = config.optimizer.reference_batch_size or AUTO_GLOBAL_BATCH
    batch = micro * side * side * channels
    return config.data.dataloader_num_workers * (config.data.prefetch_factor or 2) * batch


def check_memory_budget(ctx: Context) -> Finding:
    facts, config = ctx.facts, ctx.config
    budget = config.hardware.memory_budget_gib if config is not None else None
    if budget is None:
        return Finding("memory budget", "skip", "the profile sets no memory budget")
    gpus = facts.platform.gpus
    if facts.platform.kind in ("jetson", "dgx-spark"):
        have, what = facts.platform.memory_gib, "unified memory"
    elif facts.platform.device == "cuda" and gpus and all(g.memory_gib > 0 for g in gpus):
        have, what = min(g.memory_gib for g in gpus), "GPU memory"
    else:
        have, what = facts.platform.memory_gib, "RAM"
    source = getattr(facts.platform, "memory_source", "host")
    if source != "host" and what != "GPU memory":  # a container's or Slurm job's limit
        what = f"{what} ({source})"
    if budget > have:
        return Finding(
            "memory budget",
            "problem",
            f"profile {config.profile} plans for {budget:g} GiB, this machine has "
            f"{have:.1f} GiB of {what}",
            "use the profile `trainforge detect` picks (profile: auto) or "
            f"--set hardware.memory_budget_gib={math.floor(have)}",
        )
    return Finding("memory budget", "ok", f"{budget:g} GiB of {have:.1f} GiB {what}")


def check_swap(ctx: Context) -> Finding:
    facts = ctx.facts
    if facts.platform.kind != "jetson":
        return Finding("swap", "skip", "checked on Jetson boards only")
    if not facts.swap_total_bytes:
        return Finding(
            "swap",
            "warn",
            "no swap: CPU and GPU share the RAM, so a memory peak kills the run",
            "enable zram (sudo systemctl enable --now nvzramconfig) or add a swap file",
        )
    return Finding("swap", "ok", f"{facts.swap_total_bytes / 1024**3:.1f} GiB")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
