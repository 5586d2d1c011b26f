"""How long the training loop stalls for a checkpoint, side by side in one run.

- plain torch.save: the whole training state (model, optimizer, RNG, loader position)
  written synchronously with `torch.save` and fsync, as a hand-written loop would;
- trainforge, sync: `Trainer.save_checkpoint` with `checkpoint.async_save=false`
  (safetensors + manifest + fsync + atomic rename);
- trainforge, default: the state is copied to CPU memory and written on a background thread;
  the stall is only the copy.
Target: the default stalls at most 0.25x the plain synchronous save.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "engine"))
from common import alternate, measure_memory, median, memory_note, table, timed

from conftest import make_config, make_task
from trainforge.engine.state import capture_rng
from trainforge.engine.trainer import Trainer

TARGET = 0.25


def _trainer(run_dir: Path, width: int, async_save: bool) -> Trainer:
    cfg = make_config(**{"training.max_steps": 2, "checkpoint.async_save": async_save})
    task = make_task(n=64, batch_size=16)
    task.model = nn.Sequential(nn.Linear(8, width), nn.Tanh(), nn.Linear(width, width),
                               nn.Tanh(), nn.Linear(width, 3))  # fmt: skip
    trainer = Trainer(task, cfg, run_dir=run_dir, device=torch.device("cpu"), callbacks=[])
    trainer.fit()  # optimizer moments exist, as in a real checkpoint
    return trainer


def run(width: int = 2048, repeats: int = 5) -> tuple[str, dict[str, float]]:
    work = Path(tempfile.mkdtemp(prefix="trainforge-bench-"))
    try:
        background = _trainer(work / "bg", width, True)
        inline = _trainer(work / "sync", width, False)
        params = sum(p.numel() for p in background.model.parameters())

        def plain() -> float:
            def save():
                path = work / "plain.pt"
                state = {
                    "model": background.model.state_dict(),
                    "optimizer": background.optimizer.state_dict(),
                    "scheduler": background.scheduler.state_dict(),
                    "loader": background.task.train_loader.state_dict(),
                    "rng": capture_rng(),
                }
                with path.open("wb") as fh:
                    torch.save(state, fh)
                    fh.flush()
                    os.fsync(fh.fileno())

            return timed(save)

        def trainforge_sync() -> float:
            return timed(lambda: inline.save_checkpoint("checkpoint-1"))

        def trainforge_default() -> float:
            stall = timed(lambda: background.save_checkpoint("checkpoint-1"))
            background.writer.wait()  # not part of the stall: the loop would be training
            return stall

        cases = alternate(
            {
                name: (lambda fn=fn: measure_memory(fn))
                for name, fn in {
                    "plain torch.save (sync)": plain,
                    "trainforge, async_save=false": trainforge_sync,
                    "trainforge default (background)": trainforge_default,
                }.items()
            },
            repeats,
        )
        times = {name: [seconds for seconds, _ in runs] for name, runs in cases.items()}
        base = median(times["plain torch.save (sync)"])
        rows = [
            [
                name,
                f"{median(t) * 1000:.1f} ms",
                f"{median(t) / base:.3f}x",
                f"{median([m.rss_mib for _, m in cases[name]]):,.0f}",
                f"+{median([m.rss_growth_mib for _, m in cases[name]]):,.0f}",
            ]
            for name, t in times.items()
        ]
        ratio = median(times["trainforge default (background)"]) / base
        state_mb = params * 3 * 4 / 2**20
        text = table(
            f"checkpoint stall: MLP {params / 1e6:.1f}M params, ~{state_mb:.0f} MB state, "
            f"median of {repeats} (target <= {TARGET}x)",
            ["save", "loop stall", "vs plain", "peak RSS MiB", "+MiB"],
            rows,
        )
        text += (
            "\n"
            + memory_note(cases["plain torch.save (sync)"][0][1])
            + (
                "; the background case includes the write on its thread "
                "(waited for after the stall)"
            )
        )
        return text, {"checkpoint_stall_ratio": ratio}
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    print(run()[0])
