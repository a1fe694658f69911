"""Data sets: images, with loaders that take a folder and can download with a sha256 check."""

from .download import DataNotFoundError, default_data_dir
from .images import (
    IMAGE_DATASETS,
    ImageData,
    load_digits,
    load_fashion_mnist,
    load_image_data,
    load_mnist,
    load_mnist5k,
)

__all__ = [
    "DataNotFoundError",
    "IMAGE_DATASETS",
    "ImageData",
    "default_data_dir",
    "load_digits",
    "load_fashion_mnist",
    "load_image_data",
    "load_mnist",
    "load_mnist5k",
]
