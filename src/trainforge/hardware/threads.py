"""The CPU thread budget of one training process: how many threads torch may use here.

A process that starts as many threads as there are cores competes with every other training
on the machine: two digits runs on 2 cores delivered 0.44x of one run's throughput together.
The budget, first match wins:

1. `training.num_threads` (the run config or `--set training.num_threads=N`): the user's word;
2. `OMP_NUM_THREADS` in the environment (torchrun sets it to 1 per process when it starts
   several, so each rank of a torchrun job keeps the share torchrun gave it);
3. `TRAINFORGE_THREADS`: what the web app hands each training it starts (cores / trainings it
   runs in parallel);
4. otherwise the CPUs this process may use (the tightest of the host's cores, its CPU
   affinity and its cgroup's CPU quota: `hardware.limits`, capped at torch's own default,
   which counts the host's cores whatever the container allows) divided by the trainings
   running on this machine now, counted from small marker files under the temporary folder
   that every `trainforge train` writes for its lifetime.

Considered: threadpoolctl (limits BLAS/OpenMP pools of numpy and scikit-learn, but it does
not know how many trainings share the machine) and counting processes by command line with
psutil (a scan of every process, tens of ms on a busy machine, and fooled by wrappers). A
marker file per live training is one `listdir` and a pid check.
"""

from __future__ import annotations

import atexit
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

THREADS_ENV = "TRAINFORGE_THREADS"


def usable_cores() -> int:
    """CPUs this process may run on: its affinity mask (Slurm, `taskset`) and cgroup quota."""
    from trainforge.hardware.limits import cpu_budget

    return max(1, int(cpu_budget().value))


def _cpu_limit_source() -> str:
    from trainforge.hardware.limits import cpu_budget

    return cpu_budget().source


def _marker_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"trainforge-trainings-{os.getuid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def live_trainings(folder: Path | None = None) -> int:
    """Trainings on this machine with a marker whose process is still alive."""
    folder = folder or _marker_dir()
    count = 0
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    for name in names:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        if _alive(int(name)):
            count += 1
        else:
            (folder / name).unlink(missing_ok=True)  # a training that died without tidying
    return count


def register_training(folder: Path | None = None) -> None:
    """Mark this process as a running training until it exits."""
    folder = folder or _marker_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        marker = folder / str(os.getpid())
        marker.touch()
    except OSError:
        return  # a read-only temp folder only loses the sharing hint
    atexit.register(marker.unlink, missing_ok=True)


def thread_budget(
    num_threads: int | None,
    *,
    env: Mapping[str, str] | None = None,
    cores: int | None = None,
    default_threads: int | None = None,
    others: int = 0,
) -> tuple[int | None, str]:
    """(threads, where the number came from); threads None keeps torch's own default.

    `others` is the number of other trainings running on this machine; `default_threads` is
    torch's default (physical cores), which the budget never exceeds. `cores` below torch's
    default (an affinity set or a CPU quota) bounds the budget even with no other training."""
    env = os.environ if env is None else env
    if num_threads:
        return num_threads, "training.num_threads"
    for name in ("OMP_NUM_THREADS", THREADS_ENV):
        value = env.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value), name
    limited = cores is None
    cores = cores or usable_cores()
    if others <= 0:
        if default_threads and cores < default_threads:
            source = _cpu_limit_source() if limited else "CPU limit"
            return cores, f"{source}: {cores} of {default_threads} cores"
        return None, "all cores (no other training running here)"
    if default_threads:
        cores = min(cores, default_threads)
    share = max(1, cores // (others + 1))
    # The share follows the load, and CPU sums reduce in another order with another count:
    # the line says so and how to pin it, so two runs of one command can be made equal.
    return share, (
        f"{cores} cores / {others + 1} trainings running here; the count follows the load, "
        "pin it with --num_threads N"
    )


def apply_threads(count: int) -> None:
    """Give torch `count` intra-op threads, calling `torch.set_num_threads` only when that
    changes the count. Setting the count torch already has is not free: after an explicit
    `torch.set_num_threads(2)` on a 2-core machine, a small attention forward and backward
    (`scaled_dot_product_attention` on 64x4x5x32) took 2.0 ms instead of 0.55 ms, and the
    digits ViT trained about a fifth slower than a script that never set it."""
    import torch

    if count != torch.get_num_threads():
        torch.set_num_threads(count)


def thread_count(num_threads: int | None, recorded: int | None = None) -> int:
    """Register this process as a training and return its thread budget (printing where it
    came from unless it is torch's own default) for `torch.set_num_threads`.

    `recorded`: the count a resumed run was started with. CPU sums reduce in a different
    order with another thread count, so a resume keeps it (unless the config or the
    environment names one) to stay bitwise equal to an uninterrupted run."""
    import torch

    others = live_trainings()
    register_training()
    threads, source = thread_budget(
        num_threads, others=others, default_threads=torch.get_num_threads()
    )
    if recorded and source not in ("training.num_threads", "OMP_NUM_THREADS", THREADS_ENV):
        threads, source = recorded, "as the run started: an exact resume"
    if threads is None:
        return torch.get_num_threads()
    print(f"cpu threads: {threads} ({source})")
    return threads
