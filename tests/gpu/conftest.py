"""The CUDA suite (`make test-gpu`): every test here is `gpu`-marked and needs a CUDA device.

CI never selects `gpu`; on a machine without CUDA each test skips with the reason. The runs
are the real ones (`trainforge.train.train`, `trainforge` subprocesses, the web app) on the
bundled digits data, small enough that the whole suite finishes in minutes on one H100.
Helpers live in `fakes.cuda_runs`.
"""

from __future__ import annotations

import pytest
import torch

from fakes.tiny_lm import lm_corpus, tiny_gpt2  # noqa: F401  (fixtures for the LoRA case)

NO_CUDA = (
    "needs a CUDA device (torch.cuda.is_available() is False): run `make test-gpu` on a GPU machine"
)


@pytest.fixture(autouse=True)
def _cuda_only():
    if not torch.cuda.is_available():
        pytest.skip(NO_CUDA)
    yield
    torch.backends.cudnn.benchmark = False  # a test that turned it on leaves it as found


@pytest.fixture
def cuda() -> torch.device:
    return torch.device("cuda")
