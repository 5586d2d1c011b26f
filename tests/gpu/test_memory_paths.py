"""The GPU's memory paths: channels-last weights and batches, the cuDNN autotuner, pinned
host batches copied without blocking, and a data set held whole on the GPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fakes.cuda_runs import make_trainer, train_run
from trainforge.data import build

pytestmark = pytest.mark.gpu


def test_channels_last_holds_the_patch_convolution_and_the_batches_in_nhwc(tmp_path, cuda):
    trainer = make_trainer(tmp_path, "nhwc", **{"training.channels_last": "true",
                                                 "training.max_steps": 4})  # fmt: skip
    conv = next(m for m in trainer.model.modules() if isinstance(m, nn.Conv2d))
    assert conv.weight.is_cuda
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    images, _ = trainer.task.to_device(next(iter(trainer.task.train_loader)), cuda, train=True)
    assert images.is_cuda and images.is_contiguous(memory_format=torch.channels_last)
    trainer.fit()
    assert trainer.state.global_step == 4


def test_the_cudnn_autotuner_is_on_only_when_asked(tmp_path):
    make_trainer(tmp_path, "tuned", **{"training.cudnn_benchmark": "true"})
    assert torch.backends.cudnn.benchmark is True
    make_trainer(tmp_path, "plain")
    assert torch.backends.cudnn.benchmark is False
    summary, _ = train_run(tmp_path, "tuned-run", **{"training.cudnn_benchmark": "true",
                                                     "training.max_steps": 5})  # fmt: skip
    assert summary.global_step == 5


def test_the_digits_are_held_on_the_gpu_and_batches_are_gathered_there(tmp_path, capsys, cuda):
    trainer = make_trainer(tmp_path, "resident", **{"data.dataloader_num_workers": 2})
    assert "held on cuda" in capsys.readouterr().out
    loader = trainer.task.train_loader
    assert loader.num_workers == 0 and not loader.pin_memory
    images, labels, _bits = next(iter(loader))  # each sample's random bits come along
    assert images.is_cuda and labels.is_cuda and images.dtype == torch.uint8


def test_host_batches_are_pinned_and_copied_without_blocking(tmp_path, monkeypatch, cuda):
    # No free memory reported: the data set stays on the host, as a large one does.
    monkeypatch.setattr(build, "free_device_bytes", lambda device: 0)
    sets = {"data.pin_memory": "true", "data.dataloader_num_workers": 2,
            "training.max_steps": 6}  # fmt: skip
    trainer = make_trainer(tmp_path, "pinned", **sets)
    loader = trainer.task.train_loader
    assert loader.pin_memory and loader.num_workers == 2
    host_images, host_labels, bits = next(iter(loader))
    assert host_images.is_pinned() and host_labels.is_pinned()
    images, labels = trainer.task.to_device((host_images, host_labels, bits), cuda, train=True)
    torch.cuda.synchronize()
    assert images.is_cuda and torch.equal(labels.cpu(), host_labels)
    trainer.fit()
    assert trainer.state.global_step == 6
