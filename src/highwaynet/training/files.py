"""The files highwaynet writes into a user's folders: whose folder it is, and writing without links.

A folder a run, a sweep or an analysis writes into is the user's. Three rules keep it so:

- **Ownership.** highwaynet writes only into a folder that is new, empty, or already its own:
  :func:`claim` leaves a marker (``.highwaynet``) holding the folder's kind (``run``, ``sweep``,
  ``analysis``), an identity, and the name of every file written into it since. A folder holding
  anything else is refused with a message naming what is there; the file system's root and the home
  folder itself are refused outright. Starting a run over (:func:`clear`) removes only the files its
  marker lists. A run or sweep folder of 0.2, which had no marker, is adopted where it holds only
  what such a folder holds.
- **No links.** Every file is written beside its place and then moved there in one step
  (:func:`write_bytes`), created with ``O_NOFOLLOW`` and ``O_EXCL``; a symbolic link in the place of
  a file highwaynet writes is refused (:class:`LinkInFolder`), never written through, so that
  nothing outside the folder is truncated or overwritten.
- **Reading only what is there.** :func:`read_regular` reads a regular file inside the folder,
  never a link, so that a report does not embed a file from elsewhere.

A full disk is reported as such (:class:`DiskFull`), naming the file and the space left.
"""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

__all__ = ["KINDS", "MARKER", "DiskFull", "FolderNotOurs", "LinkInFolder", "adopt", "append_line", "check_claimable",
           "claim",
           "clear", "marker", "read_regular", "remove_stray_files", "save_figure", "save_torch", "write_bytes",
           "write_text", "written"]

#: The marker file of a folder highwaynet writes.
MARKER = ".highwaynet"
#: What a marked folder holds.
KINDS = ("run", "sweep", "analysis")
#: Files of highwaynet's own that are not listed as written: the marker (and its temporary), the run lock.
_INFRASTRUCTURE = (MARKER, MARKER + ".tmp", ".lock")
#: What a 0.2 run folder held (it had no marker): such a folder is adopted as a run.
_LEGACY_RUN_FILES = frozenset({"config.json", "metrics.jsonl", "checkpoint.pt", "checkpoint.prev.pt", "model.pt",
                               "results.json", "vocab.json", "report.md", "report.html", "curves.png", "tensorboard",
                               ".lock"})


class FolderNotOurs(FileExistsError):
    """A folder holds files highwaynet did not write (or is the root or the home folder): it writes nothing there."""


class LinkInFolder(OSError):
    """A symbolic link stands where highwaynet writes or reads one of its files; it is not followed."""


class DiskFull(OSError):
    """A file could not be written because its disk (or the user's quota) is full."""


def _special(folder: Path) -> str | None:
    resolved = folder.resolve()
    if resolved == Path(resolved.anchor):
        return "the file system's root"
    if resolved == Path.home().resolve():
        return "your home folder"
    return None


def marker(folder: str | Path) -> dict[str, Any] | None:
    """The marker of a folder highwaynet writes (its kind, identity and the files written), or None."""
    path = Path(folder) / MARKER
    if path.is_symlink() or not path.is_file():
        return None
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and found.get("kind") in KINDS else None


def _write_marker(folder: Path, found: dict[str, Any]) -> None:
    _replace(folder / MARKER, (json.dumps(found, indent=1) + "\n").encode())


def _new_marker(kind: str, written: list[str]) -> dict[str, Any]:
    from .. import __version__

    return {"kind": kind, "id": uuid.uuid4().hex, "highwaynet": __version__,
            "created": time.strftime("%Y-%m-%d %H:%M:%S"), "written": sorted(written)}


def _entries(folder: Path) -> list[str]:
    """What ``folder`` holds besides highwaynet's own infrastructure (its marker, its temporary, the lock:
    regular files of those names; a link or a folder in their place counts as the user's)."""
    return sorted(e for e in os.listdir(folder)
                  if e not in _INFRASTRUCTURE or (folder / e).is_symlink() or not (folder / e).is_file())


def _describe(names: list[str]) -> str:
    shown = ", ".join(sorted(names)[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _legacy_run(folder: Path, entries: list[str]) -> bool:
    """A run folder that highwaynet 0.2 wrote: its config.json names a recipe and it holds only run files."""
    config = folder / "config.json"
    if not set(entries) <= _LEGACY_RUN_FILES or config.is_symlink() or not config.is_file():
        return False
    try:
        return "recipe" in json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return False


def _legacy_sweep(folder: Path, entries: list[str]) -> bool:
    """A sweep folder that highwaynet 0.2 wrote: its sweep.json names a recipe, and beside it are only
    a sweep's own files and its runs' folders."""
    record = folder / "sweep.json"
    own = {"sweep.json", "summary.json", "report.md", "report.html", ".lock"}
    if record.is_symlink() or not record.is_file() or not all(
            e in own or e.endswith(".png") or ((folder / e).is_dir() and not (folder / e).is_symlink())
            for e in entries):
        return False
    try:
        return "recipe" in json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return False


def check_claimable(folder: str | Path, kind: str, what: str = "") -> dict[str, Any] | None:
    """Whether :func:`claim` would take ``folder`` for ``kind``, without writing anything: its marker
    (None where the folder is new, empty, or a 0.2 run to adopt). ``what`` names the writer in messages.

    Raises:
        FolderNotOurs: the folder holds what highwaynet did not write, another kind of highwaynet
            folder, or is the root or the home folder.
    """
    folder = Path(folder)
    what = what or f"a {kind}"
    special = _special(folder)
    if special is not None:
        raise FolderNotOurs(f"{folder} is {special}: {what} needs a folder of its own; pass a new folder "
                            f"(for example {folder / 'runs' / 'x'})")
    if not folder.exists():
        return None
    if not folder.is_dir():
        raise FolderNotOurs(f"{folder} is a file, not a folder: pass a folder for {what}")
    found = marker(folder)
    if found is not None:
        if found["kind"] != kind:
            raise FolderNotOurs(f"{folder} is a {found['kind']} folder of highwaynet's, not one for {what}: pass a "
                                f"folder of its own")
        return found
    entries = _entries(folder)
    if not entries or (kind == "run" and _legacy_run(folder, entries)) or (
            kind == "sweep" and _legacy_sweep(folder, entries)):
        return None
    raise FolderNotOurs(f"{folder} holds files that highwaynet did not write ({_describe(entries)}): {what} writes "
                        f"only into a new or empty folder, or one it wrote before; pass another folder")


def claim(folder: str | Path, kind: str, what: str = "") -> dict[str, Any]:
    """Make ``folder`` highwaynet's (creating it where new) for a ``kind`` of output; returns its marker.

    A folder already marked as this kind is returned as it is; a new or empty one is marked; a 0.2
    run folder is adopted, its files listed as written. Anything else raises :class:`FolderNotOurs`
    (:func:`check_claimable`).
    """
    folder = Path(folder)
    found = check_claimable(folder, kind, what)
    if found is not None:
        return found
    folder.mkdir(parents=True, exist_ok=True)
    entries = _entries(folder)
    found = _new_marker(kind, entries)
    _write_marker(folder, found)
    return found


def adopt(folder: str | Path) -> dict[str, Any] | None:
    """The marker of a folder highwaynet wrote: its own, or for a run or sweep folder of 0.2 (which had
    none) one made now; None for any other folder (empty, or not highwaynet's)."""
    folder = Path(folder)
    found = marker(folder)
    if found is not None or not folder.is_dir() or not _entries(folder):
        return found
    for kind in ("run", "sweep"):
        try:
            check_claimable(folder, kind)
        except FolderNotOurs:
            continue
        return claim(folder, kind)
    return None


def written(folder: str | Path) -> set[str]:
    """The names of the files highwaynet wrote into ``folder`` (empty for a folder without a marker)."""
    found = marker(folder)
    return set(found["written"]) if found is not None else set()


def _record(path: Path) -> None:
    """List ``path`` as written in its folder's marker, before it is written (a kill between the two
    leaves a name listed without its file, never a file of ours unlisted). A file already there that
    highwaynet did not write is refused (:class:`FolderNotOurs`): it is the user's, and stays."""
    found = marker(path.parent)
    if found is None or path.name in found["written"] or path.name in _INFRASTRUCTURE:
        return
    if path.exists() or path.is_symlink():
        raise FolderNotOurs(f"{path} was not written by highwaynet, which never overwrites such a file: move it "
                            f"out of {path.parent} and run again")
    found["written"] = sorted({*found["written"], path.name})
    _write_marker(path.parent, found)


def clear(folder: str | Path) -> list[str]:
    """Remove every file ``folder``'s marker lists as written (a link among them: the link alone), and
    give the folder a new identity (a run started over is another run); returns the names removed.
    What the user added to the folder stays."""
    folder = Path(folder)
    found = marker(folder)
    if found is None:
        return []
    removed = []
    for name in found["written"]:
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_symlink() or path.exists():
            path.unlink()
        else:
            continue
        removed.append(name)
    _write_marker(folder, _new_marker(found["kind"], []))
    return removed


def remove_stray_files(folder: str | Path) -> list[str]:
    """Remove the temporary files a killed writer can leave (``NAME.tmp`` beside a file highwaynet
    writes); returns their names. A user's own ``*.tmp`` stays. Call with the folder's lock held."""
    folder = Path(folder)
    ours = written(folder) | {MARKER + ".tmp"}
    stray = sorted(p for p in folder.glob("*.tmp") if p.name in ours and p.is_file() and not p.is_symlink())
    for path in stray:
        path.unlink(missing_ok=True)
    return [p.name for p in stray]


def _refuse_link(path: Path) -> None:
    if path.is_symlink():
        raise LinkInFolder(f"{path} is a symbolic link: highwaynet writes its files itself, never through a link "
                           f"(which could overwrite a file elsewhere); remove the link and run again")


def _disk_full(path: Path, error: OSError) -> OSError:
    if error.errno not in (errno.ENOSPC, errno.EDQUOT):
        return error
    try:
        free = f"{shutil.disk_usage(path.parent).free / 2**20:.0f} MiB free"
    except OSError:
        free = "no space left"
    return DiskFull(error.errno, f"{path} could not be written: its disk is full ({free}). Free some space (or "
                                 f"pass another --out) and run again; an interrupted run goes on with --resume")


def _write_all(f: Any, data: bytes) -> None:
    """Every write of a file's bytes goes through here (the tests slow it down to kill a writer halfway)."""
    f.write(data)


def _replace(path: Path, data: bytes, keep_previous: Path | None = None) -> None:
    """Write ``data`` beside ``path`` (``NAME.tmp``, created anew, links not followed), then put it in place;
    with ``keep_previous``, the file it replaces is moved there first."""
    _refuse_link(path)
    tmp = path.with_name(path.name + ".tmp")
    _record(tmp)  # (listed before it exists: a kill leaves it listed, and the next run may remove it)
    if tmp.is_symlink() or tmp.is_dir():
        raise FolderNotOurs(f"{tmp} is in the place of highwaynet's temporary file and is not one: move it out of "
                            f"{tmp.parent} and run again")
    tmp.unlink(missing_ok=True)  # a stale one of ours, left by a kill
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "wb") as f:
            _write_all(f, data)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise _disk_full(path, error) from None
    if keep_previous is not None and path.exists():
        os.replace(path, keep_previous)
    os.replace(tmp, path)


def write_bytes(path: str | Path, data: bytes, keep_previous: str | Path | None = None) -> None:
    """Write ``path`` in one step (a reader, or a kill, never meets half of it), without following links.

    With ``keep_previous``, the file it replaces is moved there first (a checkpoint keeps the one
    before it). The file is listed in its folder's marker, if the folder has one.
    """
    path = Path(path)
    previous = Path(keep_previous) if keep_previous is not None else None
    for target in (path, previous):
        if target is not None:
            _refuse_link(target)
            _record(target)
    _replace(path, data, previous)


def write_text(path: str | Path, text: str) -> None:
    """:func:`write_bytes` of ``text`` in UTF-8."""
    write_bytes(path, text.encode("utf-8"))


def append_line(path: str | Path, line: str) -> None:
    """Append ``line`` and a newline to ``path`` (created if missing), never through a link."""
    path = Path(path)
    _refuse_link(path)
    _record(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "ab") as f:
            _write_all(f, (line + "\n").encode("utf-8"))
    except OSError as error:
        raise _disk_full(path, error) from None


def save_torch(obj: Any, path: str | Path, keep_previous: str | Path | None = None) -> None:
    """``torch.save(obj)`` into ``path`` as :func:`write_bytes` writes (serialised in memory first, so that
    a full disk is reported as such rather than as a damaged archive)."""
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    write_bytes(path, buffer.getvalue(), keep_previous)


def save_figure(figure: Any, path: str | Path, dpi: int = 120) -> None:
    """A matplotlib figure as a PNG at ``path`` (as :func:`write_bytes` writes), then closed."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(figure)
    write_bytes(path, buffer.getvalue())


def read_regular(folder: str | Path, name: str) -> bytes | None:
    """The bytes of the regular file ``name`` inside ``folder``; None where it is missing, a link, not a
    regular file, or (a name with ``..`` or an absolute path) outside the folder."""
    folder = Path(folder)
    path = folder / name
    try:
        inside = path.resolve().is_relative_to(folder.resolve())
    except (OSError, ValueError):
        return None
    if not inside or any(p.is_symlink() for p in (path, *path.parents) if p != folder and
                         p.is_relative_to(folder)) or not path.is_file():
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()
