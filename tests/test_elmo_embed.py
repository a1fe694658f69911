"""``highwaynet elmo embed``: the output file's layout and values, running again, resuming, bad input,
and two processes under torchrun writing one file."""

import hashlib
import os
import re
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from elmo_reference import options, write_model
from test_distributed import launch

from highwaynet.cli import main
from highwaynet.data.download import UncheckedDownloadWarning
from highwaynet.elmo import ELMoBiLM, batch_to_ids
from highwaynet.elmo import files as elmo_files
from highwaynet.elmo.mix import remove_sentence_boundaries
from highwaynet.training.run_dir import release_lock, take_lock

WORKER = Path(__file__).with_name("elmo_embed_worker.py")
LINES = ["The cat sat on the mat .", "A dog .", "Colorless green ideas sleep furiously", "x",
         "M K V L A A G I", "one two"]


@pytest.fixture
def model(tmp_path):
    return write_model(tmp_path / "model", options())[:2]


def embed(model, tmp_path, *extra, out="vectors.hdf5", lines=LINES):
    source = tmp_path / "sentences.txt"
    source.write_text("".join(line + "\n" for line in lines))
    return main(["elmo", "embed", "--options", str(model[0]), "--weights", str(model[1]), "--input", str(source),
                 "--out", str(tmp_path / out), "--batch-size", "4", "--device", "cpu", "--no-progress", *extra])


def expected_layers(model, lines):
    bilm = ELMoBiLM.from_files(*model, stateful=False)
    out = []
    for first in range(0, len(lines), 4):
        batch = [line.split() for line in lines[first:first + 4]]
        layers, mask = bilm(batch_to_ids(batch))
        stacked = torch.stack([remove_sentence_boundaries(layer, mask)[0] for layer in layers], 1)
        out += [stacked[i, :, :len(s)].numpy() for i, s in enumerate(batch)]
    return out


def test_the_file_holds_every_layer_of_every_line_as_the_python_api_gives(model, tmp_path, capsys):
    assert embed(model, tmp_path) == 0
    assert "wrote" in capsys.readouterr().out
    with h5py.File(tmp_path / "vectors.hdf5", "r") as f:
        assert sorted(f, key=int) == [str(i) for i in range(len(LINES))]
        assert f.attrs["layers"] == "all" and f.attrs["lines"] == len(LINES) and not f.attrs["stateful"]
        for i, (line, expected) in enumerate(zip(LINES, expected_layers(model, LINES), strict=True)):
            assert f[str(i)].shape == (3, len(line.split()), 12) and f[str(i)].dtype == np.float32
            np.testing.assert_allclose(f[str(i)][...], expected, rtol=0, atol=1e-6)
    assert not (tmp_path / "vectors.hdf5.parts").exists()
    assert embed(model, tmp_path) == 0  # run again: nothing to do
    assert "is complete" in capsys.readouterr().out


@pytest.mark.parametrize("layers", ["top", "average"])
def test_top_and_average(model, tmp_path, layers):
    assert embed(model, tmp_path, "--layers", layers) == 0
    expected = expected_layers(model, LINES)
    with h5py.File(tmp_path / "vectors.hdf5", "r") as f:
        for i, full in enumerate(expected):
            want = full[-1] if layers == "top" else full.mean(0)
            np.testing.assert_allclose(f[str(i)][...], want, rtol=0, atol=1e-6)


def test_an_interrupted_run_goes_on_from_the_batches_it_wrote(model, tmp_path, capsys, monkeypatch):
    from highwaynet.elmo import embed as embed_module

    written = embed_module._write_piece

    def stop_after_the_first(path, *args):
        written(path, *args)
        raise KeyboardInterrupt

    monkeypatch.setattr(embed_module, "_write_piece", stop_after_the_first)
    assert embed(model, tmp_path) == 130
    assert not (tmp_path / "vectors.hdf5").exists()
    assert [p.name for p in (tmp_path / "vectors.hdf5.parts").glob("*.h5")] == ["batch-00000000.h5"]
    monkeypatch.setattr(embed_module, "_write_piece", written)
    assert embed(model, tmp_path) == 0
    assert "resuming: 1 of 2 batches were written before" in capsys.readouterr().out
    with h5py.File(tmp_path / "vectors.hdf5", "r") as f:
        assert len(f) == len(LINES)
    assert embed(model, tmp_path, "--layers", "top") == 2  # the finished file, with other settings
    assert "embedded with other settings (--layers 'all' there, 'top' asked)" in capsys.readouterr().err


def _interrupted(model, tmp_path, monkeypatch, *extra):
    """An embedding stopped after its first batch's piece (of two): the pieces folder."""
    from highwaynet.elmo import embed as embed_module

    written = embed_module._write_piece

    def stop_after_the_first(path, *args):
        written(path, *args)
        raise KeyboardInterrupt

    monkeypatch.setattr(embed_module, "_write_piece", stop_after_the_first)
    assert embed(model, tmp_path, *extra) == 130
    monkeypatch.setattr(embed_module, "_write_piece", written)
    return tmp_path / "vectors.hdf5.parts"


def _holds_the_vectors(model, path):
    with h5py.File(path, "r") as f:
        assert sorted(f, key=int) == [str(i) for i in range(len(LINES))]
        for i, expected in enumerate(expected_layers(model, LINES)):
            assert f[str(i)].dtype == np.float32
            np.testing.assert_allclose(f[str(i)][...], expected, rtol=0, atol=1e-6)


def _edit_line_0(f, how, folder):
    """Line 0's vectors as this command never writes them: in float16, or kept in another file (an external
    link to a file of the same values)."""
    values = f["0"][...]
    del f["0"]
    if how == "float16":
        f["0"] = values.astype(np.float16)
    else:
        with h5py.File(folder / "elsewhere.h5", "w") as other:
            other["values"] = values
        f["0"] = h5py.ExternalLink(str(folder / "elsewhere.h5"), "/values")


def test_run_again_with_other_settings_is_refused_naming_each_and_restart_starts_over(model, tmp_path, capsys):
    """Run again = go on; other settings refused with each difference and the two ways on; ``--restart``
    embeds again. A file of the user's at ``--out`` is never removed, not even by ``--restart``."""
    assert embed(model, tmp_path) == 0
    assert embed(model, tmp_path, "--layers", "top", "--batch-size", "3") == 2
    message = capsys.readouterr().err
    assert "--layers 'all' there, 'top' asked; --batch-size 4 there, 3 asked" in message
    assert "--restart" in message and "another --out" in message
    assert embed(model, tmp_path, "--layers", "top", "--restart") == 0
    assert "starting over (--restart): removed" in capsys.readouterr().out
    with h5py.File(tmp_path / "vectors.hdf5", "r") as f:
        assert f.attrs["layers"] == "top" and f["0"].ndim == 2
    mine = tmp_path / "mine.hdf5"
    for content in (b"my own notes", None):
        if content is None:  # an HDF5 file of the user's
            mine.unlink()
            with h5py.File(mine, "w") as f:
                f["0"] = np.zeros(3)
        else:
            mine.write_bytes(content)
        before = mine.read_bytes()
        assert embed(model, tmp_path, "--restart", out="mine.hdf5") == 2
        assert "is not a file this command wrote" in capsys.readouterr().err
        assert mine.read_bytes() == before


@pytest.mark.parametrize("damage, words", [
    (lambda f: f.__delitem__("1"), "line 1's vectors are missing"),
    (lambda f: f.create_dataset("99", data=np.zeros(3)), "it holds '99', which is no line's vectors"),
    (lambda f: (f.__delitem__("0"), f.create_dataset("0", data=np.zeros((3, 2, 12), np.float32))),
     r"line 0's vectors have shape \(3, 2, 12\), not \(..., 7, 12\)"),
    (lambda f: f.attrs.__setitem__("lines", 2), "it says it holds 2 lines, the input has 6"),
])
def test_a_damaged_output_is_refused_and_restart_embeds_it_again(model, tmp_path, capsys, damage, words):
    assert embed(model, tmp_path) == 0
    with h5py.File(tmp_path / "vectors.hdf5", "a") as f:
        damage(f)
    assert embed(model, tmp_path) == 2
    message = capsys.readouterr().err
    assert "was written by this command but is damaged" in message and "--restart" in message
    assert re.search(words, message), message
    assert embed(model, tmp_path, "--restart") == 0
    _holds_the_vectors(model, tmp_path / "vectors.hdf5")


@pytest.mark.parametrize("damage, words", [
    ("float16", "line 0's vectors are of dtype float16, not float32"),
    ("external link", r"line 0's dataset is an external link \('0' to '/values' in the file '.*elsewhere.h5'\)"),
    ("index", r"it cannot be read \(.*bad symbol table node signature\)"),
])
def test_an_output_holding_what_this_command_never_writes_is_damaged(model, tmp_path, capsys, damage, words):
    """Float16 vectors, or a line's vectors linked to another file, were taken for a complete output; a damaged
    index was a RuntimeError from inside h5py."""
    assert embed(model, tmp_path) == 0
    if damage == "index":
        _damage_the_index(tmp_path / "vectors.hdf5")
    else:
        with h5py.File(tmp_path / "vectors.hdf5", "a") as f:
            _edit_line_0(f, damage, tmp_path)
    assert embed(model, tmp_path) == 2
    message = capsys.readouterr().err
    assert "was written by this command but is damaged" in message and re.search(words, message), message
    assert embed(model, tmp_path, "--restart") == 0
    _holds_the_vectors(model, tmp_path / "vectors.hdf5")


@pytest.mark.parametrize("key, value, words", [
    ("layers", np.array(["all", "top"], dtype=h5py.string_dtype()),
     r"embedded with other settings \(--layers \['all', 'top'\] there, 'all' asked\)"),
    ("lines", np.array([6, 6]), r"is damaged: it says it holds \[6, 6\] lines, the input has 6"),
])
def test_an_output_whose_settings_were_edited_into_arrays_says_so_and_restart_goes_on(model, tmp_path, capsys, key,
                                                                                       value, words):
    """An attribute edited into an array was NumPy's "can only convert an array of size 1 to a Python scalar",
    --restart too: no way on but removing the file by hand."""
    assert embed(model, tmp_path) == 0
    with h5py.File(tmp_path / "vectors.hdf5", "a") as f:
        f.attrs[key] = value
    assert embed(model, tmp_path) == 2
    message = capsys.readouterr().err
    assert re.search(words, message), message
    assert embed(model, tmp_path, "--restart") == 0
    _holds_the_vectors(model, tmp_path / "vectors.hdf5")


def _damage_the_index(path):
    """The file's list of datasets damaged (its one symbol table node's signature overwritten): h5py's
    RuntimeError "bad symbol table node signature" where the datasets are listed."""
    data = path.read_bytes()
    assert data.count(b"SNOD") == 1
    path.write_bytes(data.replace(b"SNOD", b"XXXX"))


@pytest.mark.parametrize("damage", ["truncated", "a line missing", "a stranger dataset", "float16", "external link",
                                    "index"])
def test_a_damaged_piece_is_embedded_again(model, tmp_path, capsys, monkeypatch, damage):
    """Float16 passed as float32 (and was copied so into the output); an external link was followed (another
    file's values copied into the output); a damaged index was a RuntimeError from inside h5py."""
    parts = _interrupted(model, tmp_path, monkeypatch)
    piece = parts / "batch-00000000.h5"
    if damage == "truncated":
        piece.write_bytes(piece.read_bytes()[:100])
    elif damage == "index":
        _damage_the_index(piece)
    else:
        with h5py.File(piece, "a") as f:
            if damage == "a line missing":
                del f["2"]
            elif damage == "a stranger dataset":
                f["x"] = np.zeros(3)
            else:
                _edit_line_0(f, damage, tmp_path)
    assert embed(model, tmp_path) == 0
    assert f"{piece} is damaged" in capsys.readouterr().out
    _holds_the_vectors(model, tmp_path / "vectors.hdf5")


@pytest.mark.parametrize("settings", ['{"layers": ', "[" * 100_000 + "]" * 100_000])  # (that: a RecursionError)
def test_the_pieces_folder_keeps_the_users_files_and_a_damaged_settings_file_asks_for_restart(
        model, tmp_path, capsys, monkeypatch, settings):
    """Files of the user's stay, "batch-notes.tmp" too (every "batch-*.tmp" was taken for a piece's and removed)."""
    parts = _interrupted(model, tmp_path, monkeypatch)
    (parts / "notes.txt").write_text("mine")
    (parts / "batch-notes.tmp").write_text("mine too")
    (parts / "settings.json").write_text(settings)
    assert embed(model, tmp_path) == 2
    assert "settings.json is damaged; start over with --restart" in capsys.readouterr().err
    assert embed(model, tmp_path, "--restart") == 0
    _holds_the_vectors(model, tmp_path / "vectors.hdf5")
    assert (parts / "notes.txt").read_text() == "mine" and (parts / "batch-notes.tmp").read_text() == "mine too"
    assert sorted(p.name for p in parts.iterdir()) == ["batch-notes.tmp", "notes.txt"]
    assert "holds files that are not this command's (batch-notes.tmp, notes.txt)" in capsys.readouterr().out


def test_a_second_command_writing_the_same_file_is_refused_and_changes_nothing(model, tmp_path, capsys):
    out, parts = tmp_path / "vectors.hdf5", tmp_path / "vectors.hdf5.parts"

    def refused(*extra):
        parts.mkdir(exist_ok=True)
        held = take_lock(parts / ".lock", FileExistsError)  # (as a command writing vectors.hdf5 holds it)
        try:
            assert embed(model, tmp_path, *extra) == 2
        finally:
            release_lock(held)
        assert f"{out} is being written by process {os.getpid()}" in capsys.readouterr().err

    refused()  # (the same command twice at once: the second embeds nothing)
    assert not out.exists() and [p.name for p in parts.iterdir()] == [".lock"]
    assert embed(model, tmp_path) == 0  # (once it is released)
    before = out.read_bytes()
    refused("--restart")  # (removing nothing the other writes or wrote)
    assert out.read_bytes() == before
    assert embed(model, tmp_path, "--restart") == 0
    _holds_the_vectors(model, out)
    assert not parts.exists()


def test_an_output_below_a_file_says_so(model, tmp_path, capsys):
    (tmp_path / "file").write_text("mine")
    assert embed(model, tmp_path, out="file/vectors.hdf5") == 2  # (it said "[Errno 20] Not a directory")
    assert f"vectors.hdf5 cannot be written: {tmp_path / 'file'} is a file, not a folder" in capsys.readouterr().err
    assert (tmp_path / "file").read_text() == "mine"


def test_a_folder_given_for_a_file_is_named_as_a_folder(model, tmp_path, capsys):
    source = tmp_path / "s.txt"
    source.write_text("a b\n")
    assert main(["elmo", "embed", "--options", str(model[0]), "--weights", str(tmp_path), "--input", str(source),
                 "--out", str(tmp_path / "o.hdf5"), "--device", "cpu"]) == 2
    assert f"the weights file {tmp_path} is a folder; pass the file" in capsys.readouterr().err
    assert main(["elmo", "embed", "--options", str(model[0]), "--weights", str(model[1]), "--input", str(tmp_path),
                 "--out", str(tmp_path / "o.hdf5"), "--device", "cpu"]) == 2
    assert f"the input file {tmp_path} is a folder; pass the file" in capsys.readouterr().err


def test_a_device_that_computes_nothing_is_refused_before_anything_is_made(model, tmp_path, capsys):
    """``--device meta`` was a RuntimeError from inside torch ("Tensor.item() cannot be called on meta tensors"),
    with the pieces folder made."""
    assert embed(model, tmp_path, "--device", "meta") == 2
    assert "device 'meta' holds no values (PyTorch's meta device" in capsys.readouterr().err
    assert not (tmp_path / "vectors.hdf5").exists() and not (tmp_path / "vectors.hdf5.parts").exists()


@pytest.mark.parametrize("change, error, words", [
    ({"say": None}, TypeError, r"say must be a function of one str \(print, a logger's info\), got NoneType"),
    ({"device": 0}, TypeError, r"device must be a str \(auto, cpu, cuda, cuda:N\) or a torch.device, got int 0"),
])
def test_embed_file_checks_its_arguments_before_it_embeds(model, tmp_path, change, error, words):
    """``say=None`` was "'NoneType' object is not callable" once the file was written; ``device=0`` named
    another function's argument ("name must be ...")."""
    from highwaynet.elmo.embed import embed_file

    source = tmp_path / "s.txt"
    source.write_text("a b\n")
    with pytest.raises(error, match=words):
        embed_file(*model, source, tmp_path / "o.hdf5", **{"progress": False, **change})
    assert not (tmp_path / "o.hdf5").exists() and not (tmp_path / "o.hdf5.parts").exists()


@pytest.mark.parametrize("lines, words", [(["a b", "", "c"], "line 2 (counting from 1) is empty"),
                                          ([], "holds no sentences")])
def test_bad_input_files_are_refused(model, tmp_path, capsys, lines, words):
    assert embed(model, tmp_path, lines=lines) == 2
    assert words in capsys.readouterr().err


def test_model_and_files_are_asked_for_plainly(model, tmp_path, capsys):
    source = tmp_path / "s.txt"
    source.write_text("a b\n")
    assert main(["elmo", "embed", "--input", str(source), "--out", str(tmp_path / "o.hdf5")]) == 2
    assert "pass --options and --weights" in capsys.readouterr().err
    assert main(["elmo", "embed", "--model", "original", "--data-dir", str(tmp_path), "--input", str(source),
                 "--out", str(tmp_path / "o.hdf5")]) == 2
    assert "elmo-2x4096_512_2048cnn_2xhighway/options.json not found" in capsys.readouterr().err


def test_a_published_model_downloads_unchecked_saying_so_or_pinned_with_sha256(model, tmp_path, capsys, monkeypatch):
    """``--model NAME --download``: the publishers give no sha256, so each file comes with a warning that
    gives its own; ``--sha256 OPTIONS WEIGHTS`` checks them (a wrong one refused, nothing left of it)."""
    monkeypatch.setitem(elmo_files.MODELS, "tiny", elmo_files.PublishedModel(
        elmo_files.DataFile("tiny/options.json", model[0].as_uri(), ""),
        elmo_files.DataFile("tiny/weights.hdf5", model[1].as_uri(), ""), "a tiny model"))
    digests = [hashlib.sha256(path.read_bytes()).hexdigest() for path in model]
    source = tmp_path / "s.txt"
    source.write_text("a b\n")

    def run(data, *extra):
        return main(["elmo", "embed", "--model", "tiny", "--data-dir", str(tmp_path / data), "--download", "--input",
                     str(source), "--out", str(tmp_path / data / "o.hdf5"), "--device", "cpu", "--no-progress", *extra])

    assert run("pinned", "--sha256", digests[0], "0" * 64) == 2
    assert f"weights.hdf5 (downloaded from {model[1].as_uri()}) does not match its sha256 (expected {'0' * 64}, got " \
           f"{digests[1]})" in capsys.readouterr().err
    assert not (tmp_path / "pinned" / "tiny" / "weights.hdf5").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UncheckedDownloadWarning)
        assert run("pinned", "--sha256", *digests) == 0
    with pytest.warns(UncheckedDownloadWarning) as unchecked:
        assert run("unchecked") == 0
    assert [f"Its sha256 is {d};" in str(w.message) for w, d in zip(unchecked, digests, strict=True)] == [True, True]
    assert main(["elmo", "embed", "--options", str(model[0]), "--weights", str(model[1]), "--sha256", *digests,
                 "--input", str(source), "--out", str(tmp_path / "o.hdf5")]) == 2
    assert "--sha256 checks --model's files" in capsys.readouterr().err


@pytest.mark.parametrize("which", [0, 1])
def test_a_sha256_that_is_not_one_names_the_option_typed(tmp_path, capsys, which):
    """``--sha256`` values are checked as the option (not as download_model's Python argument, which the
    command line's user never typed), before anything is looked for or downloaded."""
    pins = ["0" * 64, "1" * 64]
    pins[which] = ["x" * 64, "0" * 63][which]
    with pytest.raises(SystemExit) as info:
        main(["elmo", "embed", "--model", "small", "--data-dir", str(tmp_path / "data"), "--download", "--sha256",
              *pins, "--input", str(tmp_path / "s.txt"), "--out", str(tmp_path / "o.hdf5")])
    error = capsys.readouterr().err
    assert info.value.code == 2 and "download_model" not in error
    assert f"argument --sha256: must be a sha256, 64 hexadecimal digits (as sha256sum prints), got " \
           f"{pins[which]!r} ({len(pins[which])} characters)" in error
    assert not (tmp_path / "data").exists()


def test_two_processes_under_torchrun_write_one_file_that_one_process_writes(model, tmp_path, monkeypatch):
    source = tmp_path / "sentences.txt"
    source.write_text("\n".join(LINES * 2) + "\n")  # 12 lines: 3 batches of 4, rank 0 takes two
    monkeypatch.setenv("ELMO_PIECES_LOG", str(tmp_path / "pieces.log"))
    for processes in (1, 2):
        (tmp_path / "pieces.log").unlink(missing_ok=True)
        launch([str(WORKER), "elmo", "embed", "--options", str(model[0]), "--weights", str(model[1]),
                "--input", str(source), "--out", str(tmp_path / f"out{processes}.hdf5"), "--batch-size", "4",
                "--device", "cpu", "--no-progress"], processes)
    # each batch embedded once, batch k by rank k mod 2
    assert sorted((tmp_path / "pieces.log").read_text().splitlines()) == [
        "0 batch-00000000.h5", "0 batch-00000002.h5", "1 batch-00000001.h5"]
    with h5py.File(tmp_path / "out1.hdf5", "r") as one, h5py.File(tmp_path / "out2.hdf5", "r") as two:
        assert sorted(one) == sorted(two) and len(one) == 12
        for name in one:
            np.testing.assert_array_equal(one[name][...], two[name][...])
    assert not (tmp_path / "out2.hdf5.parts").exists()
    # run again under torchrun: nothing embedded; with --restart: every batch again, once, the same file
    for again, embedded in (((), []), (("--restart",), ["0 batch-00000000.h5", "0 batch-00000002.h5",
                                                         "1 batch-00000001.h5"])):
        (tmp_path / "pieces.log").unlink(missing_ok=True)
        said = launch([str(WORKER), "elmo", "embed", "--options", str(model[0]), "--weights", str(model[1]),
                       "--input", str(source), "--out", str(tmp_path / "out2.hdf5"), "--batch-size", "4",
                       "--device", "cpu", "--no-progress", *again], 2)
        log = tmp_path / "pieces.log"
        assert sorted(log.read_text().splitlines() if log.exists() else []) == embedded, said
        assert ("starting over (--restart)" in said) == bool(again) and ("nothing to do" in said) != bool(again)
        with h5py.File(tmp_path / "out1.hdf5", "r") as one, h5py.File(tmp_path / "out2.hdf5", "r") as two:
            assert sorted(one) == sorted(two)
            for name in one:
                np.testing.assert_array_equal(one[name][...], two[name][...])
        assert not (tmp_path / "out2.hdf5.parts").exists()


def _lines_of(path):
    with h5py.File(path, "r") as f:
        return len(f), f.attrs["layers"]


@pytest.mark.parametrize("planted", ["a link", "another output"])
def test_what_is_at_out_tmp_is_neither_written_through_nor_taken(model, tmp_path, capsys, planted):
    """The output was written as ``OUT.tmp`` through h5py, then renamed: a link planted there was written
    through (the file it names overwritten with the vectors) and became ``OUT``; a file there, another command's
    output ``--out OUT.tmp``, was written over and moved away."""
    there = tmp_path / "vectors.hdf5.tmp"
    if planted == "a link":
        victim = tmp_path / "victim.txt"
        victim.write_text("precious")
        there.symlink_to(victim)
    else:
        assert embed(model, tmp_path, "--layers", "top", out="vectors.hdf5.tmp") == 0
    before = there.read_bytes()
    assert embed(model, tmp_path) == 0
    assert there.read_bytes() == before and there.is_symlink() == (planted == "a link")
    assert not (tmp_path / "vectors.hdf5").is_symlink()
    _holds_the_vectors(model, tmp_path / "vectors.hdf5")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".", "vectors"))) == [
        "vectors.hdf5", "vectors.hdf5.tmp"]  # (nothing left beside them)
    if planted == "another output":
        assert _lines_of(there) == (len(LINES), "top")
    capsys.readouterr()


def test_a_link_at_a_pieces_old_temporary_name_is_not_written_through(model, tmp_path, capsys, monkeypatch):
    """A piece was written as ``batch-N.h5.PID.tmp`` through h5py: a link planted there was written through."""
    parts = _interrupted(model, tmp_path, monkeypatch)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (parts / f"batch-00000001.h5.{os.getpid()}.tmp").symlink_to(victim)
    assert embed(model, tmp_path) == 0
    assert victim.read_text() == "precious"
    _holds_the_vectors(model, tmp_path / "vectors.hdf5")
    assert [p.name for p in parts.iterdir()] == [f"batch-00000001.h5.{os.getpid()}.tmp"]  # (a link: not ours)
    assert "holds files that are not this command's" in capsys.readouterr().out


def test_an_output_written_meanwhile_by_another_command_is_checked_under_the_lock(model, tmp_path, capsys,
                                                                                  monkeypatch):
    """``OUT`` was checked before the lock was taken: a command that ended in between (its lock let go, ``OUT``
    written with other settings) had its output written over without a word."""
    from highwaynet.elmo import embed as embed_module

    lock_parts, others = embed_module._lock_parts, []

    def another_command_first(out, parts):
        if not others:
            others.append(out)
            assert embed(model, tmp_path, "--layers", "top") == 0  # (it ends just before this one's lock)
        return lock_parts(out, parts)

    monkeypatch.setattr(embed_module, "_lock_parts", another_command_first)
    assert embed(model, tmp_path) == 2
    assert "holds vectors embedded with other settings (--layers 'top' there, 'all' asked)" in capsys.readouterr().err
    assert _lines_of(tmp_path / "vectors.hdf5") == (len(LINES), "top")
    assert not (tmp_path / "vectors.hdf5.parts").exists()  # (the refused command's lock: removed with its folder)


def test_a_lock_taken_on_a_lock_file_removed_meanwhile_is_taken_again(model, tmp_path, monkeypatch):
    """The command that holds the lock removes its file at its end: a second that opened the file before and locked
    it after held a lock on a file no longer there, which a third made anew and locked too (two writers)."""
    from highwaynet.elmo import embed as embed_module

    real, calls, checked = embed_module.take_lock, [], []

    def opened_before_the_holder_removed_it(path, busy):
        fd = real(path, busy)
        if not calls:
            path.unlink()  # (as the command that held it does at its end)
        calls.append(path)
        return fd

    claim = embed_module._claim_parts

    def a_third_command(parts, wanted):
        with pytest.raises(FileExistsError):  # (the lock on the file in the folder is held)
            real(parts / ".lock", FileExistsError)
        checked.append(parts)
        return claim(parts, wanted)

    monkeypatch.setattr(embed_module, "take_lock", opened_before_the_holder_removed_it)
    monkeypatch.setattr(embed_module, "_claim_parts", a_third_command)
    assert embed(model, tmp_path) == 0
    assert len(calls) == 2 and checked
    _holds_the_vectors(model, tmp_path / "vectors.hdf5")


KILLER = """
import os, signal, sys
from highwaynet.cli import main
from highwaynet.elmo import embed

replace_all = embed.replace_all

def killed(moves, what):
    if moves[0][1].name == sys.argv[1]:
        os.kill(os.getpid(), signal.SIGKILL)
    return replace_all(moves, what)

embed.replace_all = killed
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("killed_at", ["batch-00000001.h5", "vectors.hdf5"])
def test_what_a_killed_run_left_is_removed_or_resumed_by_the_next(model, tmp_path, capsys, killed_at):
    """A run killed (SIGKILL) while it wrote a piece, or gathered the pieces into ``OUT``, leaves its folder with
    what it had written (hidden): the next run removes it, and goes on from the pieces written."""
    import subprocess
    import sys

    source = tmp_path / "sentences.txt"
    source.write_text("".join(line + "\n" for line in LINES))
    (tmp_path / "killer.py").write_text(KILLER)
    args = ["elmo", "embed", "--options", str(model[0]), "--weights", str(model[1]), "--input", str(source),
            "--out", str(tmp_path / "vectors.hdf5"), "--batch-size", "4", "--device", "cpu", "--no-progress"]
    done = subprocess.run([sys.executable, str(tmp_path / "killer.py"), killed_at, *args], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == -9, done.stderr
    hidden = [p for p in [*tmp_path.iterdir(), *(tmp_path / "vectors.hdf5.parts").iterdir()]
              if p.name.startswith(f".{killed_at}.")]
    assert len(hidden) == 1 and (hidden[0] / killed_at).is_file()
    assert main(args) == 0
    assert "resuming: " in capsys.readouterr().out
    _holds_the_vectors(model, tmp_path / "vectors.hdf5")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["killer.py", "model", "sentences.txt", "vectors.hdf5"]


def test_a_folder_given_as_out_is_named_as_a_folder(model, tmp_path, capsys):
    """It said "exists and is not a file this command wrote (an HDF5 file with its settings)"."""
    (tmp_path / "vectors").mkdir()
    assert embed(model, tmp_path, out="vectors") == 2
    assert f"{tmp_path / 'vectors'} is a folder: --out names the output file (as " \
           f"{tmp_path / 'vectors' / 'vectors.hdf5'})" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("vectors")] == ["vectors"]


def test_the_pieces_folder_made_again_by_the_next_command_as_it_is_removed_is_left_to_it(tmp_path, monkeypatch):
    """A command at its end removes its files from the pieces folder, then the folder: a next command that made its
    lock file there in between failed the removal ("Directory not empty"), a traceback once ``OUT`` was written."""
    from highwaynet.elmo import embed as embed_module

    parts = tmp_path / "vectors.hdf5.parts"
    parts.mkdir()
    (parts / "settings.json").write_text("{}")
    (parts / "batch-00000000.h5").write_bytes(b"")
    scandir = os.scandir

    class ThenTheNextCommand:
        def __init__(self, path):
            self.entries = scandir(path)

        def __enter__(self):
            return self.entries.__enter__()

        def __exit__(self, *error):
            self.entries.__exit__(*error)
            (parts / ".lock").write_text("process 1 on host\n")  # (after the listing, before the folder's removal)

    monkeypatch.setattr(os, "scandir", ThenTheNextCommand)
    assert embed_module._remove_parts(parts) == []
    assert [p.name for p in parts.iterdir()] == [".lock"]


def test_what_killed_writers_left_is_looked_for_once_a_run_not_once_a_piece(model, tmp_path, monkeypatch):
    # The pieces folder holds one file a batch: listing it again before each piece's write grows with the
    # square of the batches. The run looks once, under its lock, before the first piece.
    from highwaynet import _files
    from highwaynet.elmo import embed as embed_module

    looked = []
    remove_killed = _files.remove_killed

    def counted(beside, prefix, *args):
        looked.append(prefix)
        return remove_killed(beside, prefix, *args)

    monkeypatch.setattr(_files, "remove_killed", counted)
    monkeypatch.setattr(embed_module, "remove_killed", counted)
    assert embed(model, tmp_path, "--batch-size", "1") == 0  # 6 batches, 6 pieces
    assert not [prefix for prefix in looked if prefix.startswith(".batch-")], looked
    with h5py.File(tmp_path / "vectors.hdf5", "r") as f:
        assert len(f) == len(LINES)


@pytest.mark.skipif(os.name == "nt", reason="no fcntl: a save's folder is not locked there")
def test_the_fingerprint_is_of_the_pair_the_vectors_were_made_with(model, tmp_path, monkeypatch, capsys):
    """The pair was hashed for the file's fingerprint, then read again by from_files, neither holding the folder's
    lock: a save_files into the model's folder between the two left vectors of the new weights in a file that says
    it holds the old ones' (its weights_sha256), taken as complete by the next run. The save is forced in just
    after the weights are hashed; the embedding holds the pair throughout, and the save waits for it (or 2 s)."""
    import threading

    from highwaynet.elmo import embed as embed_module

    before = hashlib.sha256(model[1].read_bytes()).hexdigest()
    expected = expected_layers(model, LINES)
    other = ELMoBiLM.from_files(*model, stateful=False)
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(0.25)
    hashed, saver = embed_module._sha256, []

    def hash_then_save(path):
        digest = hashed(path)
        if Path(path) == model[1] and not saver:
            saver.append(threading.Thread(target=other.save_files, args=(model[0].parent,)))
            saver[0].start()
            saver[0].join(timeout=2)  # (unlocked, the save ends meanwhile; locked, it waits for the embedding)
        return digest

    monkeypatch.setattr(embed_module, "_sha256", hash_then_save)
    try:
        assert embed(model, tmp_path) == 0
    finally:
        saver[0].join(timeout=60)
    capsys.readouterr()
    assert hashlib.sha256(model[1].read_bytes()).hexdigest() != before  # (the save done, after the embedding)
    with h5py.File(tmp_path / "vectors.hdf5", "r") as f:
        assert f.attrs["weights_sha256"] == before
        for i, line_expected in enumerate(expected):
            np.testing.assert_allclose(f[str(i)][...], line_expected, rtol=0, atol=1e-6)
