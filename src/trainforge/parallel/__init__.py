"""torch.distributed for trainforge: the process group, ranks, and the few collectives the
loop needs. A single-process run never initialises anything here and takes no
distributed code path (`context().enabled` is False).

The environment decides: torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT; `srun` without torchrun sets SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID,
which are mapped onto the same names (MASTER_ADDR/PORT must then come from the job script).
One process per GPU; NCCL on CUDA, Gloo on CPU. Control decisions (stop on a signal, the
time limit, a skipped non-finite step) are agreed over a Gloo group so they never force a
GPU synchronisation.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


_CONTEXT = DistContext()
_CONTROL: Any = None  # a Gloo group for host-side agreement


def context() -> DistContext:
    return _CONTEXT


def env_ranks(env: Mapping[str, str]) -> tuple[int, int, int] | None:
    """(rank, world size, local rank) from torchrun's or Slurm's variables, or None."""
    if "WORLD_SIZE" in env and "RANK" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", "0"))
    if "SLURM_PROCID" in env and int(env.get("SLURM_NTASKS", "1")) > 1 and "MASTER_ADDR" in env:
        return (
            int(env["SLURM_PROCID"]),
            int(env["SLURM_NTASKS"]),
            int(env.get("SLURM_LOCALID", "0")),
        )
    return None


def setup(backend_option: str, device_type: str, timeout_s: float = 600.0) -> DistContext:
    """Join the process group the environment describes; a no-op for a single process."""
    global _CONTEXT, _CONTROL
    ranks = env_ranks(os.environ)
    if ranks is None or ranks[1] <= 1:
        _CONTEXT = DistContext()
        return _CONTEXT
    import torch
    import torch.distributed as dist

    rank, world, local = ranks
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(world))
    os.environ.setdefault("LOCAL_RANK", str(local))
    backend = (
        backend_option
        if backend_option != "auto"
        else ("nccl" if device_type == "cuda" else "gloo")
    )
    if device_type == "cuda":
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group(
            backend=backend, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s)
        )
    _CONTROL = dist.new_group(backend="gloo") if backend != "gloo" else dist.group.WORLD
    _CONTEXT = DistContext(rank, world, local, backend)
    return _CONTEXT


def teardown() -> None:
    global _CONTEXT, _CONTROL
    if _CONTEXT.enabled:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    _CONTEXT, _CONTROL = DistContext(), None


def agree_any(flag: bool) -> bool:
    """True on every rank when it is True on any rank (host-side, over Gloo)."""
    return bool(agree_max(1 if flag else 0))


def agree_max(value: int) -> int:
    """The largest of every rank's `value`, on every rank (host-side, over Gloo)."""
    if not _CONTEXT.enabled:
        return value
    import torch
    import torch.distributed as dist

    tensor = torch.tensor([int(value)], dtype=torch.int64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=_CONTROL)
    return int(tensor.item())


def all_reduce_sum(tensor: Any) -> Any:
    """Sum a tensor over ranks in place (on its own device's backend); returns it."""
    if _CONTEXT.enabled:
        import torch.distributed as dist

        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's `obj`, in rank order, on every rank (small, picklable plain data)."""
    if not _CONTEXT.enabled:
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * _CONTEXT.world_size
    dist.all_gather_object(out, obj, group=_CONTROL)
    return out


def barrier() -> None:
    if _CONTEXT.enabled:
        import torch.distributed as dist

        dist.barrier(group=_CONTROL)
