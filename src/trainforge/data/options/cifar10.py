"""The options of dataset `cifar10` (torchvision's CIFAR-10 reader)."""

from __future__ import annotations

from pydantic import Field

from trainforge.options import Options


class CifarOptions(Options):
    """cifar10: its own train and test splits; the files come from data.root."""

    download: bool = Field(True, description="Download into data.root when files are missing.")
