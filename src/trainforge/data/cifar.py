"""The `cifar10` dataset: torchvision's CIFAR10 reader, offline-first, with one-line errors.

Owns finding CIFAR-10 under `data.root` (extracted folder or the archive alone), extracting the
archive safely when torchvision would not (it only extracts after a download's MD5 check), and
turning missing/corrupt files or a failed download into a `UserError`. Reading the files and
downloading are torchvision's own code.
"""

from __future__ import annotations

import pickle
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import torch

from trainforge.data.memory import LoadedSplits, TensorImageDataset
from trainforge.errors import UserError

if TYPE_CHECKING:
    from trainforge.config.schema import DataConfig

CIFAR_HOME_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"
CIFAR_IMAGE_SIZE = 32
# What a damaged pickle raises inside torchvision's reader (it only checks MD5s, not contents).
_CORRUPT_ERRORS = (pickle.UnpicklingError, EOFError, KeyError, ValueError, IndexError, TypeError)


def splits_from_config(cfg: DataConfig) -> LoadedSplits:
    """The `cifar10` entry's loader (see `trainforge.data.catalog`)."""
    return load_cifar10_splits(cfg.root, bool(cfg.option("download", True)))


def load_cifar10_splits(root: str, download: bool) -> LoadedSplits:
    """Load CIFAR-10 train (50k) and, as validation, the 10k test set, as uint8 NCHW tensors."""
    root_path = Path(root).expanduser()
    _extract_archive_if_needed(root_path)
    # The train call downloads when allowed; the test call then finds every file in place.
    train_set = _open_cifar10(root_path, train=True, download=download)
    val_set = _open_cifar10(root_path, train=False, download=False)
    return LoadedSplits(
        train=_to_tensor_dataset(train_set),
        val=_to_tensor_dataset(val_set),
        class_names=[str(name) for name in train_set.classes],
        channels=3,
        image_size=CIFAR_IMAGE_SIZE,
        batched_fetch=True,
    )


def _to_tensor_dataset(cifar_set) -> TensorImageDataset:
    # torchvision keeps NHWC uint8; convert to NCHW once here instead of per batch.
    images = torch.from_numpy(cifar_set.data).permute(0, 3, 1, 2).contiguous()
    labels = torch.tensor(cifar_set.targets, dtype=torch.int64)
    return TensorImageDataset(images, labels)


def _expected_files(root: Path) -> list[Path]:
    from torchvision.datasets import CIFAR10

    folder = root / CIFAR10.base_folder
    names = [name for name, _ in CIFAR10.train_list + CIFAR10.test_list]
    return [folder / name for name in [*names, CIFAR10.meta["filename"]]]


def _get_fix(root: Path, download: bool = False) -> str:
    """The fix for missing files; data.download=true is suggested only when it is off."""
    put = f"put cifar-10-python.tar.gz in {root} (from {CIFAR_HOME_URL})"
    if download:
        return f"{put}, or run again when online (data.download is already true)"
    return f"{put} or set data.download=true when online"


def _open_cifar10(root: Path, *, train: bool, download: bool):
    from torchvision.datasets import CIFAR10

    try:
        return CIFAR10(str(root), train=train, download=download)
    except OSError as err:  # urllib.error.URLError, socket errors and timeouts are all OSError
        if download:
            raise UserError(
                f"CIFAR-10 not found in {root} and it could not be downloaded "
                f"(no network? {_one_line(err)})",
                _get_fix(root, download),
            ) from err
        raise UserError(f"CIFAR-10 in {root} could not be read ({_one_line(err)})") from err
    except RuntimeError as err:
        # torchvision's only signal for "missing" and for "checksum mismatch" is RuntimeError.
        missing = [path for path in _expected_files(root) if not path.is_file()]
        if missing:
            state = "download failed" if download else "data.download is false"
            raise UserError(
                f"CIFAR-10 not found in {root} ({missing[0]} is missing, {state})",
                _get_fix(root, download),
            ) from err
        raise UserError(
            f"CIFAR-10 files in {root / CIFAR10.base_folder} are corrupted or incomplete "
            f"({_one_line(err)})",
            f"delete that folder and {_get_fix(root)}",
        ) from err
    except _CORRUPT_ERRORS as err:
        raise UserError(
            f"CIFAR-10 files in {root / CIFAR10.base_folder} are corrupted ({_one_line(err)})",
            f"delete that folder and {_get_fix(root)}",
        ) from err


def _extract_archive_if_needed(root: Path) -> None:
    """Extract root/cifar-10-python.tar.gz when the batch files are not all there yet.

    torchvision extracts only inside its download path, after checking the archive's MD5 against
    the official one; an archive the user copied in by hand should work offline too.
    """
    from torchvision.datasets import CIFAR10

    archive = root / CIFAR10.filename
    if not archive.is_file() or all(path.is_file() for path in _expected_files(root)):
        return
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            for member in members:
                _check_member(archive, member)
            # The "data" filter (3.11.4+) is a second guard against unsafe members.
            extract_kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(root, members=members, **extract_kwargs)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
        raise UserError(
            f"CIFAR-10 archive {archive} is corrupted or unreadable ({_one_line(err)})",
            f"delete it and {_get_fix(root)}",
        ) from err


def _check_member(archive: Path, member: tarfile.TarInfo) -> None:
    """Refuse members that would land outside the target folder or are not plain files/dirs."""
    name = PurePosixPath(member.name)
    unsafe_path = name.is_absolute() or ".." in name.parts or member.name.startswith("\\")
    if unsafe_path or not (member.isfile() or member.isdir()):
        raise UserError(
            f"CIFAR-10 archive {archive} contains an unsafe entry {member.name!r} "
            "(absolute path, '..' or a link)",
            f"delete it and get a fresh copy from {CIFAR_HOME_URL}",
        )


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text or type(err).__name__
