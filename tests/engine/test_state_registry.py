"""The state registry: every part with state is registered once, lands in a checkpoint under
its name, and a part added by one `register` call is saved and restored with no checkpoint
code of its own."""

from __future__ import annotations

import torch

from trainforge.engine import checkpoint as ckpt
from trainforge.engine.trainer import Trainer

CPU = torch.device("cpu")
PARTS = [
    "model",
    "optimizer",
    "scheduler",
    "scaler",
    "train_loader",
    "trainer",
    "nonfinite",
    "best",
    "accumulation",
    "rng",
]


class Counter:
    def __init__(self) -> None:
        self.value = 0

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = state["value"]


def make(tmp_path, points_task, points_config, run: str) -> Trainer:
    cfg = points_config(**{"training.max_steps": 2, "training.per_device_train_batch_size": 8})
    return Trainer(points_task(n=32, batch_size=8), cfg, run_dir=tmp_path / run, device=CPU,
                   callbacks=[])  # fmt: skip


def test_every_part_is_registered_once_in_restore_order_and_saved_by_name(
    tmp_path, points_task, points_config
):
    trainer = make(tmp_path, points_task, points_config, "a")
    registry = trainer.checkpointer.registry
    assert registry.names() == PARTS  # the model first, the RNG last
    trainer.fit()
    model_state, state, _ = ckpt.load_checkpoint(trainer.save_checkpoint("c", wait=True))
    assert set(state) == {*PARTS, "world_size", "per_rank"} - {"model"}
    assert model_state.keys() == trainer.model.state_dict().keys()
    assert state["trainer"]["global_step"] == 2 and "best_metric" not in state["trainer"]
    assert set(state["best"]) == {
        "best_metric",
        "best_step",
        "best_epoch",
        "best_loss",
        "best_fast",
    }


def test_a_part_registered_once_is_saved_and_restored(tmp_path, points_task, points_config):
    first = make(tmp_path, points_task, points_config, "a")
    counter = Counter()
    first.checkpointer.registry.register("counter", counter)
    first.fit()
    counter.value = 7
    folder = first.save_checkpoint("c", wait=True)

    resumed = make(tmp_path, points_task, points_config, "b")
    restored = Counter()
    resumed.checkpointer.registry.register("counter", restored)
    resumed.load_checkpoint(folder)
    assert restored.value == 7
