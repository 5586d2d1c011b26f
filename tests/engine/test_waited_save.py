"""A save the loop waits for (the end of a run, a signal) writes the live CPU tensors: no copy
adds the model and its optimizer moments to the peak memory, even in a background run."""

from __future__ import annotations

import torch

from trainforge.engine import checkpoint as ckpt
from trainforge.engine import checkpoint_write
from trainforge.engine.checkpoint_storage import CheckpointRoot, Payload, PlainStorage


def _save(tmp_path, name: str, wait: bool) -> PlainStorage:
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(2, 64)).sum().backward()
    optimizer.step()
    root = CheckpointRoot(tmp_path / "checkpoints", config_yaml="{}\n", keep=None)
    storage = PlainStorage(root, background=True, optimizer=optimizer)
    writer = checkpoint_write.CheckpointWriter(background=True)
    payload = Payload(
        dict(model.state_dict()), {"optimizer": optimizer.state_dict()}, lambda: {"name": name}
    )
    storage.save(tmp_path / "checkpoints" / name, payload, None, writer=writer, wait=wait)
    writer.wait()
    storage.snapshot.wait_copied()
    return storage


def test_a_waited_save_copies_nothing_and_writes_the_checkpoint(tmp_path):
    waited = _save(tmp_path / "a", "checkpoint-1", wait=True)
    assert waited.snapshot._buffers == {}  # the background snapshot took no CPU copy
    assert ckpt.verify(tmp_path / "a" / "checkpoints" / "checkpoint-1") is None
    background = _save(tmp_path / "b", "checkpoint-1", wait=False)
    assert background.snapshot._buffers  # a background save still copies before it returns
