"""The workload every side trains and the instruments every side is measured with.

- `Workload`: a model factory (the same initial weights on every call), CIFAR-shaped data held
  in memory, batch size, warm-up and timed optimizer steps, device, precision, compile and
  channels-last. `loader()` gives every side the same batches in the same order
  (trainforge's `EpochShuffleSampler` with the workload's seed, one tensor gather per batch).
- `build_optimizer`: AdamW with trainforge's parameter groups (no weight decay on 1-D tensors,
  the class token and the position embeddings) and the implementation (fused or torch's
  per-tensor loop) trainforge's Trainer picks by default, so every side applies the same update.
  Each run records the implementation it stepped and the torch threads it ran with, and the
  same-work check names a side that differs.
- `StepClock`: an optimizer step post-hook, the same code on every side; the timed window runs
  from the end of optimizer step `warmup_steps` to the end of step `warmup_steps + timed_steps`,
  so set-up, compilation and first-step costs stay out of it.
- `measured`: a fresh clock and `common.MemoryMeter` around one run (peak RSS from VmHWM reset
  at the start of the run; on CUDA also the peak memory allocated).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from common import MemoryMeter, PeakMemory
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from trainforge.data.memory import passthrough_collate
from trainforge.data.sampling import EpochShuffleSampler

PROBE_SAMPLES = 256


class InMemoryBatches(Dataset):
    """Images [N,C,H,W] and labels [N] held as tensors; a batch is one gather."""

    def __init__(self, images: Tensor, labels: Tensor) -> None:
        self.images = images
        self.labels = labels

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        return self.images[index], self.labels[index]

    def __getitems__(self, indices: list[int]) -> tuple[Tensor, Tensor]:
        index = torch.as_tensor(indices, dtype=torch.int64)
        if self.images.device.type == "cuda":
            # From pinned memory the copy is queued; from pageable memory it would wait for
            # the GPU, a host synchronisation per batch on every side.
            index = index.pin_memory().to(self.images.device, non_blocking=True)
        return self.images[index], self.labels[index]


class ChannelsLast(nn.Module):
    """Runs the wrapped model on channels-last inputs (the layout fused conv kernels prefer)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.inner = model

    def forward(self, images: Tensor) -> Tensor:
        return self.inner(images.contiguous(memory_format=torch.channels_last))


@dataclass
class Workload:
    name: str
    make_model: Callable[[], nn.Module]
    images: Tensor  # float32 [N,C,H,W], already normalised
    labels: Tensor  # int64 [N]
    batch_size: int
    warmup_steps: int
    timed_steps: int
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    precision: str = "fp32"  # fp32 or bf16 (autocast)
    compile: bool = False
    channels_last: bool = False
    learning_rate: float = 3e-4
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        assert self.warmup_steps >= 1, "the clock starts at the end of a warm-up step"
        assert self.images.shape[0] % self.batch_size == 0, "no short batch: same shapes"

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.timed_steps

    @property
    def timed_samples(self) -> int:
        return self.timed_steps * self.batch_size

    @property
    def fused(self) -> bool | None:
        """The AdamW implementation trainforge's Trainer picks for this workload by default,
        asked of a real Trainer, so every side follows the engine's default when it changes."""
        from peers.trainforge_side import trainforge_adamw_fused

        return trainforge_adamw_fused(self)

    def dataset(self) -> InMemoryBatches:
        return InMemoryBatches(self.images, self.labels)

    def loader(self) -> DataLoader:
        return DataLoader(
            self.dataset(),
            batch_size=self.batch_size,
            sampler=EpochShuffleSampler(len(self.labels), self.seed),
            collate_fn=passthrough_collate,
        )

    def prepare_model(self) -> nn.Module:
        model = self.make_model()
        if self.channels_last:
            model = ChannelsLast(model.to(memory_format=torch.channels_last))
        return model.to(self.device)

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def loss_fn(logits: Tensor, labels: Tensor) -> Tensor:
    """Every side's loss: cross-entropy in fp32, as trainforge's image task computes it."""
    return F.cross_entropy(logits.float(), labels)


def build_optimizer(model: nn.Module, w: Workload, fused: bool | None = None):
    """AdamW with trainforge's groups and a constant LambdaLR stepped once per step."""
    decay = [
        p
        for n, p in model.named_parameters()
        if p.requires_grad and p.ndim >= 2 and "pos_embed" not in n and "cls_token" not in n
    ]
    ids = {id(p) for p in decay}
    no_decay = [p for p in model.parameters() if p.requires_grad and id(p) not in ids]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": w.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=w.learning_rate,
        betas=(0.9, 0.999),
        eps=1e-8,
        fused=w.fused if fused is None else fused,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return optimizer, scheduler


class StepClock:
    """Counts real optimizer steps and times the window after the warm-up."""

    def __init__(self, w: Workload) -> None:
        self.warmup = w.warmup_steps
        self.end = w.total_steps
        self.sync = w.sync
        self.steps = 0
        self.started: float | None = None
        self.stopped: float | None = None
        self.cpu_started = 0.0
        self.cpu_stopped = 0.0
        self.optimizer = "unknown"
        self.threads = 0

    def attach(self, optimizer: torch.optim.Optimizer) -> StepClock:
        optimizer.register_step_post_hook(self)
        self.optimizer = optimizer_kind(optimizer)
        return self

    def __call__(self, optimizer, args, kwargs) -> None:
        self.steps += 1
        if self.steps == self.warmup:
            self.threads = torch.get_num_threads()
            self.sync()
            self.started = time.perf_counter()
            self.cpu_started = time.process_time()
        elif self.steps == self.end:
            self.sync()
            self.stopped = time.perf_counter()
            self.cpu_stopped = time.process_time()

    @property
    def seconds(self) -> float:
        assert self.started is not None and self.stopped is not None, "window not completed"
        return self.stopped - self.started

    @property
    def cpu_seconds(self) -> float:
        """CPU time of the whole process (all threads) over the window."""
        return self.cpu_stopped - self.cpu_started


@dataclass
class SideResult:
    """One training run of one side."""

    seconds: float  # the timed window, wall clock
    cpu_seconds: float  # the timed window, process CPU time
    optimizer_steps: int  # real optimizer.step() calls over the whole run
    probe_loss: float  # loss of the final weights on the first PROBE_SAMPLES samples
    memory: PeakMemory
    optimizer: str = "unknown"  # e.g. "AdamW fused"
    threads: int = 0  # torch intra-op threads at the start of the timed window


@torch.no_grad()
def probe_loss(model: nn.Module, w: Workload) -> float:
    """fp32 loss of `model` on a fixed slice of the data (not part of any timing), on the
    workload's device: Lightning's `fit` hands the model back on the CPU."""
    model.to(w.device)
    was_training = model.training
    model.eval()
    count = min(PROBE_SAMPLES, w.images.shape[0])
    images = w.images[:count].to(w.device)
    loss = loss_fn(model(images), w.labels[:count].to(w.device))
    model.train(was_training)
    return float(loss)


@contextlib.contextmanager
def measured(w: Workload) -> Iterator[tuple[StepClock, MemoryMeter]]:
    """A fresh clock and memory meter around one run."""
    clock = StepClock(w)
    with MemoryMeter(w.device) as memory:
        yield clock, memory


def finish(w: Workload, model: nn.Module, clock: StepClock, memory: MemoryMeter) -> SideResult:
    return SideResult(
        clock.seconds,
        clock.cpu_seconds,
        clock.steps,
        probe_loss(model, w),
        memory.result,
        clock.optimizer,
        clock.threads,
    )


def optimizer_kind(optimizer: torch.optim.Optimizer) -> str:
    fused = optimizer.defaults.get("fused")
    foreach = optimizer.defaults.get("foreach")
    return f"{type(optimizer).__name__} " + (
        "fused" if fused else "foreach" if foreach else "default (per-tensor/foreach by device)"
    )


def same_work_problems(
    w: Workload, runs: dict[str, list[SideResult]], reference: str, rel_tol: float
) -> list[str]:
    """What would make a comparison unfair: a side that did a different number of optimizer
    steps, stepped another AdamW implementation, ran with other torch threads, or ended at a
    different loss than `reference` (same data, weights and update)."""
    problems = set()
    expected = runs[reference][0].probe_loss
    for name, results in runs.items():
        for r in results:
            if not name.startswith("(diag)"):  # diagnostics change one thing on purpose
                if r.optimizer != runs[reference][0].optimizer:
                    problems.add(
                        f"{name}: {r.optimizer}, {reference} {runs[reference][0].optimizer}"
                    )
                if r.threads != runs[reference][0].threads:
                    problems.add(
                        f"{name}: {r.threads} threads, {reference} {runs[reference][0].threads}"
                    )
            if r.optimizer_steps != w.total_steps:
                problems.add(f"{name}: {r.optimizer_steps} optimizer steps, not {w.total_steps}")
            if not math.isclose(r.probe_loss, expected, rel_tol=rel_tol):
                problems.add(f"{name}: final loss {r.probe_loss:.6f}, {reference} {expected:.6f}")
    return sorted(problems)


def same_work_line(w: Workload, runs: dict[str, list[SideResult]], reference: str, rel_tol: float):
    problems = same_work_problems(w, runs, reference, rel_tol)
    initial = probe_loss(w.prepare_model(), w)
    verdict = (
        f"yes (all did {w.total_steps} optimizer steps of {runs[reference][0].optimizer} with "
        f"{runs[reference][0].threads} torch thread(s); final losses within {rel_tol:g} relative)"
        if not problems
        else "NO: " + "; ".join(problems)
    )
    return f"loss before training {initial:.5f}; same work on every side: {verdict}"
