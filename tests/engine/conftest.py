"""A tiny task on synthetic data so engine tests run in milliseconds on the real loop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchdata.stateful_dataloader import StatefulDataLoader

from trainforge.config.loading import load
from trainforge.data.sampling import EpochShuffleSampler
from trainforge.engine.task import StepOutput, Task


class Points(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 8, generator=g)
        self.y = (self.x[:, 0] > 0).long() + (self.x[:, 1] > 0).long()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


@dataclass
class PointsTask(Task):
    model: nn.Module
    train_loader: Any
    val_loader: Any
    num_train_samples: int
    label_smoothing: float = 0.0
    name: str = "points"
    items_name: str = "samples"
    final_stop: str | None = None

    def to_device(self, batch, device, train):
        return batch[0].to(device), batch[1].to(device)

    def batch_size(self, batch) -> int:
        return int(batch[1].shape[0])

    def step(self, model, batch) -> StepOutput:
        x, y = batch
        logits = model(x)
        loss = F.cross_entropy(logits, y, label_smoothing=self.label_smoothing)
        return StepOutput(loss, int(y.shape[0]), {"correct": (logits.argmax(1) == y).sum()})

    def metrics(self, loss_sum, weight, sums):
        return {"loss": loss_sum / weight, "accuracy": sums.get("correct", 0.0) / weight}


def make_task(
    n: int = 64,
    batch_size: int = 16,
    shuffle: bool = False,
    seed: int = 0,
    num_workers: int = 0,
    dropout: float = 0.0,
):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Dropout(dropout), nn.Linear(32, 3))
    data = Points(n)
    sampler = EpochShuffleSampler(n, seed) if shuffle else None
    train = StatefulDataLoader(
        data, batch_size=batch_size, sampler=sampler, num_workers=num_workers
    )
    val = StatefulDataLoader(Points(32, seed=1), batch_size=32)
    return PointsTask(model, train, val, n)


def make_config(**sets: Any):
    overrides = [f"{k}={v}" for k, v in sets.items()]
    base = [
        "schedule.warmup_steps=0",
        "schedule.lr_scheduler_type=constant",
        "logging.tensorboard=false",
        "logging.jsonl=false",
        "logging.progress_bar=false",
        "checkpoint.save_every_epochs=null",
        "training.max_grad_norm=1000",
    ]
    return load(None, overrides=base + overrides, profile="cpu").config


@pytest.fixture
def points_task():
    return make_task


@pytest.fixture
def points_config():
    return make_config
