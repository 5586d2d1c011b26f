"""Logging backends behind one small interface: `log(split, metrics, step)` and `close()`.

JSONL (metrics.jsonl, one record per line, flushed each write so a crash loses nothing)
and TensorBoard are on by default. Secrets never reach a logger: only metric numbers do.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Protocol

from trainforge.config.schema import LoggingConfig


class MetricLogger(Protocol):
    def log(self, split: str, metrics: dict[str, float], step: int, epoch: float) -> None: ...
    def close(self) -> None: ...


class JsonlLogger:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fh = path.open("a", encoding="utf-8")

    def log(self, split: str, metrics: dict[str, float], step: int, epoch: float) -> None:
        record = {"time": round(time.time(), 3), "split": split, "step": step, "epoch": epoch}
        record.update({k: (v if math.isfinite(v) else None) for k, v in metrics.items()})
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


class TensorBoardLogger:
    def __init__(self, log_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = log_dir
        self.writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, split: str, metrics: dict[str, float], step: int, epoch: float) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(f"{split}/{key}", value, step)

    def close(self) -> None:
        self.writer.close()


def build_loggers(cfg: LoggingConfig, run_dir: Path) -> list[MetricLogger]:
    loggers: list[MetricLogger] = []
    if cfg.jsonl:
        loggers.append(JsonlLogger(run_dir / "metrics.jsonl"))
    if cfg.tensorboard:
        try:
            loggers.append(TensorBoardLogger(run_dir / "tensorboard"))
        except ImportError:
            print(
                "TensorBoard logging off: the tensorboard package is not installed "
                "(pip install 'trainforge[track]')"
            )
    return loggers
