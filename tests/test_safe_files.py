"""``highwaynet/_files.py`` and its writers, attacked as a careless user and as a second process: what a killed
writer's folder is told from, the error a block raises, what a kill or Ctrl-C leaves."""

import gzip
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import process_timeout

import highwaynet
from highwaynet._files import private_folder, remove_killed
from highwaynet.data.download import DataFile, default_data_dir, locate, sha256_of
from highwaynet.training import files

posix = pytest.mark.skipif(sys.platform == "win32", reason="no fcntl: a writer's folder is not locked there")


def _users_folders(beside: Path) -> dict[str, list[str]]:
    """Folders at a writer's name (``.v.hdf5.XXXX.embed``) that are not a killed writer's: what each holds."""
    def folder(middle, mode=0o700, files=("v.hdf5",)):
        path = beside / f".v.hdf5.{middle}.embed"
        path.mkdir(mode=mode)
        for name in files:
            (path / name).write_bytes(b"the user's own")
        return path

    folder("notes", files=("v.hdf5", "notes.txt"))  # (anything else in it)
    folder("backup", mode=0o755)  # (a folder a user makes: open to others)
    linked = folder("linked", files=())
    (linked / "v.hdf5").symlink_to(beside / "elsewhere")
    folder("links", files=("v.hdf5",))
    (beside / ".v.hdf5.links.embed" / "more").symlink_to(beside / "elsewhere")
    if os.geteuid() == 0:  # (another user's: as root, any user's can be made, and root could remove it)
        other = folder("others", mode=0o777)
        for path in (other, other / "v.hdf5"):
            os.chown(path, 4321, 4321)
    return {p.name: sorted(q.name for q in p.iterdir()) for p in beside.iterdir()}


@posix
def test_a_folder_at_a_writers_name_that_no_writer_made_is_left_whole(tmp_path):
    """The removal of what killed writers left took the writer's file (``v.hdf5``) out of any unlocked folder at a
    writer's name, then left the folder where it held anything else: a user's file lost from a folder of the
    user's. It removed too a folder of the user's own making (``0755``) and another user's, holding just that
    file. A killed writer's folder is ``mkdtemp``'s (``0700``, this user's) and holds its files alone."""
    before = _users_folders(tmp_path)
    killed = tmp_path / ".v.hdf5.k1ll3d.embed"
    killed.mkdir(mode=0o700)
    (killed / "v.hdf5").write_bytes(b"half the vectors")
    assert remove_killed(tmp_path, ".v.hdf5.", ".embed", ("v.hdf5",)) == [killed.name]
    assert {p.name: sorted(q.name for q in p.iterdir()) for p in tmp_path.iterdir()} == before
    assert (tmp_path / ".v.hdf5.notes.embed" / "v.hdf5").read_bytes() == b"the user's own"


@posix
def test_a_users_folder_at_a_pieces_writers_name_keeps_its_files(tmp_path, capsys):
    """``elmo embed`` removed the piece from a folder of the user's at a piece's writer's name in ``OUT.parts``, and
    the output from one beside ``OUT``, where each held other files too."""
    from elmo_reference import options, write_model

    from highwaynet.cli import main

    model = write_model(tmp_path / "model", options())[:2]
    source = tmp_path / "sentences.txt"
    source.write_text("a b c\nd e\n")
    parts = tmp_path / "v.hdf5.parts"
    parts.mkdir()
    mine = [tmp_path / ".v.hdf5.mine.embed", parts / ".batch-00000000.h5.mine.tmp"]
    for folder, name in zip(mine, ("v.hdf5", "batch-00000000.h5"), strict=True):
        folder.mkdir(mode=0o700)
        (folder / name).write_bytes(b"the user's own")
        (folder / "notes.txt").write_text("the user's own")
    held = [sorted(p.name for p in folder.iterdir()) for folder in mine]
    assert main(["elmo", "embed", "--options", str(model[0]), "--weights", str(model[1]), "--input", str(source),
                 "--out", str(tmp_path / "v.hdf5"), "--device", "cpu", "--no-progress"]) == 0
    assert [sorted(p.name for p in folder.iterdir()) for folder in mine] == held
    assert "v.hdf5.parts is kept: it holds files that are not this command's (.batch-00000000.h5.mine.tmp)" in \
        capsys.readouterr().out


def test_the_error_of_the_block_is_raised_not_that_of_the_folders_removal(tmp_path):
    """Where the folder could not be removed on leaving (a file put in it), that ``OSError`` ("Directory not empty")
    was raised in place of the block's own error (a Ctrl-C became a traceback of it), and after a block that ended
    well, its file moved into place, as if the write had failed."""
    with pytest.raises(KeyboardInterrupt):
        with private_folder(tmp_path, ".v.", ".tmp", ("v",)) as scratch:
            (scratch / "v").write_text("half")
            (scratch / "another").write_text("put there")
            raise KeyboardInterrupt
    with private_folder(tmp_path, ".w.", ".tmp", ("w",)) as scratch:
        (scratch / "w").write_text("whole")
        (scratch / "another").write_text("put there")
        os.replace(scratch / "w", tmp_path / "w")
    assert (tmp_path / "w").read_text() == "whole"
    left = sorted(p for p in tmp_path.iterdir() if p.name.startswith("."))  # (holding another's file: left whole)
    assert len(left) == 2 and all([q.name for q in p.iterdir()] == ["another"] for p in left)


KILLED_WAITING = """
import os, signal, sys, urllib.request
from pathlib import Path
from highwaynet.data.download import DataFile, locate

def no_answer_yet(*args, **kwargs):  # (a server slow to answer: killed as it waits)
    os.kill(os.getpid(), signal.SIGKILL)

urllib.request.urlopen = no_answer_yet
locate(DataFile("data.csv.gz", sys.argv[2], sys.argv[3]), [Path(sys.argv[1])], download=True, hint="")
"""


@posix
def test_a_download_killed_while_the_server_is_slow_to_answer_leaves_nothing_after_the_next(tmp_path):
    """A download killed while it waited for the server (up to a minute) left its folder empty, which the next
    download took for one just made and left: hidden, for ever, one more for each such kill."""
    served = tmp_path / "server" / "data.csv.gz"
    served.parent.mkdir()
    with gzip.open(served, "wt") as f:
        f.write("1,2,3\n")
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(highwaynet.__file__).parents[1])}
    done = subprocess.run([sys.executable, "-c", KILLED_WAITING, str(home), served.resolve().as_uri(),
                           sha256_of(served)], env=env, capture_output=True, text=True, timeout=process_timeout(120))
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert [p.name.endswith(".download") for p in home.iterdir()] == [True]
    locate(DataFile("data.csv.gz", served.resolve().as_uri(), sha256_of(served)), [home], download=True, hint="")
    assert [p.name for p in home.iterdir()] == ["data.csv.gz"]


def test_the_record_of_verified_files_is_not_written_through_a_link(tmp_path):
    """``verified.json`` was written as ``verified.json.PID.tmp`` (through a link planted there: the file it named
    overwritten with the record), then renamed: the link became the record. Two hosts sharing the folder, their
    processes of one PID, wrote into one temporary."""
    data = tmp_path / "data.txt"
    data.write_text("1 2 3\n")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    record = default_data_dir() / "verified.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    (record.parent / f"verified.json.{os.getpid()}.tmp").symlink_to(victim)
    locate(DataFile("data.txt", None, sha256_of(data)), [tmp_path], download=False, hint="")
    assert victim.read_text() == "precious"
    assert not record.is_symlink() and str(data.resolve()) in json.loads(record.read_text())
    assert sorted(p.name for p in record.parent.iterdir()) == ["verified.json", f"verified.json.{os.getpid()}.tmp"]


def test_a_run_folders_file_written_when_ctrl_c_comes_leaves_no_temporary(tmp_path, monkeypatch):
    """``write_bytes`` removed its half-written ``NAME.tmp`` where the write failed (a full disk), not where it was
    interrupted (Ctrl-C while a checkpoint is written): the temporary stayed beside the file."""
    (tmp_path / "checkpoint.pt").write_bytes(b"epoch 1")

    def interrupted(f, data):
        f.write(data[:3])
        raise KeyboardInterrupt

    monkeypatch.setattr(files, "_write_all", interrupted)
    with pytest.raises(KeyboardInterrupt):
        files.write_bytes(tmp_path / "checkpoint.pt", b"epoch 2")
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]
    assert (tmp_path / "checkpoint.pt").read_bytes() == b"epoch 1"


def _unwritable(folder: Path, monkeypatch) -> None:
    """``folder`` as the OS shows a folder this user cannot write (root writes anywhere): ``os.access`` says so,
    and a folder made in it is refused."""
    folder.chmod(0o555)
    access, mkdir = os.access, os.mkdir

    def refused(path, *args, **kwargs):
        if Path(path).parent == folder:
            raise PermissionError(13, "Permission denied", str(path))
        return mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path) != folder and access(path, mode, **kw))
    monkeypatch.setattr(os, "mkdir", refused)


@pytest.mark.parametrize("below", ["", "new/"])
def test_a_folder_this_user_cannot_write_is_named_before_anything_is_made_in_it(tmp_path, monkeypatch, capsys,
                                                                                 below):
    """Where the folder a writer makes (``OUT.parts``, ``save_files``' folder, a download's data folder) was to be
    made in a folder this user cannot write, the OS's error came through ("[Errno 13] Permission denied:
    'RO/v.hdf5.parts'"), not the message that names the folder and what to do."""
    from elmo_reference import options, write_model

    from highwaynet.cli import main
    from highwaynet.elmo import ELMoBiLM

    model = write_model(tmp_path / "model", options())[:2]
    source = tmp_path / "sentences.txt"
    source.write_text("a b c\n")
    served = tmp_path / "served.txt"
    served.write_text("1 2 3\n")
    ro = tmp_path / "ro"
    ro.mkdir()
    _unwritable(ro, monkeypatch)
    words = f"{ro} is not writable by this user (or is on a read-only file system): "
    assert main(["elmo", "embed", "--options", str(model[0]), "--weights", str(model[1]), "--input", str(source),
                 "--out", str(ro / f"{below}v.hdf5"), "--device", "cpu", "--no-progress"]) == 2
    assert words + "elmo embed writes " in capsys.readouterr().err
    with pytest.raises(PermissionError, match=f"^{re.escape(words)}save_files writes "):
        ELMoBiLM.from_files(*model).save_files(ro / below)
    with pytest.raises(PermissionError, match=f"^{re.escape(words)}the download of served.txt writes "):
        locate(DataFile("served.txt", served.as_uri(), sha256_of(served)), [ro / below], download=True, hint="")
    assert list(ro.iterdir()) == []
