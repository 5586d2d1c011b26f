"""What observability costs: the same training run with timing + telemetry + the default
loggers (JSONL, TensorBoard with weight histograms) versus with all of it off.

"On" is the default set-up of `trainforge train`: metrics every 50 steps (ViT guide), the
psutil telemetry sampler (every 1 s here, 5x the default rate), TensorBoard histograms every
500 steps. "Off" has no callbacks at all. The loop's own timing is always on (it is two
perf_counter reads per micro-batch), so it is in both. Target: "on" keeps >= 0.98 of "off".
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import torch
from common import alternate, median, table, timed

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "engine"))
from conftest import make_config, make_task
from trainforge.engine.trainer import Trainer
from trainforge.hardware import detect
from trainforge.hardware.telemetry import TelemetrySampler, available_sources
from trainforge.models.vit import VisionTransformer
from trainforge.observe.loggers import JsonlLogger, TensorBoardLogger
from trainforge.observe.reporting import MetricsCallback

TARGET = 0.98


class Images(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 3, 32, 32, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def _trainer(run_dir: Path, steps: int, observed: bool) -> Trainer:
    from torchdata.stateful_dataloader import StatefulDataLoader

    cfg = make_config(
        **{
            "training.max_steps": steps,
            "training.per_device_train_batch_size": 32,
            "logging.logging_steps": 50,
        }
    )
    task = make_task(n=64, batch_size=32)
    task.train_loader = StatefulDataLoader(Images(32 * steps), batch_size=32)
    torch.manual_seed(0)
    task.model = VisionTransformer(
        image_size=32, channels=3, num_classes=10, patch_size=8, embedding_dim=64,
        num_layers=2, num_heads=4, mlp_size=128,
    )  # fmt: skip
    callbacks = []
    if observed:
        sources, _ = available_sources(detect())
        callbacks.append(
            MetricsCallback(
                [JsonlLogger(run_dir / "metrics.jsonl"), TensorBoardLogger(run_dir / "tb")],
                50,
                telemetry=TelemetrySampler(sources, 1.0),
                histogram_steps=500,
            )
        )
    return Trainer(task, cfg, run_dir=run_dir, device=torch.device("cpu"), callbacks=callbacks)


def run(steps: int = 300, repeats: int = 3) -> tuple[str, dict[str, float]]:
    work = Path(tempfile.mkdtemp(prefix="trainforge-bench-"))
    counter = iter(range(10**6))
    try:

        def go(observed: bool) -> float:
            trainer = _trainer(work / f"r{next(counter)}", steps, observed)
            return timed(trainer.fit)

        go(False)  # warm-up: imports, allocator
        times = alternate({"off": lambda: go(False), "on": lambda: go(True)}, repeats)
        off, on = median(times["off"]), median(times["on"])
        ratio = off / on
        rows = [
            ["off (no callbacks)", f"{steps / off:.1f}", "1.000"],
            ["on (timing + telemetry + JSONL + TensorBoard)", f"{steps / on:.1f}", f"{ratio:.3f}"],
        ]
        text = table(
            f"observability cost: ViT 2x64 on 32x32 images, batch 32, {steps} steps, "
            f"median of {repeats} (target on/off >= {TARGET})",
            ["run", "steps/s", "vs off"],
            rows,
        )
        return text, {"observability_throughput_ratio": ratio}
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    print(run()[0])
