"""Memory probes for the automatic batch fit: one real training step per micro-batch.

A `StepRunner` runs forward, backward and an optimizer step (the run's own optimizer and
parameter groups, `optimizers.build_optimizer`) of the task's own model on batches of the
task's own training data (the longest examples first for text, whose peak is set by its
longest batch), without torch.compile. A meter measures each step's peak:

- CUDA (a discrete GPU): the caching allocator's peak reserved bytes; an out-of-memory
  step is caught, the cache emptied, and the size counts as not fitting.
- Unified memory (Jetson, DGX Spark): the GPU allocator's peak reserved bytes plus the
  process's resident host memory, against `hardware.memory_budget_gib` (and what the
  system has available). Running out here wakes the kernel's OOM killer, so the search
  extrapolates and never runs a size predicted to exceed the budget. Where the driver also
  maps GPU memory into the process's resident set it is counted twice: on the safe side.
- CPU: the process's peak resident memory (Linux: VmHWM, reset before each step through
  /proc/self/clear_refs), against the budget if set, else the available RAM (psutil), never
  above a container's or Slurm job's cgroup limit (`hardware.limits`).

The probe works on a throwaway task built from the same config by the caller's task builder
(the train entry passes `trainforge.tasks.build_task`: the engine imports no task); the run
then seeds its RNGs and builds its task again, so it starts from exactly the weights, data
order and RNG state of a run configured with the fitted numbers directly.
"""

from __future__ import annotations

import contextlib
import gc
import io
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from trainforge.config.plan import BatchPlan, plan_accumulation
from trainforge.config.schema import RunConfig
from trainforge.engine.batch_fit import (
    GIB,
    FitSearch,
    OutOfMemory,
    fit_line,
    no_fit_error,
    search_micro_batch,
)
from trainforge.engine.optimizers import build_optimizer
from trainforge.engine.precision import PrecisionPlan
from trainforge.engine.prepare import prepare_model

UNIFIED_KINDS = ("jetson", "dgx-spark")


class StepRunner:
    """One full training step of a task at any micro-batch size."""

    def __init__(self, task: Any, config: RunConfig, device: torch.device) -> None:
        t = config.training
        self.task, self.device = task, device
        # The run's own model preparation (device, channels-last, gradient checkpointing),
        # without the data-parallel wrapping a one-process probe has no use for.
        self.model = prepare_model(task.model, config, device, wrap=False).model
        self.model.train()
        self.precision = PrecisionPlan.create(t.precision, device)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.param_bytes = sum(p.numel() * p.element_size() for p in params)
        # The run's own optimizer and parameter groups (`optimizer.name`), so the probe
        # holds the optimizer state the run will hold.
        self.optimizer = build_optimizer(self.model, config.optimizer, device)
        loader = task.train_loader
        self.dataset, self.collate = loader.dataset, loader.collate_fn
        self.order = _longest_first(self.dataset)

    def batch(self, size: int) -> Any:
        n = len(self.order)
        indices = [self.order[i % n] for i in range(size)]
        getitems = getattr(self.dataset, "__getitems__", None)
        data = getitems(indices) if getitems else [self.dataset[i] for i in indices]
        return self.task.to_device(self.collate(data), self.device, True)

    def __call__(self, size: int) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        batch = self.batch(size)
        with self.precision.autocast():
            out = self.task.step(self.model, batch)
        (out.loss.float() * out.weight).backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def close(self) -> None:
        """Free the throwaway model and optimizer state; peaks start afresh for the run."""
        self.optimizer.zero_grad(set_to_none=True)
        self.optimizer.state.clear()
        del self.model, self.optimizer, self.task, self.dataset
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
        _reset_host_peak()


def _longest_first(dataset: Any) -> list[int]:
    examples = getattr(dataset, "examples", None)  # token datasets: rows of varying length
    if examples is not None and all(hasattr(e, "input_ids") for e in examples[:1]):
        return sorted(range(len(examples)), key=lambda i: -len(examples[i].input_ids))
    return list(range(len(dataset)))


# --------------------------------------------------------------------------- meters
def _host_rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def _host_available() -> int:
    """Memory this process may still allocate: the host's available memory, or less where a
    cgroup limit (container, Slurm `--mem`) leaves less."""
    import psutil

    from trainforge.hardware.limits import memory_available

    return int(memory_available(psutil.virtual_memory().available))


def _reset_host_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident size (Linux >= 4.0)
        return True
    except OSError:
        return False


def _host_peak() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def host_step_peak(run: Callable[[], None]) -> int:
    """The process's peak resident bytes while `run` runs (after it, where no peak exists)."""
    gc.collect()
    resettable = _reset_host_peak()
    run()
    peak = _host_peak() if resettable else None
    return max(peak or 0, _host_rss())


def cuda_step_peak(run: Callable[[], None], device: torch.device) -> int:
    """Peak bytes the CUDA caching allocator reserved while `run` ran; OutOfMemory if it
    ran out. The cache is emptied first so every size starts from the same state."""
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    failed = False
    try:
        run()
        torch.cuda.synchronize(device)
    except torch.OutOfMemoryError:
        failed = True  # leave the except block first: its traceback holds the step's tensors
    if failed:
        gc.collect()
        torch.cuda.empty_cache()
        raise OutOfMemory
    return int(torch.cuda.max_memory_reserved(device))


def _host_budget(held: int) -> int:
    """What this process holds plus what it may still allocate, never above the memory the
    machine gives it: the resident size counts shared library pages that another cgroup was
    charged for, so held + available alone can exceed a container's limit."""
    import psutil

    from trainforge.hardware.limits import memory_budget

    limit = memory_budget(psutil.virtual_memory().total).value
    return int(min(_host_available() + held, limit))


def _host_how(what: str) -> str:
    """`what`, naming the cgroup limit that bounds it in a container or a Slurm job."""
    import psutil

    from trainforge.hardware.limits import memory_budget

    source = memory_budget(psutil.virtual_memory().total).source
    return what if source == "host" else f"{what}, {source}"


def _limit(configured_gib: float | None, have: int) -> int:
    return min(int(configured_gib * GIB), have) if configured_gib else have


def meter(
    runner: StepRunner, platform: Any, device: torch.device, budget_gib: float | None
) -> tuple[Callable[[int], int], int, int, bool, str]:
    """(probe, budget bytes, baseline bytes, predict, what the budget is)."""
    if device.type == "cuda" and getattr(platform, "kind", None) not in UNIFIED_KINDS:
        _, total = torch.cuda.mem_get_info(device)
        budget = _limit(budget_gib, int(total))

        def cuda_probe(size: int) -> int:
            return cuda_step_peak(lambda: runner(size), device)

        return cuda_probe, budget, int(torch.cuda.memory_reserved(device)), False, "CUDA"
    if device.type == "cuda":
        held = _host_rss() + int(torch.cuda.memory_reserved(device))
        budget = _limit(budget_gib, _host_budget(held))

        def unified_probe(size: int) -> int:
            gpu = cuda_step_peak(lambda: runner(size), device)
            return gpu + _host_rss()

        return unified_probe, budget, held, True, _host_how("unified memory")
    if device.type == "cpu":
        held = _host_rss()
        budget = _limit(budget_gib, _host_budget(held))

        def cpu_probe(size: int) -> int:
            return host_step_peak(lambda: runner(size))

        return cpu_probe, budget, held, True, _host_how("CPU RAM")
    from trainforge.errors import UserError

    raise UserError(
        f"training.per_device_train_batch_size = auto is not supported on {device.type}",
        "set an integer micro-batch, e.g. --set training.per_device_train_batch_size=32",
    )


def fit(
    config: RunConfig,
    platform: Any,
    device: torch.device,
    *,
    target: int,
    world_size: int,
    build_task: Callable[[RunConfig, torch.device], Any],
    log: Callable[[str], None] = print,
) -> tuple[FitSearch, str]:
    """Build a throwaway task with `build_task(config, device)`, search the largest
    micro-batch, free everything again."""
    from trainforge.engine.state import capture_rng, restore_rng, seed_everything

    t = config.training
    probe_config = config.model_copy(
        update={"training": t.model_copy(update={"per_device_train_batch_size": 1})}
    )
    rng = capture_rng()
    seed_everything(t.seed)
    with contextlib.redirect_stdout(io.StringIO()):  # the run prints these facts itself
        # With the device, an in-memory data set is held there as in the run, and counted.
        task = build_task(probe_config, device)
    per_rank = math.ceil(task.num_train_samples / world_size)
    cap = max(1, min(math.ceil(target / world_size), per_rank))
    runner = StepRunner(task, config, device)
    del task
    try:
        probe, budget, baseline, predict, how = meter(
            runner, platform, device, config.hardware.memory_budget_gib
        )
        if world_size > 1 and config.hardware.data_parallel == "ddp":
            probe = _plus(probe, runner.param_bytes)  # DDP's gradient buckets
        search = search_micro_batch(
            probe,
            budget_bytes=budget,
            cap=cap,
            margin=t.batch_fit_margin,
            predict=predict,
            baseline_bytes=baseline,
            log=log,
        )
    finally:
        runner.close()
        restore_rng(rng)
    if world_size > 1:
        from trainforge import parallel

        smallest = min(parallel.gather_objects(search.micro_batch))
        if smallest != search.micro_batch:
            peaks = {size: peak for size, peak, _ in search.tried}
            search = replace(search, micro_batch=smallest, peak_bytes=peaks.get(smallest))
    return search, how


def _plus(probe: Callable[[int], int], extra: int) -> Callable[[int], int]:
    return lambda size: probe(size) + extra


def fit_auto_batch(
    resolved: Any,
    platform: Any,
    device: Any,
    *,
    build_task: Callable[[Any, Any], Any],
    log: Callable[[str], None] = print,
) -> tuple[BatchPlan, str]:
    """(the micro-batch, accumulation and global batch that fit, the line to print at start)
    for a config with `training.per_device_train_batch_size: auto`; the config itself is
    not touched (`trainforge.config.plan.apply_batch_plan` applies the numbers).

    `build_task(config, device)` builds the throwaway task the memory probe trains (the
    train entry passes `trainforge.tasks.build_task`). The effective batch kept is the
    plan's `training.global_batch_size` (the recipe's; see `trainforge.config.plan`)."""
    from trainforge import parallel
    from trainforge.config.plan import effective_batch

    world = parallel.context().world_size
    target = resolved.config.training.global_batch_size
    if target is None:  # a config that was never planned (library use)
        target = effective_batch(resolved)
    search, how = fit(
        resolved.config,
        platform,
        device,
        target=target,
        world_size=world,
        build_task=build_task,
        log=log,
    )
    if search.micro_batch < 1:
        raise no_fit_error(search, how)
    plan = plan_accumulation(search.micro_batch, target, world)
    return plan, fit_line(plan, search, how)
