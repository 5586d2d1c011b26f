"""Shared fixtures for trainforge.data tests: a stand-in for the config's `data` section."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import pytest

from fakes.tiny_lm import lm_corpus, tiny_gpt2  # noqa: F401  (fixtures of the broken-input corpus)


@dataclass
class DataCfg:
    """Same attributes as the run config's `data` section, with its defaults; the dataset's
    own options are given flat (their old spelling) and read through `options` / `option()`
    as the loaders read the real section."""

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

    @property
    def options(self) -> SimpleNamespace:
        names = ("download", "image_size", "val_fraction", "skip_bad_images")
        return SimpleNamespace(**{name: getattr(self, name) for name in names})

    def option(self, name: str, default: Any = None) -> Any:
        return getattr(self.options, name, default)


@pytest.fixture
def make_cfg() -> Callable[..., DataCfg]:
    def build(**fields) -> DataCfg:
        return replace(DataCfg(), **fields)

    return build
