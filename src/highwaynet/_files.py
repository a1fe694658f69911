"""The low-level pieces of highwaynet's safe file writing, shared by its writers (:mod:`highwaynet.data.download`,
:mod:`highwaynet.training.files`, :meth:`highwaynet.elmo.ELMoBiLM.save_files`, ``elmo embed``). It imports nothing
of the package's, so that each can use it (``data`` never imports ``training``).

- :data:`DIRECTORY`, :data:`NOFOLLOW`: ``os.open``'s flags, 0 where the OS has none.
- :func:`open_folder`, :func:`lock`: a folder opened (never through a link in its place, where asked), and an OS
  lock on an open file or folder (``flock``: released when its descriptor is closed or its process dies; POSIX
  only), waited for or only tried, exclusive or shared; :func:`folder_held`: a folder's lock held for a block (the
  writer of several files that go together, exclusive, while it moves them into place; their readers, shared).
- :func:`private_folder`, :func:`replace_all`: files written whole in a folder made for one writer alone beside
  their places (``mkdtemp``: new, the user's only, so that nothing planted there is written through and two
  writers never write into each other's), then each moved into its place in one step (``os.replace``: a reader,
  or a kill, never meets half of one). The folder is locked while it is in use, so that one a killed writer left
  (hidden, it would stay for ever) is told from one in use, and removed by the next writer of the same files
  (:func:`remove_killed`).
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

try:  # (POSIX only: where there is none, nothing is locked, and no writer's folder is taken for a killed one's)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["DIRECTORY", "NOFOLLOW", "check_replaceable", "folder_held", "lock", "open_folder", "private_folder",
           "remove_killed", "replace_all"]

#: ``os.open``'s flag: fail unless the path is a folder (0 where the OS has none).
DIRECTORY = getattr(os, "O_DIRECTORY", 0)
#: ``os.open``'s flag: fail where the path's last part is a symbolic link (0 where the OS has none).
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def open_folder(name: str | Path, parent: int | None = None, *, follow: bool = True) -> int:
    """A read-only descriptor of the folder ``name`` (below the open folder ``parent``, where given); with
    ``follow=False``, never through a link in its place (``OSError`` there)."""
    return os.open(name, os.O_RDONLY | DIRECTORY | (0 if follow else NOFOLLOW), dir_fd=parent)


def lock(fd: int, *, wait: bool, shared: bool = False) -> bool:
    """Take the OS lock on the open file or folder ``fd`` (``flock``, exclusive, or with ``shared`` shared with
    other shared holders alone; released when ``fd`` is closed or its process dies). ``wait``: wait while another
    descriptor holds it (in this process or another) in a way that excludes this one; else take it only where it
    is free now. Whether it is held: False where another holds it (without ``wait``), or where the OS (Windows) or
    the file system has no such lock (the caller then goes on unlocked)."""
    if fcntl is None:  # pragma: no cover - Windows
        return False
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))
    except OSError:
        return False
    return True


@contextmanager
def folder_held(folder: str | Path, *, shared: bool) -> Iterator[bool]:
    """Hold the OS lock on ``folder`` itself (:func:`lock`, waited for) while the block runs: exclusive for the
    writer of files that go together, while it moves them into place, ``shared`` for their readers, while they
    read them; so that a reader that holds it never meets some of one writer's files beside another's, nor two
    writers' moves interleave. Yields whether it is held: False where the folder cannot be opened (the block then
    fails on its own, or makes it), or the OS or the file system has no such lock (the block then runs unlocked).
    A thread must not take it again on the same folder in a way that excludes what it holds: it would wait for
    itself, for ever."""
    try:
        fd = open_folder(folder)
    except OSError:
        yield False
        return
    try:
        yield lock(fd, wait=True, shared=shared)
    finally:
        os.close(fd)  # (which releases the lock)


def check_replaceable(paths: Sequence[Path], what: str) -> None:
    """Raise, naming the path and what to do, where a new file moved into the place of one of ``paths``
    (:func:`replace_all`) would be refused by the OS; nothing is changed. ``what`` names the writer (``"the
    download of NAME"``). A link in the place is no obstacle: it is replaced, never followed. Where the folder
    that holds the place is yet to be made, the folder it would be made in is checked.

    Raises:
        IsADirectoryError: a folder stands in the place of the file.
        PermissionError: the folder that holds the place (or that it would be made in) is not writable by this
            user (or is on a read-only file system); or the place holds another user's file in a folder where
            only a file's owner may replace it (its sticky bit, as ``/tmp``'s).
    """
    for path in paths:
        folder = next((p for p in path.parents if os.path.lexists(p)), Path("."))
        if not folder.is_dir():  # (a file, or a link to none, above the place: making its folder names it)
            continue
        if not os.access(folder, os.W_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids):
            where = f"writes {path.name} there" if folder == path.parent else f"writes {path} below it"
            raise PermissionError(f"{folder} is not writable by this user (or is on a read-only file system): {what} "
                                  f"{where}; make it writable, or pass another folder, and run again (nothing was "
                                  f"changed)")
        if folder != path.parent:
            continue
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(found.st_mode):
            raise IsADirectoryError(f"{path} is a folder, where {what} writes the file {path.name}: move or rename "
                                    f"that folder, or pass another one, and run again (nothing was changed)")
        held, euid = os.stat(folder), os.geteuid() if hasattr(os, "geteuid") else 0
        if held.st_mode & stat.S_ISVTX and euid not in (0, held.st_uid, found.st_uid):
            raise PermissionError(f"{path} belongs to another user (uid {found.st_uid}), in a folder where only a "
                                  f"file's owner may replace it (its sticky bit, as /tmp's): {what} cannot write "
                                  f"{path.name} there; pass a folder of your own and run again (nothing was "
                                  f"changed)")


def replace_all(moves: Sequence[tuple[Path, Path]], what: str) -> None:
    """Move each ``(source, target)`` of ``moves`` into place, in order, each in one step (``os.replace``; a
    link in a target's place is replaced, never followed). Every target is checked first
    (:func:`check_replaceable`, ``what`` naming the writer), so that a failure the OS would give is raised
    before the first move; nothing runs between two moves, so that only a kill, or an OS failure, between two
    of them (microseconds) leaves some moved and the others not."""
    check_replaceable([target for _, target in moves], what)
    for source, target in moves:
        os.replace(source, target)


def _middle(entry: str, prefix: str, suffix: str) -> str | None:
    """The random part ``mkdtemp`` put between ``prefix`` and ``suffix`` in ``entry`` (no dot in it: the folder
    of one file's writer is not taken for a longer name's, ``.a.b.X`` for ``.a.``'s), or None."""
    if not (entry.startswith(prefix) and entry.endswith(suffix)):
        return None
    middle = entry[len(prefix):len(entry) - len(suffix)]
    return middle if middle and "." not in middle else None


def remove_killed(beside: Path, prefix: str, suffix: str, names: Sequence[str]) -> list[str]:
    """Remove the folders that writers of the files ``names`` killed before their end (SIGKILL, SIGTERM, a closed
    terminal) left in ``beside`` (:func:`private_folder`'s, ``prefix``, ``suffix``), with what they had written;
    returns their names. A folder is removed only where it looks as a writer's does and no writer holds it: its
    lock can be taken (a writer at work holds it), it is this user's and closed to others (``mkdtemp``'s
    ``0700``: a folder of the user's own making, ``0755``, is not one), and it holds one of ``names`` or more
    as regular files, and nothing else (one just made holds none yet; one that holds anything else, or a link,
    is not a writer's). Such a folder is left whole, with all it holds; so is every one where the OS or the file
    system has no lock."""
    if fcntl is None:  # pragma: no cover - Windows
        return []
    try:
        entries = os.listdir(beside)
    except OSError:
        return []
    removed = []
    for entry in sorted(entries):
        if _middle(entry, prefix, suffix) is None:
            continue
        try:
            fd = open_folder(Path(beside) / entry, follow=False)
        except OSError:
            continue
        try:
            if not lock(fd, wait=False):  # (held: a writer at work; no lock on this file system: left)
                continue
            found = _regular_files(fd, names)
            if not found or not _a_writers(fd, found):
                continue
            for name in found:
                os.unlink(name, dir_fd=fd)
            os.rmdir(Path(beside) / entry)  # (anything else in it: left, with the folder)
            removed.append(entry)
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed


def _a_writers(fd: int, found: list[str]) -> bool:
    """Whether the open folder ``fd``, which holds the regular files ``found``, is as :func:`private_folder` makes
    them: this user's, closed to others (``mkdtemp``'s ``0700``), and holding those files alone."""
    info = os.fstat(fd)
    euid = os.geteuid() if hasattr(os, "geteuid") else info.st_uid
    return info.st_uid == euid and not info.st_mode & 0o077 and sorted(os.listdir(fd)) == sorted(found)


def _regular_files(fd: int, names: Sequence[str]) -> list[str]:
    """Those of ``names`` that are regular files (not links) in the open folder ``fd``."""
    found = []
    for name in names:
        try:
            if stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                found.append(name)
        except FileNotFoundError:
            continue
    return found


@contextmanager
def private_folder(beside: Path, prefix: str, suffix: str, names: Sequence[str], *,
                   remove_killed_first: bool = True) -> Iterator[Path]:
    """A new folder in ``beside`` for one writer alone, named ``prefix``, ``mkdtemp``'s random part, ``suffix``
    (a ``prefix`` that starts with a dot hides it), in which it writes the files ``names`` (and nothing else),
    to move them into place (:func:`replace_all`). It is locked (:func:`lock`) while it is in use; the folders
    that killed writers of the same files left in ``beside`` are removed first (:func:`remove_killed`; not with
    ``remove_killed_first=False``, for a writer of many files whose caller removed them once before all). On
    leaving, whatever happened, those of ``names`` still in it are removed, then the folder; where that fails
    (a file of another's put in it), the folder is left as it is, and the error of the block, if any, is the one
    raised."""
    if remove_killed_first:
        remove_killed(beside, prefix, suffix, names)
    folder = Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=beside))
    fd = None
    try:
        if fcntl is not None:
            fd = open_folder(folder)
            lock(fd, wait=True)  # (waits only while a remove_killed looks at it, which finds no file yet: never long)
        yield folder
    finally:
        try:
            for name in names:
                (folder / name).unlink(missing_ok=True)
            folder.rmdir()  # (before its lock is let go)
        except OSError:  # (not to hide the block's own error, or fail a write that is in place: the folder is left)
            pass
        finally:
            if fd is not None:
                os.close(fd)
