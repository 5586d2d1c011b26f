"""How long the training loop stalls for a checkpoint, side by side in one run.

- plain torch.save: the whole training state (model, optimizer, RNG, loader position)
  written synchronously with `torch.save` and fsync, as a hand-written loop would;
- trainforge, sync: `Trainer.save_checkpoint` with `checkpoint.async_save=false`
  (safetensors weights + weights-only state, sha256 manifest computed while writing, fsync,
  atomic rename, rotation);
- trainforge, default: the state is copied to CPU memory and written on a background thread;
  the stall is only the copy.
Targets: the synchronous save within 1.5x of the plain one (`checkpoint_sync_ratio`), the
background stall at most 0.05x of it (`checkpoint_stall_ratio`). Memory: the peak RSS
columns, and the CPU copy each path keeps between saves (the background path's reused
buffers).
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
from trainforge.engine import checkpoint_write as cw
from trainforge.engine.checkpoint_write import tensor_bytes
from trainforge.engine.state import capture_rng
from trainforge.engine.trainer import Trainer

SYNC_TARGET = 1.5
STALL_TARGET = 0.05


def _trainer(run_dir: Path, width: int, async_save: bool, device: torch.device) -> Trainer:
    cfg = make_config(**{"training.max_steps": 2, "checkpoint.async_save": async_save})
    task = make_task(n=64, batch_size=16)
    task.model = nn.Sequential(nn.Linear(8, width), nn.Tanh(), nn.Linear(width, width),
                               nn.Tanh(), nn.Linear(width, 3))  # fmt: skip
    trainer = Trainer(task, cfg, run_dir=run_dir, device=device, callbacks=[])
    trainer.fit()  # optimizer moments exist, as in a real checkpoint
    return trainer


def _held_bytes(trainer: Trainer) -> int:
    """Bytes of the reusable CPU copy the trainer's snapshot keeps between saves."""
    return tensor_bytes(trainer.checkpointer.storage.snapshot._buffers)


def run(width: int = 2048, repeats: int = 5, device: str = "cpu") -> tuple[str, dict[str, float]]:
    """`device` cuda: the state lives on the GPU and every path copies it off (`make
    bench-gpu`)."""
    work = Path(tempfile.mkdtemp(prefix="trainforge-bench-"))
    on = torch.device(device)
    try:
        background = _trainer(work / "bg", width, True, on)
        inline = _trainer(work / "sync", width, False, on)
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

        batch = torch.randn(16, 8, device=on)

        def forward_backward() -> None:
            background.model(batch).sum().backward()

        def trainforge_default() -> float:
            # The stall is what the loop loses: the save, plus the wait at the next optimizer
            # step for whatever part of the copy of weights and moments one forward/backward
            # did not hide.
            stall = timed(lambda: background.save_checkpoint("checkpoint-1"))
            forward_backward()
            stall += timed(cw.wait_for_copies)  # what the next optimizer.step waits for
            # Not part of the stall: the loop would be training.
            background.checkpointer.writer.wait()
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
        held = {
            "plain torch.save (sync)": 0,
            "trainforge, async_save=false": _held_bytes(inline),
            "trainforge default (background)": _held_bytes(background),
        }
        rows = [
            [
                name,
                f"{median(t) * 1000:.1f} ms",
                f"{median(t) / base:.3f}x",
                f"{median([m.rss_mib for _, m in cases[name]]):,.0f}",
                f"+{median([m.rss_growth_mib for _, m in cases[name]]):,.0f}",
                f"{held[name] / 2**20:,.0f}",
            ]
            for name, t in times.items()
        ]
        sync = median(times["trainforge, async_save=false"]) / base
        ratio = median(times["trainforge default (background)"]) / base
        state_mb = params * 3 * 4 / 2**20
        text = table(
            f"checkpoint stall ({device}): MLP {params / 1e6:.1f}M params, ~{state_mb:.0f} MB "
            "state, "
            f"median of {repeats} alternating rounds (targets: sync <= {SYNC_TARGET}x, "
            f"background <= {STALL_TARGET}x the plain save)",
            ["save", "loop stall", "vs plain", "peak RSS MiB", "+MiB", "copy held MiB"],
            rows,
        )
        text += (
            "\n"
            + memory_note(cases["plain torch.save (sync)"][0][1])
            + "; copy held = the CPU copy of the state a path keeps between saves. The "
            "background stall = the save plus the next optimizer step's wait for the part of "
            "the copy one forward/backward of a 16-sample batch did not hide; its write on the "
            "other thread is waited for after the stall"
        )
        return text, {"checkpoint_sync_ratio": sync, "checkpoint_stall_ratio": ratio}
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    print(run()[0])
