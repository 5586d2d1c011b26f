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
Target: "on" keeps >= 0.98 of "off" (the median of 5 alternating rounds' own ratios).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from common import alternate, median, table, timed

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "engine"))
from conftest import make_config, make_task
from trainforge.config.schema import LoggingConfig
from trainforge.engine.trainer import Trainer
from trainforge.hardware import detect
from trainforge.hardware.telemetry import TelemetrySampler, available_sources
from trainforge.models.vit import VisionTransformer
from trainforge.observe.loggers import JsonlLogger, TensorBoardLogger
from trainforge.observe.reporting import MetricsCallback

TARGET = 0.98
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


def histogram_interval(steps: int) -> int:
    """The default cadence when the run holds it twice, else half the run: at least one
    set always falls inside the timed window."""
    return max(1, min(DEFAULT_HISTOGRAM_STEPS, steps // 2))


def _trainer(
    run_dir: Path, steps: int, observed: bool, batch_size: int
) -> tuple[Trainer, CountingTensorBoardLogger | None]:
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
    callbacks, tensorboard = [], None
    if observed:
        sources, _ = available_sources(detect())
        tensorboard = CountingTensorBoardLogger(run_dir / "tb")
        callbacks.append(
            MetricsCallback(
                [JsonlLogger(run_dir / "metrics.jsonl"), tensorboard],
                LOGGING_STEPS,
                telemetry=TelemetrySampler(sources, 1.0, background=False),
                histogram_steps=histogram_interval(steps),
            )
        )
    trainer = Trainer(task, cfg, run_dir=run_dir, device=torch.device("cpu"), callbacks=callbacks)
    return trainer, tensorboard


def run(steps: int = 1000, repeats: int = 5, batch_size: int = 32) -> tuple[str, dict[str, float]]:
    work = Path(tempfile.mkdtemp(prefix="trainforge-bench-"))
    counter = iter(range(10**6))
    histograms: list[int] = []
    try:

        def go(observed: bool) -> float:
            trainer, tensorboard = _trainer(work / f"r{next(counter)}", steps, observed, batch_size)
            seconds = timed(trainer.fit)
            if tensorboard is not None:
                histograms.append(tensorboard.histograms_written)
            return seconds

        go(False)  # warm-up: imports, allocator
        times = alternate({"off": lambda: go(False), "on": lambda: go(True)}, repeats)
        off, on = median(times["off"]), median(times["on"])
        # The median of each round's own ratio: the two runs of a round are seconds apart,
        # so a slow spell of the host falls on both (engine_overhead.speed_ratio's reasoning).
        ratio = median([a / b for a, b in zip(times["off"], times["on"], strict=True)])
        every = histogram_interval(steps)
        rows = [
            ["off (no callbacks)", f"{steps / off:.1f}", "0", "1.000"],
            [
                "on (timing + telemetry + JSONL + TensorBoard)",
                f"{steps / on:.1f}",
                str(min(histograms)),
                f"{ratio:.3f}",
            ],
        ]
        text = table(
            f"observability cost: ViT 2x64 on 32x32 images, batch {batch_size}, {steps} steps, "
            f"medians of {repeats} alternating rounds, vs off: the median of the rounds' own "
            f"ratios (target >= {TARGET}); weight histograms every "
            f"{every} steps inside the timed window (default {DEFAULT_HISTOGRAM_STEPS}"
            f"{'' if every == DEFAULT_HISTOGRAM_STEPS else ': more often, an upper bound'})",
            ["run", "steps/s", "histogram sets", "vs off"],
            rows,
        )
        return text, {"observability_throughput_ratio": ratio}
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    print(run()[0])
