"""Resume on CUDA: bitwise exact with deterministic algorithms, and a checkpoint written on
the CPU resumed on the GPU and back (the same recipe; only float rounding differs)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from fakes.cuda_runs import cli_train
from fakes.weights import relative_difference

pytestmark = pytest.mark.gpu

# A constant rate without warm-up: a step's learning rate does not depend on the run's length
# (the digits config's warm-up and cosine are fitted to max_steps, 4 or 8 here).
FP32 = {"training.precision": "fp32", "checkpoint.save_steps": 4,
        "schedule.lr_scheduler_type": "constant", "schedule.warmup_steps": 0,
        "schedule.warmup_epochs": 0}  # fmt: skip
DETERMINISTIC = ["--deterministic"]


def weights(tmp_path, name):
    return load_file(str(tmp_path / name / "model.safetensors"))


def summary(tmp_path, name):
    return json.loads((tmp_path / name / "summary.json").read_text())


def ok(done):
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    return done


def test_an_interrupted_cuda_run_resumes_bitwise_with_deterministic_algorithms(tmp_path):
    ok(cli_train(tmp_path, "straight", worker=DETERMINISTIC, **FP32,
                 **{"training.max_steps": 8}))  # fmt: skip
    ok(cli_train(tmp_path, "cut", worker=DETERMINISTIC, **FP32, **{"training.max_steps": 4}))
    assert (tmp_path / "cut" / "checkpoints" / "checkpoint-4").is_dir()
    rest = ok(cli_train(tmp_path, "cut", "--resume", "auto", worker=DETERMINISTIC, **FP32,
                        **{"training.max_steps": 8}))  # fmt: skip
    assert "resumed from" in rest.stdout
    a, b = weights(tmp_path, "straight"), weights(tmp_path, "cut")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert summary(tmp_path, "cut")["global_step"] == 8


def _close_to(a, b):
    """CPU and GPU kernels round differently: after 8 AdamW steps at lr <= 2e-3 the weights
    (all but the attention key bias, whose gradient is pure rounding noise) differ by
    < 1e-3 of their norm."""
    assert relative_difference(a, b) < 1e-3


@pytest.mark.parametrize(("first", "then"), [("cpu", "cuda"), ("cuda", "cpu")])
def test_a_checkpoint_moves_between_cpu_and_cuda(tmp_path, first, then):
    sets = {**FP32, "training.num_threads": 2}
    ok(cli_train(tmp_path, "straight", **sets, **{"training.max_steps": 8,
                                                   "training.device": first}))  # fmt: skip
    ok(cli_train(tmp_path, "moved", **sets, **{"training.max_steps": 4,
                                                "training.device": first}))  # fmt: skip
    rest = ok(cli_train(tmp_path, "moved", "--resume", "auto", **sets,
                        **{"training.max_steps": 8, "training.device": then}))  # fmt: skip
    assert "resumed from" in rest.stdout
    facts = summary(tmp_path, "moved")
    assert facts["global_step"] == 8 and facts["device"].startswith(then)
    moved = weights(tmp_path, "moved")
    assert all(torch.isfinite(v).all() for v in moved.values())
    _close_to(moved, weights(tmp_path, "straight"))
