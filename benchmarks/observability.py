"""What observability costs: the same training run with timing + telemetry + the default
loggers (JSONL, TensorBoard with weight histograms) versus with all of it off.

"On" is the default set-up of `trainforge train`: metrics every 50 steps (ViT guide), the
psutil telemetry, read at logging points at most every 1 s here (5x the default rate), as
`trainforge train` samples it (no sampler thread), TensorBoard (its record checksums in C
where google-crc32c is installed, as in the `track` extra) with weight
histograms at their default cadence (`logging.histogram_steps`, 500): the 1000-step timed
run writes two, at steps 500 and 1000, so "on" pays for histograms at the rate a default
run does (a shorter run falls back to one every half run, more often than the default, an
upper bound). The table says how many were written. "Off" has no callbacks at all. The
loop's own timing is always on (two perf_counter reads per micro-batch), so it is in both.

The verdict is the accounted cost of the "on" run: the training thread's time inside the
metrics callback's hooks (the only way observability enters the loop; each hook is timed,
the per-step ones included) plus the CPU time of the helper threads alive during the run
(TensorBoard's writer), over the run's fit time; the median of 5 rounds, target <= 2 %.
The side-by-side ratio ("on" steps/s over "off", the median of the rounds' own ratios) is
printed beside it as information: on the shared 2-core machine a 10 s run of either side
moves by 8 to 15 % from one round to the next (nine rounds of "off" against "on" read
0.86 to 1.20; the process's CPU time moves with the wall clock, and two copies pinned to
one core each, side by side, read 0.93 to 1.07 against each other), so it cannot tell a
1 % cost from a 3 % one. What the accounting leaves out: caches and allocator state the
logging points disturb for the steps after them.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch
from common import alternate, median, table, timed

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "engine"))
from conftest import make_config, make_task
from trainforge.config.schema import LoggingConfig
from trainforge.engine.callbacks import Callback, overrides
from trainforge.engine.trainer import Trainer
from trainforge.hardware import detect
from trainforge.hardware.telemetry import TelemetrySampler, available_sources
from trainforge.models.vit import VisionTransformer
from trainforge.observe.loggers import JsonlLogger, TensorBoardLogger
from trainforge.observe.reporting import MetricsCallback

COST_TARGET = 0.02
EVENTS = [name for name in vars(Callback) if name.startswith("on_")]
DEFAULT_HISTOGRAM_STEPS = LoggingConfig().histogram_steps
LOGGING_STEPS = 50  # the ViT guide's, and trainforge's default


class Images(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 3, 32, 32, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


class CountingTensorBoardLogger(TensorBoardLogger):
    """The default TensorBoard logger, counting the histogram sets it writes."""

    def __init__(self, log_dir: Path) -> None:
        super().__init__(log_dir)
        self.histograms_written = 0

    def log_histograms(self, model: Any, step: int) -> None:
        super().log_histograms(model, step)
        self.histograms_written += 1


def _thread_cpu_s() -> dict[int, float]:
    """CPU seconds of every Python thread but this one, by ident (Linux: the ident is the
    pthread handle `pthread_getcpuclockid` takes)."""
    seconds = {}
    for thread in threading.enumerate():
        if thread is threading.current_thread() or thread.ident is None:
            continue
        try:
            seconds[thread.ident] = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (OSError, ValueError):  # ended between the listing and the read
            continue
    return seconds


class Accounted(Callback):
    """Forwards each event the wrapped callback acts on, timing it on the training thread,
    and adds the CPU time the other Python threads (TensorBoard's writer) spent from the
    start of the fit to the start of its end (whose own wait for the writer is timed)."""

    def __init__(self, inner: Callback) -> None:
        self.inner, self.hook_s, self.threads_s = inner, 0.0, 0.0
        self._threads_at_start: dict[int, float] = {}
        for event in EVENTS:
            if overrides(inner, event):
                setattr(self, event, self._timed(event))  # `listeners` sees only these

    def _timed(self, event: str):
        hook, clock = getattr(self.inner, event), time.perf_counter

        def call(trainer: Trainer, *args: Any) -> None:
            if event == "on_fit_start":
                self._threads_at_start = _thread_cpu_s()
            elif event == "on_fit_end":
                now = _thread_cpu_s()
                self.threads_s += sum(
                    s - self._threads_at_start.get(t, 0.0) for t, s in now.items()
                )
            start = clock()
            hook(trainer, *args)
            self.hook_s += clock() - start

        return call

    @property
    def cost_s(self) -> float:
        return self.hook_s + self.threads_s


def histogram_interval(steps: int) -> int:
    """The default cadence when the run holds it twice, else half the run: at least one
    set always falls inside the timed window."""
    return max(1, min(DEFAULT_HISTOGRAM_STEPS, steps // 2))


def _trainer(
    run_dir: Path, steps: int, observed: bool, batch_size: int
) -> tuple[Trainer, CountingTensorBoardLogger | None, Accounted | None]:
    from torchdata.stateful_dataloader import StatefulDataLoader

    cfg = make_config(
        **{
            "training.max_steps": steps,
            "training.per_device_train_batch_size": batch_size,
            "logging.logging_steps": LOGGING_STEPS,
        }
    )
    task = make_task(n=64, batch_size=batch_size)
    task.train_loader = StatefulDataLoader(Images(batch_size * steps), batch_size=batch_size)
    torch.manual_seed(0)
    task.model = VisionTransformer(
        image_size=32, channels=3, num_classes=10, patch_size=8, embedding_dim=64,
        num_layers=2, num_heads=4, mlp_size=128,
    )  # fmt: skip
    callbacks, tensorboard, accounted = [], None, None
    if observed:
        sources, _ = available_sources(detect())
        tensorboard = CountingTensorBoardLogger(run_dir / "tb")
        accounted = Accounted(
            MetricsCallback(
                [JsonlLogger(run_dir / "metrics.jsonl"), tensorboard],
                LOGGING_STEPS,
                telemetry=TelemetrySampler(sources, 1.0, background=False),
                histogram_steps=histogram_interval(steps),
            )
        )
        callbacks.append(accounted)
    trainer = Trainer(task, cfg, run_dir=run_dir, device=torch.device("cpu"), callbacks=callbacks)
    return trainer, tensorboard, accounted


def run(steps: int = 1000, repeats: int = 5, batch_size: int = 32) -> tuple[str, dict[str, float]]:
    work = Path(tempfile.mkdtemp(prefix="trainforge-bench-"))
    counter = iter(range(10**6))
    histograms: list[int] = []
    shares: list[float] = []  # each "on" run's accounted cost over its fit time
    try:

        def go(observed: bool) -> float:
            run_dir = work / f"r{next(counter)}"
            trainer, tensorboard, accounted = _trainer(run_dir, steps, observed, batch_size)
            seconds = timed(trainer.fit)
            if tensorboard is not None and accounted is not None:
                histograms.append(tensorboard.histograms_written)
                shares.append(accounted.cost_s / seconds)
            return seconds

        go(False)  # warm-up: imports, allocator
        times = alternate({"off": lambda: go(False), "on": lambda: go(True)}, repeats)
        off, on = median(times["off"]), median(times["on"])
        # The median of each round's own ratio: the two runs of a round are seconds apart,
        # so a slow spell of the host falls on both (engine_overhead.speed_ratio's reasoning).
        ratio = median([a / b for a, b in zip(times["off"], times["on"], strict=True)])
        share = median(shares)
        every = histogram_interval(steps)
        rows = [
            ["off (no callbacks)", f"{steps / off:.1f}", "0", "1.000", "-"],
            [
                "on (timing + telemetry + JSONL + TensorBoard)",
                f"{steps / on:.1f}",
                str(min(histograms)),
                f"{ratio:.3f}",
                f"{share * 100:.2f} % ({min(shares) * 100:.2f} to {max(shares) * 100:.2f})",
            ],
        ]
        text = table(
            f"observability cost: ViT 2x64 on 32x32 images, batch {batch_size}, {steps} steps, "
            f"medians of {repeats} alternating rounds; accounted cost: hooks + helper threads' "
            f"CPU over the fit time (target <= {COST_TARGET * 100:.0f} %); vs off: the median "
            f"of the rounds' own ratios, information (its per-round noise here is 8 to 15 %); "
            f"weight histograms every "
            f"{every} steps inside the timed window (default {DEFAULT_HISTOGRAM_STEPS}"
            f"{'' if every == DEFAULT_HISTOGRAM_STEPS else ': more often, an upper bound'})",
            ["run", "steps/s", "histogram sets", "vs off", "accounted cost"],
            rows,
        )
        return text, {"observability_cost_share": share, "observability_throughput_ratio": ratio}
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    print(run()[0])
