"""torch.distributed for trainforge: the process group, ranks, and the few collectives the
loop needs. A single-process run never initialises anything here and takes no
distributed code path (`context().enabled` is False).

The environment decides: torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT; `srun` without torchrun sets SLURM_PROCID / SLURM_STEP_NUM_TASKS (and
SLURM_NTASKS) / SLURM_LOCALID, which are mapped onto the same names. The rendezvous address is
then MASTER_ADDR when the job script exported it, else the first node of the step's (or
job's) node list, on the port the rendered job script uses (20000 + job id % 12000).
One process per GPU; NCCL on CUDA, Gloo on CPU. Control decisions (stop on a signal, the
time limit, a skipped non-finite step) are agreed over a Gloo group so they never force a
GPU synchronisation. `teardown` leaves the group with nothing of it left for interpreter exit;
`failure_line` makes a failed job end in one line naming the rank that failed and why (the
failing rank records its reason in the rendezvous store, its peers read it there).

The first host of a Slurm node list is parsed here by hand: `scontrol show hostnames` needs
the Slurm binaries on the compute node's PATH and a process per call, and the
python-hostlist package expands whole lists to take one name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from trainforge.errors import UserError
from trainforge.parallel import heartbeat


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None
    timeout_s: float = 600.0  # how long a collective waits for a silent peer

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


# Rendezvous port under Slurm = PORT_BASE + job id % PORT_SPAN: 20000-31999, above the
# registered ports and below Linux's ephemeral range (32768+). The job script that
# `trainforge slurm` renders exports the same port (trainforge.launch.slurm).
PORT_BASE = 20000
PORT_SPAN = 12000

_CONTEXT = DistContext()
_CONTROL: Any = None  # a Gloo group for host-side agreement


def context() -> DistContext:
    return _CONTEXT


def env_ranks(env: Mapping[str, str]) -> tuple[int, int, int] | None:
    """(rank, world size, local rank) from torchrun's or Slurm's variables, or None."""
    if "WORLD_SIZE" in env and "RANK" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", "0"))
    # Only a task of an srun step is one of several ranks: srun sets SLURM_STEP_NUM_TASKS
    # (and SLURM_NTASKS to the same count), while the batch script itself also sees
    # SLURM_PROCID=0 and the job's SLURM_NTASKS but no step variables, and must stay one
    # process rather than wait for peers that never start.
    if "SLURM_PROCID" in env and env.get("SLURM_STEP_NUM_TASKS"):
        world = int(env["SLURM_STEP_NUM_TASKS"])  # `srun -E` keeps the job's SLURM_NTASKS
        if world > 1:
            return int(env["SLURM_PROCID"]), world, int(env.get("SLURM_LOCALID", "0"))
    return None


def first_host(nodelist: str) -> str:
    """The first node of a Slurm host list: `gpu[03-04,07],cpu1` -> `gpu03`."""
    depth = 0
    for index, char in enumerate(nodelist):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            nodelist = nodelist[:index]
            break
    return re.sub(r"\[([^\]]*)\]", lambda m: re.split("[,-]", m.group(1))[0], nodelist.strip())


def rendezvous_env(env: Mapping[str, str]) -> dict[str, str]:
    """MASTER_ADDR and MASTER_PORT for the process group: the environment's own, else (under
    Slurm) the first node of the node list and the port derived from the job id."""
    out = {key: env[key] for key in ("MASTER_ADDR", "MASTER_PORT") if env.get(key)}
    if "MASTER_ADDR" not in out:
        nodes = next(
            (env[k] for k in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
             if env.get(k)),
            None,
        )  # fmt: skip
        if nodes is None:
            raise UserError(
                "no rendezvous address: MASTER_ADDR is not set and there is no Slurm node list",
                "launch with torchrun, or export MASTER_ADDR and MASTER_PORT before srun",
            )
        out["MASTER_ADDR"] = first_host(nodes)
    if "MASTER_PORT" not in out:
        job_id = env.get("SLURM_JOB_ID", "")
        if not job_id.isdigit():
            raise UserError(
                "no rendezvous port: MASTER_PORT is not set and SLURM_JOB_ID is missing",
                "export MASTER_PORT before srun, or launch with torchrun",
            )
        out["MASTER_PORT"] = str(PORT_BASE + int(job_id) % PORT_SPAN)
    return out


def choose_backend(option: str, device_type: str) -> str:
    """`auto` is NCCL on CUDA and Gloo otherwise; NCCL is refused off CUDA (it has no CPU
    tensors), in one line rather than a failure at the first all-reduce."""
    if option == "auto":
        return "nccl" if device_type == "cuda" else "gloo"
    if option == "nccl" and device_type != "cuda":
        raise UserError(
            f"hardware.distributed_backend is nccl but the device is {device_type}",
            "set hardware.distributed_backend=gloo (or auto) for CPU processes",
        )
    return option


def group_backend(backend: str) -> str:
    """The default group's backend string: NCCL for CUDA tensors with Gloo beside it for CPU
    ones, so that a small CPU tensor (a meter's sums, a checkpoint's plan) reduces over the
    same group instead of failing with "No backend type associated with device type cpu"."""
    return "cpu:gloo,cuda:nccl" if backend == "nccl" else backend


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
    backend = choose_backend(backend_option, device_type)
    if device_type == "cuda":
        visible = torch.cuda.device_count()
        if local >= visible:
            raise UserError(
                f"local rank {local} needs CUDA device cuda:{local}, but this node shows {visible}",
                "start one process per GPU (torchrun --nproc-per-node), or train these "
                "processes on CPU with --set training.device=cpu",
            )
        torch.cuda.set_device(local)
    for key, value in {"RANK": rank, "WORLD_SIZE": world, "LOCAL_RANK": local}.items():
        os.environ.setdefault(key, str(value))
    os.environ.update(rendezvous_env(os.environ))
    if not dist.is_initialized():
        dist.init_process_group(
            backend=group_backend(backend), rank=rank, world_size=world,
            timeout=timedelta(seconds=timeout_s),
        )  # fmt: skip
    _CONTROL = dist.new_group(backend="gloo") if backend != "gloo" else dist.group.WORLD
    _CONTEXT = DistContext(rank, world, local, backend, timeout_s)
    try:
        store = _store()
    except Exception:  # no store to beat through (a process group without one)
        store = None
    if store is not None:
        heartbeat.start(store, rank, interval_s=min(5.0, max(0.5, timeout_s / 10)))
    return _CONTEXT


def teardown() -> None:
    """Leave the process group with nothing of it left for interpreter exit.

    A finished run's Trainer, its DDP (or FSDP) module and the DDP reducer sit in reference
    cycles: they outlive `train()` until the cyclic garbage collector runs, and with them the
    Gloo process group and the last Work objects of the gradient all-reduce, which hold
    tensors. Destroying the group first and leaving those to interpreter finalization lets
    Gloo's C++ side release Python tensors while the interpreter is being torn down, which
    aborts the process (SIGABRT), now and then, depending on when the collector last ran.
    So the cycles are collected here, while the group and the interpreter are whole, and only
    then is the group destroyed. When an exception is on its way out, the frames of its
    traceback (and of the errors it replaced) would keep the trainer alive: their locals are
    cleared first (the traceback still prints).
    """
    global _CONTEXT, _CONTROL
    heartbeat.stop()
    if _CONTEXT.enabled:
        import gc
        import sys
        import traceback

        import torch.distributed as dist

        error, seen = sys.exc_info()[1], set()
        while error is not None and id(error) not in seen:  # with the errors it replaced
            seen.add(id(error))
            if error.__traceback__ is not None:
                traceback.clear_frames(error.__traceback__)
            error = error.__cause__ or error.__context__
        gc.collect()
        if dist.is_initialized():
            dist.destroy_process_group()
        gc.collect()
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


# ------------------------------------------------------------------- a rank that fails
# Where a failing rank leaves its one-line reason: the rendezvous store (torchrun's agent
# holds it, so it outlives any training process), read by the ranks that lost their peer.
FAILURE_KEY = "trainforge/failed/{rank}"
# Errors that say "a peer went away", not what went wrong on that peer.
PEER_LOSS = ("connection closed by peer", "connection reset by peer", "broken pipe",
             "timed out", "timeout", "socket", "nccl", "gloo")  # fmt: skip


def _store() -> Any:
    from torch.distributed.distributed_c10d import _get_default_store

    return _get_default_store()


def is_peer_loss(err: BaseException) -> bool:
    """True for a collective that failed because another rank stopped or lost contact."""
    if isinstance(err, UserError):
        return False
    import torch.distributed as dist

    if isinstance(err, dist.DistError):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and any(mark in text for mark in PEER_LOSS)


def record_failure(reason: str) -> None:
    """Leave this rank's reason where the other ranks can read it (best effort: when the
    store is gone with its host, the other ranks say that contact was lost)."""
    if not _CONTEXT.enabled:
        return
    try:
        _store().set(FAILURE_KEY.format(rank=_CONTEXT.rank), reason)
    except Exception:  # any store error: nothing more to do on the way out
        return


def failure_reports(wait_s: float = 1.0) -> dict[int, str]:
    """{rank: reason} that other ranks left, waiting up to `wait_s` s for the first one. A
    failing rank records its reason before it leaves the group, and its peers' collectives
    fail only when it has left, so the reason is normally there at the first look."""
    import time

    if not _CONTEXT.enabled:
        return {}
    keys = {r: FAILURE_KEY.format(rank=r) for r in range(_CONTEXT.world_size)}
    keys.pop(_CONTEXT.rank)
    deadline = time.monotonic() + wait_s
    try:
        store = _store()
        while True:
            found = {r: store.get(k).decode() for r, k in keys.items() if store.check([k])}
            if found or time.monotonic() >= deadline:
                return found
            time.sleep(0.1)
    except Exception:  # the store went with its host
        return {}


def failure_line(err: BaseException, wait_s: float = 1.0, resume: str | None = None) -> str | None:
    """The one line this rank prints for `err`, or None when another rank speaks for it.

    The rank where the error happened names itself and the reason (and records it); a rank
    whose collective failed because a peer went away stays silent when that peer recorded
    why; otherwise (a peer killed by a signal or out of memory records nothing) the first
    surviving rank to get there says so, with what the collective reported and `resume`,
    the command that continues the run (its run folder's `trainforge train --resume ...`).
    """
    text = err.line() if isinstance(err, UserError) else str(err).strip()
    first = text.splitlines()[0][:300] if text else type(err).__name__
    rank = _CONTEXT.rank
    if not is_peer_loss(err):
        record_failure(first)
        return f"rank {rank}: {first}"
    if failure_reports(wait_s):
        return None
    timed_out = "timed out" in text.lower() or "timeout" in text.lower()
    silent = _silent_line(resume) if timed_out else None
    if silent is not None:
        record_failure(silent)
        return f"rank {rank}: {silent}"
    if not _first_to_speak():
        return None
    return (
        f"rank {rank}: the distributed job failed: another rank stopped without reporting an "
        f"error (killed by a signal or out of memory?) ({first}). the launcher's exit codes "
        f"above name it; rerun with {f'`{resume}`' if resume else '--resume auto'}"
    )


def _silent_line(resume: str | None) -> str | None:
    """The line naming the ranks whose heartbeats stopped (a hung or stopped peer), or None
    when every peer still beats (it died or left: its exit code says more)."""
    timeout_s = _CONTEXT.timeout_s
    try:
        silent = heartbeat.silent_ranks(
            _store(), _CONTEXT.world_size, _CONTEXT.rank, stale_s=timeout_s / 2
        )
    except Exception:  # no store: nothing to read
        return None
    if not silent:
        return None
    names = ", ".join(str(r) for r in silent)
    return (
        f"rank {names} stopped answering: no sign of life for over {timeout_s / 2:g} s and the "
        f"collective waited hardware.distributed_timeout_s = {timeout_s:g} s (a stopped "
        "process, a debugger, a hung device); the last checkpoint is intact: end that rank, "
        f"then continue with {f'`{resume}`' if resume else '--resume auto'}"
    )


def _first_to_speak() -> bool:
    """True on exactly one of the ranks that lost a silent peer (True where the store is gone
    too: each survivor then speaks for itself)."""
    try:
        return int(_store().add("trainforge/lost-peer-speaker", 1)) == 1
    except Exception:  # the store went with its host
        return True
