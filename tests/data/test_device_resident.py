"""In-memory data sets are held whole on the accelerator when they fit.

No GPU here: the real code path runs with torch's `meta` device standing in for CUDA (every
tensor operation the loader does works on it, shapes and dtypes included) and a recorded
free-memory figure; on a CUDA machine `torch.cuda.mem_get_info` supplies that figure.
"""

from __future__ import annotations

import torch

from trainforge.data import build
from trainforge.data.build import build_image_data

META = torch.device("meta")


def test_a_data_set_that_fits_is_gathered_on_the_device_without_workers(
    make_cfg, monkeypatch, capsys
):
    monkeypatch.setattr(build, "free_device_bytes", lambda device: 8 * 2**30)
    data = build_image_data(
        make_cfg(dataloader_num_workers=2), batch_size=64, eval_batch_size=100, seed=1,
        device=META,
    )  # fmt: skip
    assert data.train_loader.num_workers == 0 and not data.train_loader.pin_memory
    images, labels, _bits = next(iter(data.train_loader))
    assert images.device == META and images.dtype == torch.uint8
    assert images.shape == (64, 1, 8, 8) and labels.device == META
    assert next(iter(data.val_loader))[0].device == META
    assert "held on meta as uint8" in capsys.readouterr().out


def test_a_data_set_over_a_quarter_of_free_memory_stays_on_the_host(make_cfg, monkeypatch, capsys):
    size = 1797 * 64 + 1797 * 8  # digits: uint8 8x8 images and int64 labels
    monkeypatch.setattr(build, "free_device_bytes", lambda device: int(size / 0.25) - 1)
    data = build_image_data(
        make_cfg(dataloader_num_workers=1), batch_size=64, eval_batch_size=100, seed=1,
        device=META,
    )  # fmt: skip
    assert data.train_loader.num_workers == 1
    assert data.train_loader.dataset.images.device.type == "cpu"
    assert "stays in host memory (over 25% of free device memory)" in capsys.readouterr().out


def test_on_the_cpu_nothing_moves_and_the_configured_workers_stay(make_cfg, capsys):
    data = build_image_data(
        make_cfg(dataloader_num_workers=1), batch_size=64, eval_batch_size=100, seed=1,
        device=torch.device("cpu"),
    )  # fmt: skip
    assert data.train_loader.num_workers == 1
    assert capsys.readouterr().out == ""
