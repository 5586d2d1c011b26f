"""cifar10: a tiny archive in the real CIFAR-10 format, read by torchvision, fully offline."""

from __future__ import annotations

import io
import socket
import tarfile
import urllib.error
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.datasets.cifar as tv_cifar
from torchvision.datasets import CIFAR10

from fakes.cifar_archive import BATCH_NAMES, LABEL_NAMES
from trainforge.data import build_image_data
from trainforge.errors import UserError


def _expected_train_images(payloads: dict) -> torch.Tensor:
    rows = np.concatenate([payloads[name][b"data"] for name in BATCH_NAMES])
    return torch.from_numpy(rows.reshape(-1, 3, 32, 32))


def _count_cifar_reads(monkeypatch) -> list[bool]:
    calls: list[bool] = []
    original_init = CIFAR10.__init__

    def counting_init(self, root, train=True, *args, **kwargs):
        calls.append(train)
        original_init(self, root, train, *args, **kwargs)

    monkeypatch.setattr(CIFAR10, "__init__", counting_init)
    return calls


@pytest.fixture(autouse=True)
def _sockets_refuse_to_connect(monkeypatch):
    """Nothing here may download: the download function is replaced in each test that asks
    for `download=True`, and any connection that slips past it fails the test at once."""

    def refuse(*args, **kwargs):
        raise AssertionError("a CIFAR-10 test tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def _no_network(*args, **kwargs):
    raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")


def test_loads_extracted_folder_through_torchvision(make_cfg, tiny_cifar, monkeypatch) -> None:
    reads = _count_cifar_reads(monkeypatch)
    cfg = make_cfg(dataset="cifar10", root=str(tiny_cifar["extracted"]))
    data = build_image_data(cfg, batch_size=16, eval_batch_size=16, seed=0)
    assert reads == [True, False]  # torchvision's CIFAR10 read both splits
    assert (data.num_train, data.num_val, data.num_classes) == (100, 20, 10)
    assert (data.channels, data.image_size, data.class_names) == (3, 32, LABEL_NAMES)
    train_set = data.train_loader.dataset
    assert torch.equal(train_set.images, _expected_train_images(tiny_cifar["payloads"]))
    val_images, val_labels = next(iter(data.val_loader))
    test_rows = tiny_cifar["payloads"]["test_batch"][b"data"].reshape(-1, 3, 32, 32)
    assert torch.equal(val_images, torch.from_numpy(test_rows)[:16])
    assert val_labels.tolist() == tiny_cifar["payloads"]["test_batch"][b"labels"][:16]
    images, labels, _bits = next(iter(data.train_loader))
    assert images.dtype == torch.uint8 and images.shape == (16, 3, 32, 32)
    assert labels.dtype == torch.int64
    assert data.augment.crop_padding_px == 4 and data.augment.horizontal_flip is True


@pytest.mark.parametrize("download", [False, True])
def test_loads_from_archive_alone_without_network(
    make_cfg, tiny_cifar, monkeypatch, download: bool
) -> None:
    monkeypatch.setattr(tv_cifar, "download_and_extract_archive", _no_network)
    root = tiny_cifar["archive_root"]
    cfg = make_cfg(dataset="cifar10", root=str(root), download=download)
    data = build_image_data(cfg, batch_size=16, eval_batch_size=16, seed=0)
    assert (root / "cifar-10-batches-py" / "data_batch_5").is_file()
    assert torch.equal(
        data.train_loader.dataset.images, _expected_train_images(tiny_cifar["payloads"])
    )


@pytest.mark.parametrize("download", [False, True])
def test_missing_cifar_is_one_line_user_error(
    make_cfg, tmp_path, monkeypatch, download: bool
) -> None:
    monkeypatch.setattr(tv_cifar, "download_and_extract_archive", _no_network)
    root = tmp_path / "data" / "cifar10"
    cfg = make_cfg(dataset="cifar10", root=str(root), download=download)
    with pytest.raises(UserError) as caught:
        build_image_data(cfg, batch_size=8, eval_batch_size=8, seed=0)
    message = str(caught.value)
    assert "\n" not in message
    assert f"CIFAR-10 not found in {root}" in message
    assert "cifar-10-python.tar.gz" in message
    # data.download=true is suggested only where it is off.
    assert ("set data.download=true" in message) is not download
    if download:
        assert "could not be downloaded" in message and "name resolution" in message
        assert "data.download is already true" in message


def test_download_true_uses_torchvision_download_path(make_cfg, tmp_path, monkeypatch) -> None:
    calls = []

    def fake_download(url, download_root, **kwargs):
        calls.append((url, Path(download_root)))
        raise OSError("network is unreachable")

    monkeypatch.setattr(tv_cifar, "download_and_extract_archive", fake_download)
    cfg = make_cfg(dataset="cifar10", root=str(tmp_path), download=True)
    with pytest.raises(UserError, match="network is unreachable"):
        build_image_data(cfg, batch_size=8, eval_batch_size=8, seed=0)
    assert calls == [(CIFAR10.url, tmp_path)]


def test_corrupt_batch_file_is_user_error(make_cfg, tiny_cifar) -> None:
    batch = tiny_cifar["extracted"] / "cifar-10-batches-py" / "data_batch_3"
    batch.write_bytes(b"not a pickle")
    cfg = make_cfg(dataset="cifar10", root=str(tiny_cifar["extracted"]))
    with pytest.raises(UserError, match="corrupted") as caught:
        build_image_data(cfg, batch_size=8, eval_batch_size=8, seed=0)
    assert "\n" not in str(caught.value)


def test_corrupt_archive_is_user_error(make_cfg, tmp_path) -> None:
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(b"\x1f\x8b truncated gzip")
    cfg = make_cfg(dataset="cifar10", root=str(tmp_path))
    with pytest.raises(UserError, match=r"cifar-10-python\.tar\.gz is corrupted"):
        build_image_data(cfg, batch_size=8, eval_batch_size=8, seed=0)


@pytest.mark.parametrize("bad_name", ["../escape.txt", "/abs/escape.txt"])
def test_archive_with_unsafe_member_is_refused(make_cfg, tmp_path, bad_name: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with tarfile.open(root / "cifar-10-python.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo(bad_name)
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    cfg = make_cfg(dataset="cifar10", root=str(root))
    with pytest.raises(UserError, match="unsafe entry"):
        build_image_data(cfg, batch_size=8, eval_batch_size=8, seed=0)
    assert not (tmp_path / "escape.txt").exists()
