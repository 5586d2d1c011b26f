"""Shared fixtures for trainforge.data tests: a stand-in for the config's `data` section."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from fakes.tiny_lm import lm_corpus, tiny_gpt2  # noqa: F401  (fixtures of the broken-input corpus)


@dataclass
class DataCfg:
    """Same attributes as the run config's `data` section, with its defaults."""

    dataset: str = "digits"
    root: str = "data"
    download: bool = False
    image_size: int | None = None
    val_fraction: float = 0.2
    skip_bad_images: bool = False
    dataloader_num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    random_crop_padding: int | None = None
    horizontal_flip: bool | None = None
    normalize_mean: list[float] | None = None
    normalize_std: list[float] | None = None


@pytest.fixture
def make_cfg() -> Callable[..., DataCfg]:
    def build(**fields) -> DataCfg:
        return replace(DataCfg(), **fields)

    return build
