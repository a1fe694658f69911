"""The files highwaynet writes into a user's folders: whose folder it is, and writing without links.

A folder a run, a sweep or an analysis writes into is the user's. Three rules keep it so:

- **Ownership.** highwaynet writes only into a folder that is new, empty, or already its own:
  :func:`claim` leaves a marker (``.highwaynet``) holding the folder's kind (``run``, ``sweep``,
  ``analysis``), an identity, and the name of every file written into it since. A folder holding
  anything else is refused with a message naming what is there; the file system's root and the home
  folder itself are refused outright. Starting a run over (:func:`clear`) removes only the files its
  marker lists, and those its analyses' markers list (``RUN/gates``, ``RUN/lesion``). A run or sweep
  folder of 0.2, which had no marker, is adopted where it holds only what such a folder holds.
- **The marker is input too.** It is read as data and checked (:func:`read_marker`): a JSON object of
  a known kind whose ``written`` lists plain file names (no separator, not ``.`` or ``..``); anything
  else is a damaged marker, which is said to be damaged and never used to find a file. A removal
  touches only a regular file, or a folder highwaynet made, found by listing the folder itself
  without following links (never a path built from a stored name). A folder whose marker is damaged
  or missing is re-marked where it holds only what highwaynet writes, a run keeping its identity
  where its checkpoint and ``config.json`` agree on it (``identity``, given by the caller).
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
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .._checks import check_path, parse_json
from .._files import NOFOLLOW, lock, open_folder

__all__ = ["ANALYSES", "KINDS", "MARKER", "DamagedMarker", "DiskFull", "FolderNotOurs", "LinkInFolder", "adopt",
           "append_line", "check_analysis_folder", "check_claimable", "claim", "clear", "make_dirs", "make_folder",
           "marker", "read_json_in", "read_marker", "read_regular", "register_analysis", "remove_new_folders",
           "remove_stray_files", "remove_written", "save_figure", "save_torch", "track_new_folders", "write_bytes",
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
#: What an analysis folder (``reproduce gates``, ``reproduce lesion``) holds: re-marked where its marker is damaged
#: (with the result of any other analysis of :data:`ANALYSES` its folder holds: :func:`_its_own`).
_ANALYSIS_FILES = frozenset({"gates.json", "gates.png", "lesion.json", "lesion.png", "report.md", "report.html"})
#: The analyses that write into an ``analysis`` folder, each by the file that shows it wrote there (its result): what
#: each is called in messages. Each writes ``report.md`` too, so that one folder holds one analysis
#: (:func:`check_analysis_folder`). The code that writes an analysis makes it known (:func:`register_analysis`, with
#: the test that recognises its result): this module knows none of them (the recipes' are registered by
#: :mod:`highwaynet.recipes.analyses`, on importing :mod:`highwaynet.recipes`).
ANALYSES: dict[str, str] = {}
#: For each result of :data:`ANALYSES`: what shows that a folder holds it, in words (for messages), and the test of a
#: folder that says whether it does (:func:`register_analysis`).
_RECOGNISED: dict[str, tuple[str, Callable[[Path], bool]]] = {}
#: Folders highwaynet makes in a run folder whose files it does not list one by one (TensorBoard's event
#: files): removed whole when the run starts over.
_OPAQUE_FOLDERS = frozenset({"tensorboard"})
#: The folders a run's analyses write into by default (``reproduce gates RUN`` into ``RUN/gates``, ``reproduce
#: lesion RUN`` into ``RUN/lesion``: :mod:`highwaynet.recipes.gates`). They describe the run's weights, so a run
#: started over (:func:`clear`) clears them too, as a sweep's runs (what their markers list): an analysis of the
#: weights before is not left to be read as one of the run now. A link in their place is refused, never followed.
_ANALYSIS_FOLDERS = ("gates", "lesion")
#: The files a command writes before it trains anything: a folder it made holding only these is removed
#: again where the command is refused (:func:`remove_new_folders`).
_BEFORE_TRAINING = frozenset({"config.json", "sweep.json", "vocab.json"})
#: The files highwaynet writes in its folders: none may be a link (checked before a command writes anything).
_WRITES = (_LEGACY_RUN_FILES | _ANALYSIS_FILES | frozenset({"sweep.json", "summary.json"})) - {".lock", "tensorboard"}


class FolderNotOurs(FileExistsError):
    """A folder holds files highwaynet did not write (or is the root or the home folder): it writes nothing there."""


class LinkInFolder(OSError):
    """A symbolic link stands where highwaynet writes or reads one of its files; it is not followed."""


class DamagedMarker(FolderNotOurs):
    """A folder's marker is not what highwaynet writes (edited, truncated, or received so): nothing it
    names is used, and the folder is written only once it holds nothing highwaynet did not write."""


class DiskFull(OSError):
    """A file could not be written because its disk (or the user's quota) is full."""


def _special(folder: Path) -> str | None:
    resolved = folder.resolve()
    if resolved == Path(resolved.anchor):
        return "the file system's root"
    if resolved == Path.home().resolve():
        return "your home folder"
    return None


def _a(kind: str) -> str:
    """``"a run"``, ``"an analysis"``: a folder's kind with its article."""
    return ("an " if kind[:1] in ("a", "e", "i", "o", "u") else "a ") + kind


def _marker_problem(found: Any) -> str | None:
    """What is wrong with a marker's contents (None: nothing). ``written`` must list plain file names:
    a separator, ``.``, ``..`` or an absolute path would name something outside the folder's own files."""
    if not isinstance(found, dict):
        return f"it holds {type(found).__name__}, not a JSON object"
    if found.get("kind") not in KINDS:
        return f"its kind is {found.get('kind')!r}, not one of {', '.join(KINDS)}"
    if not isinstance(found.get("id"), str) or not found["id"]:
        return f"its id is {found.get('id')!r}, not a run's identity"
    if "written" not in found:
        return "it has no 'written' list of the files highwaynet wrote"
    names = found["written"]
    if not isinstance(names, list):
        return f"its 'written' is {names!r}, not a list of file names"
    for name in names:
        if not isinstance(name, str):
            return f"its 'written' lists {name!r}, not a file name"
        if name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name or os.path.isabs(name) or (
                os.altsep and os.altsep in name):
            return f"its 'written' lists {name!r}, not the name of a file inside the folder"
    return None


def _parse_marker(data: bytes) -> tuple[dict[str, Any] | None, str | None]:
    try:
        found = parse_json(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None, "it is not valid JSON"
    problem = _marker_problem(found)
    return (None, problem) if problem else (found, None)


def _read_marker_at(folder: Path | int) -> tuple[dict[str, Any] | None, str | None]:
    """``(marker, None)``, ``(None, what is wrong)`` or ``(None, None)`` where there is none; ``folder`` a
    path or an open folder's descriptor. The marker itself is opened without following a link."""
    dir_fd, path = (folder, MARKER) if isinstance(folder, int) else (None, Path(folder) / MARKER)
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW, dir_fd=dir_fd)
    except FileNotFoundError:
        return None, None
    except OSError as error:
        if error.errno == errno.ELOOP:
            return None, "it is a symbolic link"
        if error.errno == errno.ENOTDIR:
            return None, None
        return None, f"it cannot be read ({error.strerror})"
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None, "it is not a regular file"
        return _parse_marker(f.read(1 << 22))


def read_marker(folder: str | Path) -> tuple[dict[str, Any] | None, str | None]:
    """A folder's marker, checked: ``(marker, None)``; ``(None, what is wrong)`` for a damaged one;
    ``(None, None)`` where there is none."""
    return _read_marker_at(check_path("folder", folder))


def marker(folder: str | Path) -> dict[str, Any] | None:
    """The marker of a folder highwaynet writes (its kind, identity and the files written), or None
    (none, or a damaged one: :func:`read_marker` says which)."""
    return read_marker(folder)[0]


def _damaged(folder: Path, problem: str) -> str:
    return f"{folder / MARKER}, highwaynet's list of the files it wrote in {folder}, is damaged ({problem})"


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


def read_json_in(folder: str | Path, name: str) -> Any:
    """What the file ``folder/name`` holds, read as JSON where it is a regular file (:func:`read_regular`: never
    a link); None where it is missing, a link, or not JSON (UTF-8)."""
    data = read_regular(folder, name)
    try:
        return parse_json(data.decode("utf-8")) if data is not None else None
    except (UnicodeDecodeError, ValueError):
        return None


def _names_a_recipe(folder: Path, name: str) -> bool:
    """Whether ``folder/name`` is a regular file (not a link) holding a JSON object that names a recipe."""
    found = read_json_in(folder, name)
    return isinstance(found, dict) and isinstance(found.get("recipe"), str)


def _legacy_run(folder: Path, entries: list[str]) -> bool:
    """A run folder that highwaynet 0.2 wrote: its config.json names a recipe and it holds only run files."""
    return set(entries) <= _LEGACY_RUN_FILES and _names_a_recipe(folder, "config.json")


def _legacy_sweep(folder: Path, entries: list[str]) -> bool:
    """A sweep folder that highwaynet 0.2 wrote: its sweep.json names a recipe, and beside it are only
    a sweep's own files and its runs' folders."""
    own = {"sweep.json", "summary.json", "report.md", "report.html", ".lock"}
    return all(e in own or e.endswith(".png") or ((folder / e).is_dir() and not (folder / e).is_symlink())
               for e in entries) and _names_a_recipe(folder, "sweep.json")


def _legacy(folder: Path, kind: str, entries: list[str]) -> bool:
    """Whether a folder without a marker holds only what a ``kind`` folder of highwaynet's holds, so that it
    can be marked as one: a run or sweep folder of 0.2."""
    return (kind == "run" and _legacy_run(folder, entries)) or (kind == "sweep" and _legacy_sweep(folder, entries))


def register_analysis(result: str, what: str, *, holds: Callable[[Path], bool] | None = None,
                      evidence: str = "") -> None:
    """Make known an analysis that writes into an ``analysis`` folder (:data:`ANALYSES`), so that each analysis
    refuses a folder holding another (:func:`check_analysis_folder`) and a folder of its whose marker is damaged
    is known by its result (:func:`check_claimable`). Called by the code that writes the analysis, on import.

    ``result``: the name of the file that shows it wrote into a folder; ``what``: the analysis in messages
    (``"the lesion study"``); ``holds(folder)``: whether ``folder`` holds its result, by default whether
    ``result`` is a regular file there (pass a stricter test where a file of that name may be another's, as a
    sweep's ``summary.json``: read it with :func:`read_json_in` or :func:`read_regular`, never through a link);
    ``evidence``: that test in words, for messages (default ``result``). Registering a result again replaces
    what was registered."""
    if not isinstance(result, str) or not result or "/" in result or os.sep in result or result in (".", ".."):
        raise ValueError(f"result must be a file's plain name, got {result!r}")
    ANALYSES[result] = what
    _RECOGNISED[result] = (evidence or result,
                           holds if holds is not None else (lambda folder: read_regular(folder, result) is not None))


def _holds_analysis(folder: Path) -> list[str]:
    """The results of :data:`ANALYSES` that ``folder`` holds, as each is recognised (:func:`register_analysis`)."""
    return [name for name, (_, holds) in _RECOGNISED.items() if holds(folder)]


def _evidence(kind: str) -> str:
    """What shows that a folder whose marker is damaged is a ``kind`` folder of highwaynet's, for messages."""
    if kind != "analysis":
        return "config.json naming a recipe" if kind == "run" else "sweep.json naming a recipe"
    shown = [evidence for evidence, _ in _RECOGNISED.values()]
    return (", ".join(shown[:-1]) + " or " + shown[-1] if len(shown) > 1 else shown[0] if shown
            else "result")


def _evidently(folder: Path, kind: str) -> bool:
    """Whether a folder whose marker is damaged shows that it is a ``kind`` folder of highwaynet's (its
    :func:`_evidence`, a regular file): for an analysis, the result of one of :data:`ANALYSES`."""
    if kind == "analysis":
        return bool(_holds_analysis(folder))
    return _names_a_recipe(folder, "config.json" if kind == "run" else "sweep.json")


def _its_own(folder: Path, kind: str, entries: list[str]) -> list[str]:
    """Those of ``entries`` that a ``kind`` folder of highwaynet's holds by name: regular files (and a run's
    TensorBoard folder), never a link. A damaged marker is made again listing these alone."""
    names = {"run": _LEGACY_RUN_FILES,
             "analysis": _ANALYSIS_FILES | (set(_holds_analysis(folder)) if kind == "analysis" else set()),
             "sweep": frozenset({"sweep.json", "summary.json", "report.md", "report.html"})}[kind]
    return [e for e in entries if (e in names or (kind == "sweep" and e.endswith(".png"))) and not
            (folder / e).is_symlink() and ((folder / e).is_file() or (e in _OPAQUE_FOLDERS and (folder / e).is_dir()))]


def check_claimable(folder: str | Path, kind: str, what: str = "") -> dict[str, Any] | None:
    """Whether :func:`claim` would take ``folder`` for ``kind``, without writing anything: its marker
    (None where the folder is new, empty, a 0.2 run or sweep to adopt, or one whose marker is damaged
    but whose own files show what it is, to mark again). ``what`` names the writer in messages.

    Raises:
        FolderNotOurs: the folder holds what highwaynet did not write, another kind of highwaynet
            folder, or is the root or the home folder.
        DamagedMarker: the folder's marker is damaged, and nothing in it shows it is a ``kind`` folder.
    """
    folder = check_path("folder", folder)
    what = what or _a(kind)
    special = _special(folder)
    if special is not None:
        raise FolderNotOurs(f"{folder} is {special}: {what} needs a folder of its own; pass a new folder "
                            f"(for example {folder / 'runs' / 'x'})")
    if not folder.exists():
        if folder.is_symlink():
            raise FolderNotOurs(f"{folder} is a symbolic link to {os.readlink(folder)}, which does not exist: "
                                f"highwaynet makes no folder through a link; pass a folder for {what}")
        above = next(p for p in folder.parents if p.exists() or p.is_symlink())
        if not above.is_dir():
            raise FolderNotOurs(f"{folder} cannot be made: {above} is a file, not a folder; pass a folder for {what}")
        return None
    if not folder.is_dir():
        raise FolderNotOurs(f"{folder} is a file, not a folder: pass a folder for {what}")
    for name in sorted(_WRITES & set(_entries(folder))):  # (refused now, not after hours of training)
        if (folder / name).is_symlink():
            raise LinkInFolder(f"{folder / name} is a symbolic link: highwaynet writes its files itself, never "
                               f"through a link (which could overwrite a file elsewhere); remove the link and run "
                               f"again")
    found, problem = read_marker(folder)
    if found is not None:
        if found["kind"] != kind:
            raise FolderNotOurs(f"{folder} is {_a(found['kind'])} folder of highwaynet's, not one for {what}: pass a "
                                f"folder of its own")
        return found
    entries = _entries(folder)
    if not entries or _legacy(folder, kind, entries) or (problem is not None and _evidently(folder, kind)):
        return None
    if problem is not None:
        raise DamagedMarker(f"{_damaged(folder, problem)}, and nothing there shows it is {what}'s folder (its "
                            f"{_evidence(kind)}): it holds {_describe(entries)}. Nothing was changed. Pass another "
                            f"folder; or, if this is highwaynet's, move the files that are yours out of {folder}, "
                            f"remove {MARKER} and run the command again")
    raise FolderNotOurs(f"{folder} holds files that highwaynet did not write ({_describe(entries)}): {what} writes "
                        f"only into a new or empty folder, or one it wrote before; pass another folder")


def check_analysis_folder(folder: str | Path, result: str, *, restart: bool | None = None) -> dict[str, Any] | None:
    """Whether the analysis whose result is the file ``result`` (a name of :data:`ANALYSES`) may write into
    ``folder``: :func:`check_claimable` for an ``analysis`` folder, and a folder holding another analysis' result
    (a regular file) is refused, since the two write ``report.md`` and one would replace the other's. Nothing is
    written. ``restart``: False where the command can remove what an earlier analysis wrote there first (its
    ``--restart``, which the message names), True where it will (another analysis is not refused then), None
    where it has no such option. Returns :func:`check_claimable`'s marker.

    Raises:
        ValueError: ``result`` is not the result of an analysis of :data:`ANALYSES`.
        FolderNotOurs: as :func:`check_claimable` (the folder is not one for an analysis).
        FileExistsError: the folder holds another analysis (named, with its file, and what to do).
    """
    folder = check_path("folder", folder)
    if result not in ANALYSES:
        raise ValueError(f"{result!r} is the result of no analysis made known (register_analysis): known are "
                         f"{', '.join(ANALYSES) or 'none'}")
    what = ANALYSES[result]
    found = check_claimable(folder, "analysis", what)
    if restart:
        return found
    for other, other_what in ANALYSES.items():
        if other != result and read_regular(folder, other) is not None:
            raise FileExistsError(f"{folder} holds {other_what} ({other}), whose report.md {what} would replace: pass "
                                  f"another --out (by default each analysis writes into a folder of its own)"
                                  + (", or --restart to remove it" if restart is False else ""))
    return found


#: ``identity(folder)``: the run identity a folder's own files carry (its checkpoint's, where it agrees with
#: its config.json), or None; and a few words on how it was found, or why not.
Identity = Callable[[Path], "tuple[str | None, str]"]


def claim(folder: str | Path, kind: str, what: str = "", *, identity: Identity | None = None,
          log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Make ``folder`` highwaynet's (creating it where new) for a ``kind`` of output; returns its marker.

    A folder already marked as this kind is returned as it is; a new or empty one is marked; a 0.2 run or
    sweep (no marker) is marked listing what it holds; a folder whose marker is damaged, but whose own files
    show what it is, is marked again listing only the files highwaynet writes there by name (the others
    stay the user's). ``identity`` (for a run) gives it back the identity its checkpoint carries; one line
    says so (``log``, default ``print``). Anything else raises :class:`FolderNotOurs` (:func:`check_claimable`).
    """
    folder = check_path("folder", folder)
    if check_claimable(folder, kind, what) is None:
        make_dirs(folder)
    with _marker_held(folder):  # (two processes claiming a new folder at once: one marks it, the other takes it)
        return _claim_held(folder, kind, what, identity, log)


def _claim_held(folder: Path, kind: str, what: str, identity: Identity | None,
                log: Callable[[str], None] | None) -> dict[str, Any]:
    found = check_claimable(folder, kind, what)
    if found is not None:
        return found
    problem = read_marker(folder)[1]
    entries = _entries(folder)
    listed = _its_own(folder, kind, entries) if problem is not None else entries
    found = _new_marker(kind, listed)
    how = ""
    if entries and identity is not None and kind == "run":
        run_id, how = identity(folder)
        if run_id is not None:
            found["id"] = run_id
    _write_marker(folder, found)
    if problem is not None or how:
        state = (_damaged(folder, problem) if problem else
                 f"{folder} had no marker ({MARKER}: written by 0.2, or its marker was removed)")
        others = sorted(set(entries) - set(listed))
        (log or print)(f"note: {state}: made again, listing the files there that highwaynet writes "
                       f"({_describe(listed) or 'none'})" + (f"; the others stay yours ({_describe(others)})"
                                                             if others else "") + (f"; {how}" if how else ""))
    return found


def adopt(folder: str | Path, *, identity: Identity | None = None,
          log: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """The marker of a folder highwaynet wrote: its own, or for a run or sweep folder of 0.2 (which had
    none), or one whose marker is damaged, one made now (:func:`claim`); None for any other folder
    (empty, or not highwaynet's)."""
    folder = check_path("folder", folder)
    found = marker(folder)
    if found is not None or not folder.is_dir() or not _entries(folder):
        return found
    for kind in KINDS:
        try:
            check_claimable(folder, kind)
        except FolderNotOurs:
            continue
        return claim(folder, kind, identity=identity, log=log)
    return None


def written(folder: str | Path) -> set[str]:
    """The names of the files highwaynet wrote into ``folder`` (empty for a folder without a valid marker)."""
    found = marker(folder)
    return set(found["written"]) if found is not None else set()


def _record(path: Path) -> None:
    """List ``path`` as written in its folder's marker, before it is written (a kill between the two
    leaves a name listed without its file, never a file of ours unlisted). A file already there that
    highwaynet did not write is refused (:class:`FolderNotOurs`): it is the user's, and stays."""
    if path.name in _INFRASTRUCTURE:
        return
    with _marker_held(path.parent):
        found, problem = read_marker(path.parent)
        if problem is not None:
            raise DamagedMarker(f"{_damaged(path.parent, problem)}: highwaynet writes nothing more there until it is "
                                f"made again; run the command again, which makes it from the files the folder holds")
        if found is None or path.name in found["written"] or path.name in _INFRASTRUCTURE:
            return
        if path.exists() or path.is_symlink():
            raise FolderNotOurs(f"{path} was not written by highwaynet, which never overwrites such a file: move it "
                                f"out of {path.parent} and run again")
        found["written"] = sorted({*found["written"], path.name})
        _write_marker(path.parent, found)


class _Held(threading.local):
    """The folders (device, inode) whose marker this thread holds (:func:`_marker_held`)."""

    def __init__(self) -> None:
        self.folders: set[tuple[int, int]] = set()


_held = _Held()


@contextmanager
def _marker_held(folder: str | Path, parent: int | None = None) -> Iterator[int | None]:
    """Hold ``folder``'s marker (below an open ``parent``: never through a link) while it is read and the folder
    written by it: an update (read, add a name, write), or a removal of what it lists (:func:`clear`). Two
    processes writing the folder at once (a run, and ``highwaynet report`` writing its page) each list their
    files, none lost, and never share the marker's temporary file; a name listed while the folder is cleared
    is not lost with the marker written after. Yields the folder open (None where there is none).

    An OS lock on the folder itself (``flock``, released when the process dies); none where the OS or the file
    system has no such lock. A thread that holds it already takes it again as held: an ``flock`` on another
    descriptor of the same folder would wait for the one this thread holds, for ever."""
    try:
        fd = _open_folder(folder, parent)
    except OSError:  # (no folder: nothing listed there)
        yield None
        return
    try:
        info = os.fstat(fd)
        key, held = (info.st_dev, info.st_ino), _held.folders
        if key in held:
            yield fd
            return
        lock(fd, wait=True)  # (no lock where the OS or the file system has none: as before, unlocked)
        held.add(key)
        try:
            yield fd
        finally:
            held.discard(key)
    finally:
        os.close(fd)  # (which releases the lock)


def make_folder(path: str | Path) -> None:
    """Make the folder ``path`` inside a folder of highwaynet's, listed in its marker first as a file is
    (:func:`clear` then removes it whole: for folders of files highwaynet does not name one by one, as
    TensorBoard's); never through a link, never in the place of something of the user's."""
    path = check_path("path", path)
    _refuse_link(path)
    if path.is_dir() and path.name in written(path.parent):
        return
    _record(path)
    make_dirs(path)


# -- removing what highwaynet wrote --------------------------------------------------------------
# Every removal lists the folder itself (os.scandir of an open folder) and acts on the entry found, by
# its name relative to that open folder: a regular file, or a folder highwaynet made; never a link
# (neither followed nor removed: highwaynet never writes one), never a path made from a stored name.

def _open_folder(name: str | Path, parent: int | None = None) -> int:
    """An open descriptor of a folder; below an open ``parent``, never through a link."""
    return open_folder(name, parent, follow=parent is None)


def _unlink_infrastructure(fd: int) -> None:
    for name in _INFRASTRUCTURE:
        try:
            if stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass


def _remove_tree(parent: int, name: str) -> None:
    """Remove the folder ``name`` below ``parent`` and all it holds (links themselves, never their targets)."""
    fd = _open_folder(name, parent)
    try:
        with os.scandir(fd) as found:
            entries = list(found)
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                _remove_tree(fd, entry.name)
            else:
                os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def _write_marker_at(fd: int, found: dict[str, Any]) -> None:
    tmp = MARKER + ".tmp"
    try:
        os.unlink(tmp, dir_fd=fd)
    except FileNotFoundError:
        pass
    out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644, dir_fd=fd)
    with os.fdopen(out, "wb") as f:
        f.write((json.dumps(found, indent=1) + "\n").encode())
    os.replace(tmp, MARKER, src_dir_fd=fd, dst_dir_fd=fd)


def _clear_folder(parent: int, name: str, where: Path | None = None, kind: str | None = None,
                  dry: bool = False) -> bool:
    """Clear the folder ``name`` below ``parent`` (``where``, for messages) as :func:`clear` does (a sweep's
    run, a level between a sweep and its runs holding runs, or, ``kind="analysis"``, a run's analysis), and
    remove it where nothing else is left; whether it was removed. A folder whose marker is damaged, one
    without a marker that holds no folder of highwaynet's, or one not of ``kind``, is left as it is.
    ``dry``: remove nothing, only raise what clearing it would (:func:`_remove_written`). Its marker is held
    throughout (:func:`_marker_held`), and the folder removed before it is let go."""
    with _marker_held(name, parent) as fd:
        if fd is None:
            return False
        found, problem = _read_marker_at(fd)
        if problem is not None or (kind is not None and (found is None or found["kind"] != kind)):
            return False
        removed, kept = _remove_written(fd, set(found["written"]) if found else set(), where or Path(name),
                                        sweep=found is None or found["kind"] == "sweep",
                                        analyses=found is not None and found["kind"] == "run", dry=dry)
        if dry or (found is None and not removed):
            return False
        with os.scandir(fd) as entries:
            left = [e.name for e in entries if not (e.name in _INFRASTRUCTURE and e.is_file(follow_symlinks=False))]
        if left:
            if found is not None:
                _write_marker_at(fd, _new_marker(found["kind"], kept))
            return False
        _unlink_infrastructure(fd)
        os.rmdir(name, dir_fd=parent)
    return True


def _remove_written(fd: int, listed: set[str], where: Path, sweep: bool, analyses: bool = False,
                    dry: bool = False) -> tuple[list[str], list[str]]:
    """Remove, in the open folder ``fd`` (``where``, for messages), each regular file named in ``listed`` and
    each folder of highwaynet's there (a listed one; in a sweep, each of its runs; in a run, ``analyses``,
    its analyses' folders); returns the names removed and those of listed folders partly kept (they hold
    files of the user's). ``dry``: remove nothing, only walk the folders that clearing would, raising
    what it would raise (so that :func:`clear` refuses before it removes anything, a study's runs too).

    Raises:
        LinkInFolder: ``analyses``, and a link stands in the place of an analysis' folder (refused before
            anything in the folder is removed: an analysis reached through it would outlive the run).
    """
    removed, kept = [], []
    with os.scandir(fd) as found:
        entries = sorted(found, key=lambda e: e.name)
    for entry in entries:
        if analyses and entry.name in _ANALYSIS_FOLDERS and entry.is_symlink():
            raise LinkInFolder(f"{where / entry.name} is a symbolic link where an analysis of the run is written "
                               f"(reproduce {entry.name}): starting the run over removes that analysis, of the "
                               f"weights before, and never through a link; remove the link (what it points to is "
                               f"not touched) and run again")
    for entry in entries:
        name = entry.name
        if name in _INFRASTRUCTURE or entry.is_symlink():
            continue
        if dry:  # (only the folders whose own clearing checks for links: a sweep's levels and runs)
            if entry.is_dir(follow_symlinks=False) and (name in listed or sweep) and not (
                    name in listed and name in _OPAQUE_FOLDERS) and not (
                    analyses and name in _ANALYSIS_FOLDERS and name not in listed):
                _clear_folder(fd, name, where / name, dry=True)
            continue
        if entry.is_file(follow_symlinks=False):
            if name in listed:
                os.unlink(name, dir_fd=fd)
                removed.append(name)
        elif entry.is_dir(follow_symlinks=False) and analyses and name in _ANALYSIS_FOLDERS and name not in listed:
            if _clear_folder(fd, name, where / name, kind="analysis"):
                removed.append(name)
        elif entry.is_dir(follow_symlinks=False) and (name in listed or sweep):
            if name in listed and name in _OPAQUE_FOLDERS:
                _remove_tree(fd, name)
                removed.append(name)
            elif _clear_folder(fd, name, where / name):
                removed.append(name)
            elif name in listed:
                kept.append(name)
    return removed, kept


def clear(folder: str | Path) -> list[str]:
    """Remove what ``folder``'s marker lists as written (each regular file; each folder highwaynet made
    there, as a sweep's runs, cleared the same way and removed once empty; a run's analyses, ``RUN/gates``
    and ``RUN/lesion``, cleared likewise), and give the folder a new identity (a run started over is another
    run); returns the names removed. What the user added to the folder stays, links included (a link in
    the place of a run's analysis is refused: :class:`LinkInFolder`); a folder whose marker is damaged or
    missing is left as it is. The marker is held throughout (:func:`_marker_held`): a name another process
    lists meanwhile (``highwaynet report`` writing its page) is kept in the new marker, not lost with the old."""
    folder = check_path("folder", folder)
    with _marker_held(folder) as fd:
        found = _read_marker_at(fd)[0] if fd is not None else None
        if fd is None or found is None:
            return []
        for dry in (True, False):  # (what it would refuse, before anything is removed)
            removed, kept = _remove_written(fd, set(found["written"]), folder, sweep=found["kind"] == "sweep",
                                            analyses=found["kind"] == "run", dry=dry)
        _write_marker(folder, _new_marker(found["kind"], kept))
    return removed


def remove_written(folder: str | Path, names: set[str] | frozenset[str]) -> list[str]:
    """Remove those of ``names`` that ``folder``'s marker lists and that are regular files there (found as
    :func:`clear` finds them, its marker held); returns the names removed."""
    folder = check_path("folder", folder)
    with _marker_held(folder) as fd:
        found = _read_marker_at(fd)[0] if fd is not None else None
        if fd is None or found is None:
            return []
        return _remove_written(fd, set(names) & set(found["written"]) - _OPAQUE_FOLDERS, folder, sweep=False)[0]


def remove_stray_files(folder: str | Path) -> list[str]:
    """Remove the temporary files a killed writer can leave (``NAME.tmp`` beside a file highwaynet
    writes); returns their names. A user's own ``*.tmp`` stays. Call with the folder's lock held; the marker
    is held too (:func:`_marker_held`), so that the temporary of an update under way is not one of them."""
    folder = check_path("folder", folder)
    with _marker_held(folder):
        ours = written(folder) | {MARKER + ".tmp"}
        stray = sorted(p for p in folder.glob("*.tmp") if p.name in ours and p.is_file() and not p.is_symlink())
        for path in stray:
            path.unlink(missing_ok=True)
    return [p.name for p in stray]


# -- folders a refused command made ---------------------------------------------------------------

_new_folders: list[Path] | None = None  # the folders made since track_new_folders(), outermost first


def make_dirs(folder: str | Path) -> None:
    """``folder.mkdir(parents=True, exist_ok=True)``, each level made noted for :func:`remove_new_folders`."""
    folder = check_path("folder", folder)
    missing = []
    level = folder
    while not (level.exists() or level.is_symlink()) and level != level.parent:
        missing.append(level)
        level = level.parent
    folder.mkdir(parents=True, exist_ok=True)
    if _new_folders is not None:
        _new_folders.extend(reversed(missing))


def track_new_folders(on: bool = True) -> None:
    """Note the folders highwaynet makes from now on, for :func:`remove_new_folders` (``on=False``: stop)."""
    global _new_folders
    _new_folders = [] if on else None


def remove_new_folders() -> list[Path]:
    """Remove again, deepest first, the folders made since :func:`track_new_folders` that hold nothing but
    what a command writes before it trains (its marker, its lock, ``config.json``, ``sweep.json``,
    ``vocab.json``): a command refused once it had made its folder (data missing, say) leaves none
    behind. Returns the folders removed; the tracking ends."""
    global _new_folders
    made, _new_folders = _new_folders or [], None
    removed = []
    for folder in reversed(made):
        try:
            fd = _open_folder(folder)
        except OSError:
            continue
        try:
            found = marker(folder)
            listed = set(found["written"]) if found else set()
            with os.scandir(fd) as entries:
                if not all(e.is_file(follow_symlinks=False) and (
                        e.name in _INFRASTRUCTURE or (e.name in _BEFORE_TRAINING and e.name in listed))
                        for e in entries):
                    continue
            for name in listed & _BEFORE_TRAINING:
                try:
                    os.unlink(name, dir_fd=fd)
                except FileNotFoundError:
                    pass
            _unlink_infrastructure(fd)
        finally:
            os.close(fd)
        try:
            folder.rmdir()
        except OSError:
            continue
        removed.append(folder)
    return removed


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
                                 f"pass another --out) and run the same command again: it goes on where it stopped")


def _write_all(f: Any, data: bytes) -> None:
    """Every write of a file's bytes goes through here (the tests slow it down to kill a writer halfway)."""
    f.write(data)


def _replace(path: Path, data: bytes, keep_previous: Path | None = None) -> None:
    """Write ``data`` beside ``path`` (``NAME.tmp``, created anew, links not followed), then put it in place;
    with ``keep_previous``, the file it replaces is moved there first."""
    _refuse_link(path)
    tmp = path.with_name(path.name + ".tmp")
    # The folder's marker is held from the temporary's listing to its move into place: two processes writing
    # the same file at once (two reports of one run) would otherwise share ``NAME.tmp``, one removing or
    # moving the other's half-written one.
    with _marker_held(path.parent):
        _record(tmp)  # (listed before it exists: a kill leaves it listed, and the next run may remove it)
        if tmp.is_symlink() or tmp.is_dir():
            raise FolderNotOurs(f"{tmp} is in the place of highwaynet's temporary file and is not one: move it "
                                f"out of {tmp.parent} and run again")
        tmp.unlink(missing_ok=True)  # a stale one of ours, left by a kill
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as f:
                _write_all(f, data)
        except BaseException as error:  # (Ctrl-C midway too: the half-written temporary is not left)
            tmp.unlink(missing_ok=True)
            if isinstance(error, OSError):
                raise _disk_full(path, error) from None
            raise
        if keep_previous is not None and path.exists():
            os.replace(path, keep_previous)
        os.replace(tmp, path)


def write_bytes(path: str | Path, data: bytes, keep_previous: str | Path | None = None) -> None:
    """Write ``path`` in one step (a reader, or a kill, never meets half of it), without following links.

    With ``keep_previous``, the file it replaces is moved there first (a checkpoint keeps the one
    before it). The file is listed in its folder's marker, if the folder has one.
    """
    path = check_path("path", path)
    previous = check_path("keep_previous", keep_previous) if keep_previous is not None else None
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
    path = check_path("path", path)
    _refuse_link(path)
    _record(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW, 0o644)
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
    folder = check_path("folder", folder)
    path = folder / name
    try:
        inside = path.resolve().is_relative_to(folder.resolve())
    except (OSError, ValueError):
        return None
    if not inside or any(p.is_symlink() for p in (path, *path.parents) if p != folder and
                         p.is_relative_to(folder)) or not path.is_file():
        return None
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()
