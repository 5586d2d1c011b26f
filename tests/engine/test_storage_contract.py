"""The checkpoint storage seam (`engine.checkpoint_storage`) as a contract: every method the
protocol declares is one that each backend honours. Both read a sharded checkpoint's parts
(`load`), a plain run whole on one process, so a run of either kind resumes from the other's
checkpoint; a part that does not fit is one line."""

from __future__ import annotations

import inspect

import pytest
import torch

from trainforge.engine import checkpoint as ckpt
from trainforge.engine.checkpoint_storage import (
    CheckpointRoot,
    CheckpointStorage,
    PlainStorage,
    ShardedStorage,
)
from trainforge.errors import UserError

BACKENDS = (PlainStorage, ShardedStorage)
# The test writes its sharded checkpoints on one process, without a process group, as meant.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


def _declared(protocol) -> set[str]:
    return {n for n, v in vars(protocol).items() if inspect.isfunction(v) and not n.startswith("_")}


def test_every_backend_has_every_declared_method_with_its_signature():
    declared = _declared(CheckpointStorage)
    assert declared == {"save", "load"}
    for backend in BACKENDS:
        for name in declared:
            ours = inspect.signature(getattr(CheckpointStorage, name))
            theirs = inspect.signature(getattr(backend, name))
            assert list(theirs.parameters) == list(ours.parameters), (backend.__name__, name)
        assert isinstance(backend.sharded, bool)


def _sharded_checkpoint(folder, parts) -> None:
    import torch.distributed.checkpoint as dcp

    dcp.save(parts, checkpoint_id=str(ckpt.dcp_folder(folder)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_backend_reads_a_sharded_checkpoint_into_this_runs_tensors(backend, tmp_path):
    torch.manual_seed(0)
    saved = {"model": {"w": torch.randn(4, 3), "b": torch.randn(3)}}
    folder = tmp_path / "checkpoint-2"
    _sharded_checkpoint(folder, saved)
    storage = backend(CheckpointRoot(tmp_path, "", None))
    blank = {"model": {k: torch.zeros_like(v) for k, v in saved["model"].items()}}
    read = storage.load(folder, blank)
    for key, value in saved["model"].items():
        assert torch.equal(read["model"][key], value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_part_that_does_not_fit_is_one_line(backend, tmp_path):
    folder = tmp_path / "checkpoint-2"
    _sharded_checkpoint(folder, {"model": {"w": torch.ones(4, 3)}})
    storage = backend(CheckpointRoot(tmp_path, "", None))
    with pytest.raises(UserError) as err:
        storage.load(folder, {"model": {"w": torch.zeros(5, 3)}})
    assert err.value.message.startswith(f"checkpoint {folder} does not fit this model")
