"""The options of dataset `image-folder` (class-per-subfolder images under data.root)."""

from __future__ import annotations

from pydantic import Field

from trainforge.data.options.split import SplitOptions

# Square side of image-folder images when the image_size option is unset.
DEFAULT_IMAGE_SIZE = 32


class ImageFolderOptions(SplitOptions):
    """image-folder: the resize target, bad images, and the split when there is no val/."""

    image_size: int | None = Field(
        None,
        ge=4,
        description=f"Square resize target in pixels (default {DEFAULT_IMAGE_SIZE}).",
    )
    skip_bad_images: bool = Field(
        False,
        description="Leave out images that do not decode (counted) instead of refusing the "
        "data set.",
    )
    val_fraction: float = Field(
        0.2,
        gt=0.0,
        lt=1.0,
        description="Held-out share of the images when the folder has no val/.",
    )
