"""A tiny CIFAR-10 in the real python format (pickled batches in cifar-10-python.tar.gz).

Shared by the data tests and the end-to-end CLI tests so torchvision's reader runs offline.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import struct
import tarfile

import numpy as np
import pytest
from torchvision.datasets import CIFAR10

IMAGES_PER_BATCH = 20
BATCH_NAMES = [f"data_batch_{number}" for number in range(1, 6)]
LABEL_NAMES = ["airplane", "automobile", "bird", "cat", "deer"]
LABEL_NAMES += ["dog", "frog", "horse", "ship", "truck"]


class _Python2Pickler(pickle._Pickler):
    """Writes bytes as Python 2 `str` opcodes, as in the original (Python 2) CIFAR-10 files.

    Loaded with encoding="bytes" the keys are b"data" etc.; with torchvision's encoding="latin1"
    they become "data" etc., exactly as with the real download.
    """

    dispatch = pickle._Pickler.dispatch.copy()

    def save_python2_str(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_python2_str


def _python2_pickle(payload: dict) -> bytes:
    buffer = io.BytesIO()
    _Python2Pickler(buffer, protocol=2).dump(payload)
    return buffer.getvalue()


def _batch_payloads(seed: int = 0) -> dict[str, dict]:
    rng = np.random.default_rng(seed)
    payloads = {}
    for name in [*BATCH_NAMES, "test_batch"]:
        payloads[name] = {
            b"batch_label": f"{name} of 5".encode(),
            b"labels": rng.integers(0, 10, IMAGES_PER_BATCH).tolist(),
            b"data": rng.integers(0, 256, (IMAGES_PER_BATCH, 3072), dtype=np.uint8),
            b"filenames": [f"img_{i}.png".encode() for i in range(IMAGES_PER_BATCH)],
        }
    payloads["batches.meta"] = {
        b"label_names": [name.encode() for name in LABEL_NAMES],
        b"num_cases_per_batch": IMAGES_PER_BATCH,
        b"num_vis": 3072,
    }
    return payloads


@pytest.fixture
def tiny_cifar(tmp_path, monkeypatch) -> dict:
    """Write cifar-10-python.tar.gz (real layout, tiny) and point torchvision at its MD5s.

    torchvision verifies every batch file against the official MD5s; the tiny files cannot match
    those, so the test swaps in their own MD5s. The reader and the check stay torchvision's.
    """
    payloads = _batch_payloads()
    blobs = {name: _python2_pickle(payload) for name, payload in payloads.items()}
    md5 = {name: hashlib.md5(blob).hexdigest() for name, blob in blobs.items()}
    monkeypatch.setattr(CIFAR10, "train_list", [[name, md5[name]] for name in BATCH_NAMES])
    monkeypatch.setattr(CIFAR10, "test_list", [["test_batch", md5["test_batch"]]])
    meta = {"filename": "batches.meta", "key": "label_names", "md5": md5["batches.meta"]}
    monkeypatch.setattr(CIFAR10, "meta", meta)
    archive_path = tmp_path / "archive_only" / "cifar-10-python.tar.gz"
    archive_path.parent.mkdir()
    with tarfile.open(archive_path, "w:gz") as tar:
        for name, blob in blobs.items():
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    extracted = tmp_path / "extracted"
    extracted.mkdir()
    with tarfile.open(archive_path, "r:gz") as tar:
        tar.extractall(extracted, filter="data")
    loaded = pickle.loads(blobs["data_batch_1"], encoding="bytes")
    assert np.array_equal(loaded[b"data"], payloads["data_batch_1"][b"data"])  # real layout
    return {"payloads": payloads, "archive_root": archive_path.parent, "extracted": extracted}
