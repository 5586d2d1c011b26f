"""A plain run reads a sharded checkpoint and an FSDP run a plain one (one process here;
the multi-process moves are tests/parallel/test_reshard.py): the state goes through
torch.distributed.checkpoint keyed by parameter name, the optimizer keeps its own kernels."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

from trainforge.engine.checkpoint_storage import CheckpointRoot, PlainStorage
from trainforge.engine.checkpointer import _whole_from_dcp
from trainforge.engine.stateful import ModelState, OptimizerState, StateRegistry, Whole
from trainforge.errors import UserError


def model_and_optimizer(seed: int, fused: bool, width: int = 6):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, width), nn.LayerNorm(width), nn.Linear(width, 3))
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and p.dim() > 1]
    rest = [p for n, p in model.named_parameters() if not (n.endswith("weight") and p.dim() > 1)]
    groups = [{"params": rest, "weight_decay": 0.0}, {"params": decay, "weight_decay": 0.1}]
    return model, torch.optim.AdamW(groups, lr=1e-2, fused=fused)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, seed: int) -> None:
    torch.manual_seed(seed)
    model(torch.randn(8, 4)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def registry(model: nn.Module, optimizer: torch.optim.Optimizer) -> StateRegistry:
    parts = StateRegistry()
    parts.register("model", ModelState(model, False), weights=True, sharded=True)
    parts.register("optimizer", OptimizerState(model, optimizer, False), sharded=True)
    return parts


def save_dcp(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """What an FSDP run writes into `dcp/`: every sharded part keyed by parameter name."""
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one process, no process group: as meant here
        parts = {e.name: e.part.named_state_dict() for e in registry(model, optimizer)}
        dcp.save(parts, checkpoint_id=folder)


def test_a_plain_optimizer_state_is_keyed_by_name_as_torch_keys_it():
    model, optimizer = model_and_optimizer(0, fused=False)
    train_step(model, optimizer, 1)
    named = OptimizerState(model, optimizer, False).by_name(optimizer.state_dict())
    expected = get_optimizer_state_dict(model, optimizer)
    assert named["state"].keys() == expected["state"].keys()
    assert [g["params"] for g in named["param_groups"]] == [
        g["params"] for g in expected["param_groups"]
    ]
    for name, state in expected["state"].items():
        for key, value in state.items():
            assert torch.equal(named["state"][name][key], value), (name, key)


def test_one_process_reads_a_sharded_checkpoint_whole_and_trains_on_the_same_way(tmp_path):
    written, written_opt = model_and_optimizer(0, fused=False)  # FSDP: no fused kernel
    train_step(written, written_opt, 1)
    save_dcp(tmp_path / "dcp", written, written_opt)
    model, optimizer = model_and_optimizer(7, fused=True)  # another start, its own kernel
    parts = registry(model, optimizer)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing for the user to read
        saved = _whole_from_dcp(parts, PlainStorage(CheckpointRoot(tmp_path, "", None)), tmp_path)
    assert isinstance(saved["optimizer"], Whole) and not isinstance(saved["model"], Whole)
    for entry in parts:
        entry.part.load_state_dict(saved[entry.name])
    assert all(g["fused"] for g in optimizer.param_groups)  # its own kernel kept
    for a, b in zip(written.state_dict().values(), model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    train_step(written, written_opt, 2)  # the moments came along: the next step agrees
    train_step(model, optimizer, 2)
    for a, b in zip(written.state_dict().values(), model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_a_plain_checkpoints_whole_state_loads_by_index_or_by_name(tmp_path):
    written, written_opt = model_and_optimizer(0, fused=False)
    train_step(written, written_opt, 1)
    model, optimizer = model_and_optimizer(7, fused=False)
    # Copies, as read from a checkpoint's files (torch keeps the tensors it is given).
    weights, moments = copy.deepcopy(written.state_dict()), copy.deepcopy(written_opt.state_dict())
    ModelState(model, False).load_state_dict(Whole(weights))
    OptimizerState(model, optimizer, False).load_state_dict(Whole(moments))
    train_step(written, written_opt, 2)
    train_step(model, optimizer, 2)
    for a, b in zip(written.state_dict().values(), model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_a_sharded_checkpoint_of_another_model_is_refused_in_one_line(tmp_path):
    written, written_opt = model_and_optimizer(0, fused=False, width=6)
    train_step(written, written_opt, 1)
    save_dcp(tmp_path / "dcp", written, written_opt)
    model, optimizer = model_and_optimizer(0, fused=False, width=8)
    with pytest.raises(UserError) as err:
        _whole_from_dcp(
            registry(model, optimizer), PlainStorage(CheckpointRoot(tmp_path, "", None)), tmp_path
        )
    assert "does not fit this model" in err.value.line() and "\n" not in err.value.line()
    assert "Size mismatch" in err.value.line()  # the cause, not the wrapper's name


def test_read_weights_reads_a_sharded_model_whole_without_a_model(tmp_path):
    """`evaluate`, `export` and `init_from` read a sharded checkpoint's weights this way: the
    shapes and dtypes come from the checkpoint's own metadata, the optimizer is left out."""
    from trainforge.engine import checkpoint as ckpt

    model, optimizer = model_and_optimizer(0, fused=False)
    train_step(model, optimizer, 1)
    save_dcp(tmp_path / "dcp", model, optimizer)
    read = ckpt.read_weights(tmp_path / "dcp")
    assert read.keys() == model.state_dict().keys()
    assert all(torch.equal(read[k], v) for k, v in model.state_dict().items())
    # a checkpoint folder names its dcp/ when it has no model.safetensors, and the file when it does
    assert ckpt.weights_path(tmp_path) == tmp_path / "dcp"
    (tmp_path / ckpt.WEIGHTS).write_bytes(b"")
    assert ckpt.weights_path(tmp_path) == tmp_path / ckpt.WEIGHTS


def test_read_weights_of_damaged_shards_is_one_line(tmp_path):
    from trainforge.engine import checkpoint as ckpt

    model, optimizer = model_and_optimizer(0, fused=False)
    save_dcp(tmp_path, model, optimizer)
    for shard in tmp_path.glob("*.distcp"):
        shard.write_bytes(b"not a shard")
    with pytest.raises(UserError) as info:
        ckpt.read_weights(tmp_path)
    assert info.value.line().startswith(f"cannot read the sharded weights in {tmp_path}: ")
    assert "\n" not in info.value.line()
