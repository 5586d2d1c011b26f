"""The options of dataset `digits` (scikit-learn's bundled 8x8 digits): the held-out share
of its 1797 images."""

from __future__ import annotations

from trainforge.data.options.split import SplitOptions


class DigitsOptions(SplitOptions):
    """digits: a fixed, seeded split of the bundled images; nothing to download or resize."""
