"""A training process for the kill -9 campaign (run by test_kill_campaign.py, not by pytest).

Usage: python crash_child.py RUN_DIR MODE(sync|async) TOTAL_STEPS SAVE_STEPS
Prints `resumed N` or `fresh`, then `step N` after every optimizer step and `save N` when a
checkpoint is handed to the writer, then `digest HEX`.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from conftest import make_config, make_task
from trainforge.engine.callbacks import Callback, CheckpointCadence
from trainforge.engine.trainer import Trainer
from trainforge.run.resume import resume_point
from trainforge.runfolder import RunFolder


class Printer(Callback):
    def on_step_end(self, trainer):
        # One write per line: print() writes the text and the newline separately, and a
        # background save's report could land between them.
        sys.stdout.write(f"step {trainer.state.global_step}\n")
        sys.stdout.flush()

    def on_save(self, trainer, path):
        # Printed when a checkpoint is handed to the writer (before the step's own line):
        # in async mode its write is in flight from here until the next save waits for it.
        sys.stdout.write(f"save {trainer.state.global_step}\n")
        sys.stdout.flush()


def digest(trainer: Trainer) -> str:
    h = hashlib.sha256()
    for key, value in sorted(trainer.model.state_dict().items()):
        h.update(key.encode() + value.numpy().tobytes())
    for index, per_param in sorted(trainer.optimizer.state_dict()["state"].items()):
        for key, value in sorted(per_param.items()):
            h.update(f"{index}.{key}".encode() + torch.as_tensor(value).numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    run_dir, mode, total, save_steps = Path(sys.argv[1]), sys.argv[2], *map(int, sys.argv[3:5])
    torch.set_num_threads(1)
    cfg = make_config(
        **{
            "training.max_steps": total,
            "training.per_device_train_batch_size": 8,
            "training.gradient_accumulation_steps": 2,
            "checkpoint.save_steps": save_steps,
            "checkpoint.async_save": mode == "async",
            "schedule.lr_scheduler_type": "cosine",
            "schedule.warmup_steps": 5,
        }
    )
    task = make_task(n=200, batch_size=8, shuffle=True)
    # ~1.1M parameters: 13 MB per checkpoint with the optimizer moments, so writes take a
    # noticeable share of the time and many kills land inside one.
    task.model = nn.Sequential(
        nn.Linear(8, 1024), nn.Tanh(), nn.Linear(1024, 1024), nn.Tanh(), nn.Linear(1024, 3)
    )
    trainer = Trainer(
        task,
        cfg,
        run_dir=run_dir,
        device=torch.device("cpu"),
        callbacks=[CheckpointCadence(save_steps, None, False), Printer()],
    )
    start = resume_point(RunFolder(run_dir), "auto", False)
    if start is None:
        print("fresh", flush=True)
    else:
        meta = trainer.load_checkpoint(start)
        print(f"resumed {meta['global_step']}", flush=True)
    trainer.fit()
    print(f"digest {digest(trainer)}", flush=True)


if __name__ == "__main__":
    main()
