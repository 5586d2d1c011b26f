"""Launch paths on one GPU: FSDP2 (`fully_shard`, NCCL, sharded checkpoints through
torch.distributed.checkpoint) in one process, and a sharded run resumed on that GPU."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from fakes.cuda_runs import cli_train
from fakes.weights import relative_difference

pytestmark = pytest.mark.gpu

# A constant rate: the 4-step and the 8-step runs give each step the same learning rate.
FSDP = {"hardware.data_parallel": "fsdp", "training.precision": "bf16",
        "checkpoint.save_steps": 4, "schedule.lr_scheduler_type": "constant",
        "schedule.warmup_steps": 0, "schedule.warmup_epochs": 0}  # fmt: skip
ONE_RANK = ["--fsdp-one-rank"]


def test_fsdp2_on_one_gpu_trains_and_writes_a_sharded_checkpoint(tmp_path):
    done = cli_train(tmp_path, "fsdp", worker=ONE_RANK, **FSDP, **{"training.max_steps": 8})
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "fsdp" / "checkpoints" / "checkpoint-4"
    assert (folder / "dcp").is_dir() and not (folder / "model.safetensors").exists()
    weights = load_file(str(tmp_path / "fsdp" / "model.safetensors"))  # gathered at the end
    assert weights and all(torch.isfinite(v).all() for v in weights.values())
    summary = json.loads((tmp_path / "fsdp" / "summary.json").read_text())
    assert summary["global_step"] == 8 and summary["device"].startswith("cuda")


def test_a_sharded_checkpoint_resumes_on_the_gpu_to_the_straight_runs_weights(tmp_path):
    straight = cli_train(tmp_path, "straight", worker=ONE_RANK, **FSDP,
                         **{"training.max_steps": 8})  # fmt: skip
    assert straight.returncode == 0, straight.stderr[-3000:]
    first = cli_train(tmp_path, "cut", worker=ONE_RANK, **FSDP, **{"training.max_steps": 4})
    assert first.returncode == 0, first.stderr[-3000:]
    rest = cli_train(tmp_path, "cut", "--resume", "auto", worker=ONE_RANK, **FSDP,
                     **{"training.max_steps": 8})  # fmt: skip
    assert rest.returncode == 0 and "resumed from" in rest.stdout, rest.stderr[-3000:]
    a = load_file(str(tmp_path / "straight" / "model.safetensors"))
    b = load_file(str(tmp_path / "cut" / "model.safetensors"))
    # bf16 kernels may reduce in another order: float noise only (fakes.weights)
    assert relative_difference(a, b) < 1e-3
