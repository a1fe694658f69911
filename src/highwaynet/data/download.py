"""Finding data files, and downloading them from their public source with a sha256 check.

Loaders never hard-code where data lives: each takes a folder, and looks (in order) in that
folder, in ``$HIGHWAYNET_DATA``, and in the places a data set is known to be installed (a Debian
package, a Python package that ships it). With ``download=True`` a missing file is fetched from its
public source into the folder and checked against its sha256 before it is used. A file found on
disk is checked against its sha256 too, once: the result is remembered (by the file's path, size
and modification time, in ``~/.cache/highwaynet/verified.json``), so that later runs read it unhashed.
A file whose publisher gives no sha256 is downloaded unchecked, and says so: an
:class:`UncheckedDownloadWarning` names it and gives the sha256 it was found to have, for a user to pin.
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import importlib.util
import json
import os
import urllib.error
import urllib.request
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from .._checks import check_flag, check_path, parse_json
from .._files import check_replaceable, private_folder, replace_all

__all__ = ["DataFile", "DataNotFoundError", "UncheckedDownloadWarning", "default_data_dir", "locate", "package_file",
           "parse_json", "read_text", "search_folders", "sha256_of"]


class DataNotFoundError(FileNotFoundError):
    """A data file was not found; the message says where it was looked for and how to get it."""


class UncheckedDownloadWarning(UserWarning):
    """A file was downloaded without a sha256 to check it against (its publisher gives none): the
    message names it and gives the sha256 it was found to have, so that a user can pin it."""


@dataclass(frozen=True)
class DataFile:
    """One file of a data set.

    Attributes:
        name: the file's name (relative path) inside a data folder.
        url: where it can be downloaded from (None when there is no direct public file).
        sha256: the sha256 of its contents (of the decompressed bytes for ``.gz`` files, so that a
            file recompressed by a distribution still matches); empty where the publisher gives
            none (the file is then downloaded unchecked, with an :class:`UncheckedDownloadWarning`).
    """

    name: str
    url: str | None
    sha256: str


def default_data_dir() -> Path:
    """``$HIGHWAYNET_DATA`` if set (a ``~`` in it made the home folder), else ``~/.cache/highwaynet``."""
    return Path(os.environ.get("HIGHWAYNET_DATA", Path.home() / ".cache" / "highwaynet")).expanduser()


def search_folders(data_dir: str | Path | None, *known: Path | None, download: bool = False) -> list[Path]:
    """Where a loader looks, in order: ``data_dir`` (downloads go there), ``$HIGHWAYNET_DATA`` or
    ``~/.cache/highwaynet``, then the ``known`` install places; without repeats.

    A ``data_dir`` that does not exist is an error (a mistyped folder is not passed over for the
    next place), unless ``download`` will create it."""
    data_dir = None if data_dir is None else check_path("data_dir", data_dir)
    check_flag("download", download)
    if data_dir is not None and Path(data_dir).exists() and not Path(data_dir).is_dir():
        raise DataNotFoundError(f"the data folder {data_dir} is a file, not a folder: pass to --data-dir the folder "
                                f"that holds the data files")
    if data_dir is not None and not download and not Path(data_dir).is_dir():
        raise DataNotFoundError(f"the data folder {data_dir} does not exist (pass the folder that holds the data "
                                f"files, or --download to fetch them into it)")
    folders: list[Path] = []
    for folder in (data_dir, default_data_dir(), *known):
        if folder is not None and Path(folder) not in folders:
            folders.append(Path(folder))
    return folders


def package_file(package: str, relative: str) -> Path | None:
    """A data file shipped inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        candidate = Path(base) / relative
        if candidate.is_file():
            return candidate
    return None


def sha256_of(path: Path) -> str:
    """The sha256 of a file's contents, decompressed first when it ends in ``.gz`` (or ``.gz.part``)."""
    digest = hashlib.sha256()
    opener = gzip.open if path.name.removesuffix(".part").endswith(".gz") else open
    with opener(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def locate(file: DataFile, folders: Sequence[Path | None], *, download: bool, hint: str,
           pin: str = "pin it where the loader takes a sha256") -> Path:
    """The path of ``file``: the first folder that holds it, else a verified download into ``folders[0]``.

    Args:
        file: the file wanted.
        folders: where to look, in order; ``None`` entries are skipped. Downloads go to the first.
        download: fetch the file from ``file.url`` when it is nowhere to be found.
        hint: how a user can get the file by hand, quoted in the error.
        pin: how a user can pin the sha256 of a file downloaded unchecked (``file.sha256`` empty),
            quoted in the :class:`UncheckedDownloadWarning`.

    Raises:
        DataNotFoundError: the file is nowhere and ``download`` is false (or there is no URL).
        OSError: the download failed, or its contents do not match the sha256 (the partial file
            is deleted; nothing half-written is left behind).
    """
    places = [Path(f) for f in folders if f is not None]
    for folder in places:
        if (folder / file.name).is_file():
            if file.sha256:
                _check_once(folder / file.name, file.sha256, file.url)
            return folder / file.name
    looked = ", ".join(str(p) for p in places) or "(no folder given)"
    if not download or file.url is None:
        how = f"pass download=True (CLI: --download) to fetch it from {file.url}, or " if file.url else ""
        raise DataNotFoundError(f"{file.name} not found; looked in: {looked}. To get it, {how}{hint}")
    target = places[0] / file.name
    check_replaceable([target], f"the download of {target.name}")  # (before its folder is made)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        _download(file.url, file.sha256, target, pin)
    except urllib.error.URLError as error:  # (no network, a host that does not answer, an HTTP error)
        raise DataNotFoundError(f"{file.name} could not be downloaded from {file.url} ({error.reason}); looked in: "
                                f"{looked}. Try again where the network reaches it, or: {hint}") from None
    return target


def _download(url: str, sha256: str, target: Path, pin: str) -> None:
    # The partial file is written in a folder made for this download alone (``mkdtemp``: new, the user's
    # only): a ``NAME.part`` planted beside the target, a link to a file elsewhere, is never written
    # through, and two downloads of the same file at once never write into each other's. That folder is locked
    # while the download runs: one that a kill left (SIGKILL, SIGTERM, a closed terminal), with all it had
    # downloaded, is not, and the next download of the file removes it (hidden, it would stay for ever). Its
    # place is checked before the download, and again before the move (a folder there is named, not met after).
    # The partial file is made before the server is asked (which may take a minute): a folder a kill left while it
    # waited, empty, would be taken for one just made, and left for ever.
    what, part = f"the download of {target.name}", target.name + ".part"
    check_replaceable([target], what)
    with private_folder(target.parent, f".{target.name}.", ".download", (part,)) as scratch:
        partial = scratch / part
        with open(partial, "xb") as out, urllib.request.urlopen(url, timeout=60) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=f"downloading {target.name}") as bar:
                for block in iter(lambda: response.read(1 << 16), b""):
                    out.write(block)
                    bar.update(len(block))
        if sha256:
            check_sha256(partial, sha256, url, download_of=target)
        else:
            warnings.warn(f"{target} was downloaded from {url} without a sha256 check: its publisher gives none. "
                          f"Its sha256 is {sha256_of(partial)}; once you trust this copy, {pin}, and the file "
                          f"will be checked against it from then on", UncheckedDownloadWarning, stacklevel=4)
        replace_all([(partial, target)], what)


def _verified_record() -> Path:
    return default_data_dir() / "verified.json"


def _check_once(path: Path, expected: str, source: str | None) -> None:
    """:func:`check_sha256` for a file found on disk, skipped where the same file (path, size and
    modification time) was checked before against the same hash."""
    stat = path.stat()
    key, seen = str(path.resolve()), [stat.st_size, stat.st_mtime_ns, expected]
    record = _verified_record()
    try:
        verified = parse_json(record.read_text())
    except (OSError, ValueError):
        verified = {}
    if not isinstance(verified, dict):  # (edited or damaged: a record of nothing, written anew below)
        verified = {}
    if verified.get(key) == seen:
        return
    check_sha256(path, expected, source)
    verified[key] = seen
    try:  # (where the record cannot be written, the file is simply checked again next time)
        record.parent.mkdir(parents=True, exist_ok=True)
        # (written in a folder of its own, as a download is: never through a link planted at a temporary's name,
        # never into another process's, which ``verified.json.PID.tmp`` was where two hosts share the folder)
        with private_folder(record.parent, f".{record.name}.", ".tmp", (record.name,)) as scratch:
            with open(scratch / record.name, "x") as f:
                f.write(json.dumps(verified, indent=1))
            os.replace(scratch / record.name, record)
    except OSError:
        pass


def read_text(path: Path, encoding: str = "utf-8") -> str:
    """A text file's contents as UTF-8 (or the ``encoding`` a published file is known to be in), with an
    error that names the file and where it is not UTF-8.

    Read as text, not as characters of a vocabulary: a byte-order mark at the start is dropped, and
    Windows' and old Macs' line endings (``\\r\\n``, ``\\r``) become ``\\n``."""
    data = path.read_bytes()
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        utf8 = codecs.lookup(encoding).name == "utf-8"
        what, how = ("UTF-8 text", "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)") if utf8 else (
            f"{encoding} text as asked", "pass the encoding the file is written in")
        raise ValueError(f"{path} is not {what}: byte {error.start} (line {line}) is "
                         f"{data[error.start:error.start + 1]!r} ({error.reason}); {how}") from None
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def check_sha256(path: Path, expected: str, source: str | None = None, *, download_of: Path | None = None) -> None:
    """Raise ``OSError`` naming the file, both hashes and what to do when ``path`` is not ``expected``.
    ``download_of``: ``path`` is the partial download of that file (from ``source``), in a folder of its own
    that is removed with it, so the message names the file and where it came from, not the partial."""
    name = path if download_of is None else f"{download_of} (downloaded from {source})"
    again = ("delete it and download it again" + (f" from {source}" if source else "") if download_of is None else
             "nothing of it was kept: download it again")
    try:
        actual = sha256_of(path)
    except (OSError, EOFError) as error:
        raise OSError(f"{name} is corrupt ({error}); {again}") from error
    if actual != expected:
        raise OSError(f"{name} does not match its sha256 (expected {expected}, got {actual}); "
                      f"the file is corrupt or not the published one: {again}")

