"""A file of sentences to an HDF5 file of ELMo vectors: what ``highwaynet elmo embed`` runs.

The output's layout (what AllenNLP's removed ``elmo`` command wrote, its keys and shapes):

- one dataset per input line, named by the line's index from 0 (``"0"``, ``"1"``, ...), float32:
  ``(num_layers + 1, tokens, 2 P)`` with ``layers="all"`` (layer 0 the token vectors, then each LSTM
  layer, ``[forward | backward]``), ``(tokens, 2 P)`` with ``"top"`` (the last layer) or ``"average"``
  (the layers' mean); ``tokens`` the line's white-space-separated tokens, without ``<S>`` and ``</S>``;
- the file's attributes: ``layers``, ``lines``, ``stateful``, ``batch_size``, the sha256 of the
  input, options and weight files, and the ``highwaynet_version`` that wrote it.

Nothing half-written is ever the output: each batch's vectors go to a piece file of their own in
``OUT.parts/``; when every piece is there, they are copied into one file, which is moved to ``OUT``,
and the pieces are removed. Each file (a piece, the pieces' ``settings.json``, the output) is written
whole in a folder made for it alone (``highwaynet/_files.py``: ``OUT.parts/.NAME.x1y2.tmp``,
``.OUT.x1y2.embed`` beside ``OUT``), then moved into its place in one step: never through a link planted at
its name, never into a file of another's (``OUT.tmp`` may be another command's ``--out``); the folder a kill
left (hidden, with what it had written) is removed by the next run. Run again with the
same settings, the command goes on from the pieces already written (and says so), or, where ``OUT``
is complete, says so and does nothing; with other settings it is refused, naming each difference and
the two ways on (``--restart``, another ``--out``); while one command writes ``OUT`` (it holds
``OUT.parts/.lock``), a second is refused, and ``OUT`` is read again once the lock is taken (a command
that ended meanwhile may have written it). ``--restart`` removes what the command wrote
(``OUT``, where it carries this command's settings, and its pieces) and starts over; a file of the
user's is never removed. What is read back is checked first: a piece or an output that does not hold
each of its lines' vectors, with their shapes, is damaged (a damaged piece is embedded again; a
damaged output is refused, with ``--restart`` as the way on). Under ``torchrun`` each process embeds
every ``world``-th batch (batch ``k`` by rank ``k mod world``) into the shared pieces folder, and
rank 0 writes the one output file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from .. import __version__
from .._checks import check_choice, check_flag, check_path, check_size, describe
from .._files import check_replaceable, private_folder, remove_killed, replace_all
from ..data.download import parse_json, read_text
from ..training.distributed import barrier, init_distributed
from ..training.run_dir import release_lock, take_lock
from .bilm import ELMoBiLM, _pair_held, _read_pair
from .chars import batch_to_ids
from .files import DAMAGED_HDF5, stored_dataset
from .mix import remove_sentence_boundaries

__all__ = ["LAYERS", "embed_file"]

#: What each line's dataset holds: every layer, the top one, or their mean.
LAYERS = ("all", "top", "average")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_sentences(path: Path) -> list[list[str]]:
    _check_file("input", path)
    lines = read_text(path).split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # (the final line's end)
    blank = [i for i, line in enumerate(lines) if not line.split()]
    if blank:
        shown = ", ".join(str(i + 1) for i in blank[:10]) + (" ..." if len(blank) > 10 else "")
        raise ValueError(f"{path}: line{'s' if len(blank) > 1 else ''} {shown} (counting from 1) "
                         f"{'are' if len(blank) > 1 else 'is'} empty: ELMo has no vector for an empty sentence. "
                         f"Remove {'them' if len(blank) > 1 else 'it'} (the output's keys count the lines from 0)")
    if not lines:
        raise ValueError(f"{path} holds no sentences")
    return [line.split() for line in lines]


def _select(layers: list[torch.Tensor], kind: str) -> torch.Tensor:
    stacked = torch.stack(layers, dim=1)  # (B, L + 1, T, 2P)
    if kind == "top":
        return stacked[:, -1]
    if kind == "average":
        return stacked.mean(dim=1)
    return stacked


#: What writes the output, for the messages of :func:`check_replaceable`.
_WHAT = "elmo embed"
#: The end of the name of the folder a piece, or ``settings.json``, is written in (``OUT.parts/.NAME.x1y2.tmp``),
#: and of that the output is written in (``.OUT.x1y2.embed``, beside it): :func:`private_folder`'s.
_SCRATCH, _MERGE_SCRATCH = ".tmp", ".embed"


def _write_piece(path: Path, first_line: int, vectors: torch.Tensor, lengths: list[int]) -> None:
    """Write a batch's piece whole in a folder of this call's own in the pieces folder (``.NAME.x1y2.tmp``: never
    through a link, never into another process's), then move it into place."""
    import h5py

    # (what killed writers of pieces left was removed once, under the lock, before the first piece
    # (:func:`_remove_killed_scratch`): not again for each piece, which would list the pieces folder each time)
    with private_folder(path.parent, f".{path.name}.", _SCRATCH, (path.name,), remove_killed_first=False) as scratch:
        with h5py.File(scratch / path.name, "x") as f:
            for row, length in enumerate(lengths):
                f.create_dataset(str(first_line + row), data=vectors[row, ..., :length, :].numpy())
        replace_all([(scratch / path.name, path)], _WHAT)


def _check_file(what: str, path: Path) -> None:
    if path.is_dir():
        raise FileNotFoundError(f"the {what} file {path} is a folder; pass the file")
    if not path.is_file():
        raise FileNotFoundError(f"the {what} file {path} not found")


def _fingerprint(options: Path, weights: Path, input_path: Path, layers: str, batch_size: int,
                 stateful: bool) -> dict[str, Any]:
    return {"options_sha256": _sha256(options), "weights_sha256": _sha256(weights),
            "input_sha256": _sha256(input_path), "layers": layers, "batch_size": batch_size, "stateful": stateful}


#: How a difference is named: the option that sets it (a file's content is compared by its sha256).
_OPTIONS = {"options_sha256": "--options (its content)", "weights_sha256": "--weights (its content)",
            "input_sha256": "--input (its content)", "layers": "--layers", "batch_size": "--batch-size",
            "stateful": "--stateful"}


def _stored_fingerprint(out: Path) -> dict[str, Any] | None:
    import h5py

    if out.is_symlink() or not out.is_file():
        return None
    try:
        with h5py.File(out, "r") as f:
            return {key: _attribute(value) for key, value in f.attrs.items()}
    except DAMAGED_HDF5:
        return None


def _attribute(value: Any) -> Any:
    """An HDF5 attribute as a Python value to compare: a number or string as itself, an array (an edit: this
    command writes none) as a list, which equals no setting."""
    if isinstance(value, np.ndarray) and value.size != 1:
        return value.tolist()
    return value.item() if hasattr(value, "item") else value


def _shown(key: str, value: Any) -> str:
    return f"{value[:12]}..." if key.endswith("_sha256") and isinstance(value, str) else repr(value)


def _differences(stored: dict[str, Any], wanted: dict[str, Any]) -> str:
    """Each setting in which ``stored`` differs from ``wanted``, by its option: ``--layers 'all' there,
    'top' asked``; empty where they agree."""
    return "; ".join(f"{_OPTIONS.get(key, key)} {_shown(key, stored.get(key))} there, {_shown(key, value)} asked"
                     for key, value in wanted.items() if stored.get(key) != value)


def _ways_on(path: Path, what: str) -> str:
    return (f"To embed with the settings asked, start over with --restart ({what} removed) or pass another --out; "
            f"to keep {path}, run the command with its settings")


def _check_vectors(handle: Any, lines: range, sentences: list[list[str]], layers: str, width: int) -> str | None:
    """What is wrong with the open HDF5 file ``handle`` as the vectors of ``lines`` (None: nothing):
    exactly one dataset per line, named by its index, of the shape its tokens and ``layers`` give."""
    names = {str(i) for i in lines}
    extra = sorted(set(handle) - names)
    if extra:
        return f"it holds {extra[0]!r}, which is no line's vectors"
    for i in lines:
        dataset, problem = stored_dataset(handle, str(i))
        if problem:
            return f"line {i}'s vectors are missing" if problem == "is missing" else f"line {i}'s dataset {problem}"
        shape, tokens = tuple(dataset.shape), len(sentences[i])
        if len(shape) != (3 if layers == "all" else 2) or shape[-2:] != (tokens, width):
            return (f"line {i}'s vectors have shape {shape}, not (..., {tokens}, {width}) for its {tokens} tokens "
                    f"with --layers {layers}")
        if dataset.dtype != "float32":  # (what this command writes; float16 or float64 is an edit, not ours)
            return f"line {i}'s vectors are of dtype {dataset.dtype}, not float32"
    return None


def _damaged_output(out: Path, sentences: list[list[str]], layers: str, width: int) -> str | None:
    import h5py

    try:
        with h5py.File(out, "r") as f:
            lines = _attribute(f.attrs.get("lines"))
            if lines != len(sentences):
                return f"it says it holds {lines!r} lines, the input has {len(sentences)}"
            return _check_vectors(f, range(len(sentences)), sentences, layers, width)
    except DAMAGED_HDF5 as error:
        return f"it cannot be read ({error})"


def embed_file(options: str | Path, weights: str | Path, input_path: str | Path, out: str | Path, *,
               layers: str = "all", batch_size: int = 64, device: str = "auto", stateful: bool = False,
               restart: bool = False, progress: bool = True, say: Callable[[str], None] = print) -> Path:
    """Embed every line of ``input_path`` (one sentence a line, tokens separated by white space) with the
    biLM of ``options`` and ``weights`` into the HDF5 file ``out`` (layout: this module's text).

    Run again with the same settings, it goes on where it stopped (or, ``out`` complete, does nothing);
    with other settings it is refused, naming each difference.

    Args:
        layers: ``"all"``, ``"top"`` or ``"average"``. Default: ``"all"``.
        batch_size: sentences per forward. Default: 64.
        device: ``"auto"``, ``"cpu"``, ``"cuda"``... (under torchrun each process its own GPU).
        stateful: carry the LSTM states from batch to batch as AllenNLP's command did (a line's
            vectors then depend on the lines before it, on the batch size and on how many processes
            share the work); False: every batch starts from zero states, so that a line's vectors
            depend on the line alone. Default: False.
        restart: remove what this command wrote at ``out`` (the output, where it carries this command's
            settings, and the pieces of an unfinished run) and start over. Default: False.
        progress: show a progress bar (rank 0's batches).
        say: where the lines for the user go.

    Returns:
        ``out``.

    Raises:
        TypeError, ValueError: an argument is not of its kind, or out of its range (named).
        FileExistsError: ``out`` holds other settings' vectors or is damaged (``restart`` is the way on),
            or is a file this command did not write (never removed: choose another ``out``).
    """
    from ..training.devices import pick_device

    layers = check_choice("layers", layers, LAYERS)
    batch_size = check_size("batch_size", batch_size)
    stateful, restart, progress = (check_flag("stateful", stateful), check_flag("restart", restart),
                                   check_flag("progress", progress))
    if not callable(say):  # (checked before the work, where it is first called after the batches)
        raise TypeError(f"say must be a function of one str (print, a logger's info), got {describe(say)}")
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str (auto, cpu, cuda, cuda:N) or a torch.device, got {describe(device)}")
    options, weights = check_path("options", options), check_path("weights", weights)
    input_path, out = check_path("input_path", input_path), check_path("out", out)
    _check_file("options", options)
    _check_file("weights", weights)
    sentences = _read_sentences(input_path)
    with _pair_held(options, weights):  # (the pair hashed is the pair read: a save_files there waits for both)
        wanted = _fingerprint(options, weights, input_path, layers, batch_size, stateful)
        opts, arrays = _read_pair(options, weights)
    rank, size = init_distributed(device)
    target = pick_device(device)
    bilm = ELMoBiLM._from_arrays(opts, arrays, stateful=stateful, device=target, dtype=None)
    # (every process reads OUT before rank 0 may remove it; read again once the lock is held, as another command
    # may have written it meanwhile: a complete OUT, or one with other settings, is never written over unchecked)
    if _complete(out, sentences, wanted, layers, bilm.output_size, restart, say):
        return out
    parts = out.with_name(out.name + ".parts")
    barrier()
    lock = _lock_parts(out, parts) if rank == 0 else None  # (one command writes OUT at a time; under torchrun, rank 0)
    try:
        barrier()
        if _complete(out, sentences, wanted, layers, bilm.output_size, restart, say):
            return out
        barrier()
        if rank == 0:
            remove_killed(out.parent, f".{out.name}.", _MERGE_SCRATCH, (out.name,))  # (what a kill cut short)
            _remove_killed_scratch(parts)
            check_replaceable([out], _WHAT)  # (before the work, not at its end)
            if restart:
                _start_over(out, parts, say)
            _claim_parts(parts, wanted)
        barrier()
        if rank != 0:
            _check_parts(parts, wanted)
        batches = [(k, sentences[k * batch_size:(k + 1) * batch_size]) for k in range(-(-len(sentences) // batch_size))]
        done = {k for k, batch in batches
                if _piece_done(parts / f"batch-{k:08d}.h5", range(k * batch_size, k * batch_size + len(batch)),
                               sentences, layers, bilm.output_size, say if k % size == rank else None)}
        mine = [(k, batch) for k, batch in batches if k % size == rank and k not in done]
        if done and rank == 0:
            say(f"resuming: {len(done)} of {len(batches)} batches were written before"
                + ("; the LSTM states start over at the first batch left (--stateful)" if stateful else ""))
        bar = tqdm(total=sum(len(b) for _, b in mine), unit="line", disable=not progress or rank != 0,
                   desc=f"embedding (rank 0 of {size})" if size > 1 else "embedding", file=sys.stderr)
        with torch.no_grad():
            for k, batch in mine:
                found, mask = bilm(batch_to_ids(batch, bilm.max_characters).to(target))
                trimmed = [remove_sentence_boundaries(layer, mask) for layer in found]
                vectors = _select([t for t, _ in trimmed], layers).float().cpu()
                _write_piece(parts / f"batch-{k:08d}.h5", k * batch_size, vectors, [len(s) for s in batch])
                bar.update(len(batch))
        bar.close()
        barrier()
        if rank == 0:
            _merge(parts, out, len(batches), {**wanted, "format": "highwaynet elmo embed", "lines": len(sentences),
                                              "highwaynet_version": __version__}, say)
            say(f"wrote {out}: {len(sentences)} lines, layers={layers}")
        barrier()
    finally:
        if lock is not None:
            _remove_lone_lock(parts)
        release_lock(lock)
    return out


def _complete(out: Path, sentences: list[list[str]], wanted: dict[str, Any], layers: str, width: int, restart: bool,
              say: Callable[[str], None]) -> bool:
    """Whether ``out`` is complete (said so: nothing to do); False where it is missing, or is to be embedded again
    (``restart``). Raises ``FileExistsError`` where it is not this command's, holds other settings' vectors, or is
    damaged."""
    if not (out.exists() or out.is_symlink()):
        return False
    if out.is_dir() and not out.is_symlink():
        raise FileExistsError(f"{out} is a folder: --out names the output file (as {out / 'vectors.hdf5'}); pass a "
                              f"file's path")
    stored = _stored_fingerprint(out)
    if stored is None or stored.get("format") != "highwaynet elmo embed":
        raise FileExistsError(f"{out} exists and is not a file this command wrote (an HDF5 file with its "
                              f"settings): pass another --out (--restart removes only this command's files)")
    if restart:
        return False
    differ = _differences(stored, wanted)
    if differ:
        raise FileExistsError(f"{out} holds vectors embedded with other settings ({differ}). "
                              f"{_ways_on(out, 'the file is')}")
    problem = _damaged_output(out, sentences, layers, width)
    if problem:
        raise FileExistsError(f"{out} was written by this command but is damaged: {problem} (edited or "
                              f"cut short after it was written?). Embed it again with --restart (the file "
                              f"is removed), or pass another --out")
    say(f"{out} is complete ({len(sentences)} lines); nothing to do (--restart embeds it again)")
    return True


def _piece_done(piece: Path, lines: range, sentences: list[list[str]], layers: str, width: int,
                say: Callable[[str], None] | None) -> bool:
    """Whether ``piece`` holds its batch's vectors, whole; a damaged one is removed by the process that
    embeds its batch (``say`` given), which says so."""
    import h5py

    if piece.is_symlink() or not piece.is_file():
        return False
    try:
        with h5py.File(piece, "r") as f:
            problem = _check_vectors(f, lines, sentences, layers, width)
    except DAMAGED_HDF5 as error:
        problem = f"it cannot be read ({error})"
    if problem is None:
        return True
    if say is not None:
        say(f"{piece} is damaged ({problem}); embedding its batch again")
        piece.unlink(missing_ok=True)
    return False


#: The lock file in the pieces folder: held by the command that writes ``OUT`` (rank 0's under torchrun).
_LOCK = ".lock"


#: A piece's name, ``batch-00000012.h5`` (:func:`_write_piece`), or the temporary of one that 0.3 wrote beside it,
#: ``batch-00000012.h5.PID.tmp`` (a kill's left: removed as this command's).
_PIECE = re.compile(r"batch-\d{8,}\.h5(\.\d+\.tmp)?")
#: The folder a piece or ``settings.json`` is written in (:func:`private_folder`): ``.batch-00000012.h5.x1y2.tmp``.
_SCRATCH_FOLDER = re.compile(r"\.(batch-\d{8,}\.h5|settings\.json)\.[^.]+" + re.escape(_SCRATCH))


def _is_ours(name: str) -> bool:
    """A file name this command writes in its pieces folder (a piece, its temporary, the settings, the lock): only
    these are ever removed, so that a file of the user's there (``batch-notes.tmp``) stays."""
    return name in ("settings.json", "settings.json.tmp", _LOCK) or _PIECE.fullmatch(name) is not None


def _holds_pieces(parts: Path) -> bool:
    """Whether the folder ``parts`` holds files of this command's but its lock (an earlier run's)."""
    return any(_is_ours(p.name) and p.name != _LOCK for p in parts.iterdir())


def _lock_parts(out: Path, parts: Path) -> int | None:
    """Make ``parts`` (and ``out``'s folder, where new) and hold its lock: a second command writing ``out``
    at the same time is refused, naming the process that writes it."""
    if parts.is_symlink() or (parts.exists() and not parts.is_dir()):
        raise FileExistsError(f"{parts} is in the way (not a folder this command made); remove it")
    above = next(p for p in parts.parents if p.exists() or p.is_symlink())
    if not above.is_dir():
        raise FileExistsError(f"{out} cannot be written: {above} is a file, not a folder; pass another --out")
    def busy(holder: str) -> Exception:
        return FileExistsError(f"{out} is being written by {holder} (it holds {parts / _LOCK}): wait for that "
                               f"command to end, or pass another --out")

    # The command that holds the lock removes its file, and the folder, at its end (:func:`_remove_parts`): a lock
    # taken on the file it had opened, or in the folder it was removing, is on a file no longer there, which a
    # third command would make anew and lock too. The lock is held where its file is still the one in the folder.
    check_replaceable([out], _WHAT)  # (a folder this user cannot write named, before anything is made in it)
    for _ in range(100):
        parts.mkdir(parents=True, exist_ok=True)
        try:
            fd = take_lock(parts / _LOCK, busy)
        except FileNotFoundError:  # (the folder removed between the two)
            continue
        if fd is None:  # pragma: no cover - Windows: no lock
            return None
        try:
            if os.path.samestat(os.fstat(fd), os.lstat(parts / _LOCK)):
                return fd
        except FileNotFoundError:
            pass
        release_lock(fd)
    raise busy("another process")  # (pragma: no cover - a folder removed and made a hundred times meanwhile)


def _remove_lone_lock(parts: Path) -> None:
    """Remove the lock file, and the pieces folder, where it holds nothing else (a command refused, or one that
    found ``OUT`` complete, once the lock was taken); before the lock is let go."""
    try:
        if os.listdir(parts) == [_LOCK]:
            os.unlink(parts / _LOCK)
            parts.rmdir()
    except OSError:  # (gone, or a file of another's there since)
        pass


def _remove_killed_scratch(parts: Path) -> None:
    """Remove the folders (:func:`private_folder`'s) in which writers of pieces or ``settings.json`` killed before
    their end left what they had written: held by none, hidden, they would stay for ever."""
    try:
        entries = os.listdir(parts)
    except OSError:
        return
    for name in {m[1] for m in map(_SCRATCH_FOLDER.fullmatch, entries) if m}:
        remove_killed(parts, f".{name}.", _SCRATCH, (name,))


def _remove_parts(parts: Path, keep: tuple[str, ...] = ()) -> list[str]:
    """Remove this command's files from ``parts`` (regular files, found without following links) but those
    named in ``keep``, and the folder once empty; returns the names of what stays (files of the user's)."""
    if parts.is_symlink() or not parts.is_dir():
        return []
    _remove_killed_scratch(parts)
    kept = []
    with os.scandir(parts) as entries:
        for entry in entries:
            if entry.name in keep:
                continue
            if _is_ours(entry.name) and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
            else:
                kept.append(entry.name)
    if not kept and not keep:
        try:
            parts.rmdir()
        except OSError:  # (the folder of the next command writing OUT, made in it since: its lock file there)
            pass
    return sorted(kept)


def _start_over(out: Path, parts: Path, say: Callable[[str], None]) -> None:
    removed = []
    if out.is_file() and not out.is_symlink():  # (its format checked by the caller)
        out.unlink()
        removed.append(str(out))
    if parts.is_dir() and not parts.is_symlink() and _holds_pieces(parts):
        kept = _remove_parts(parts, keep=(_LOCK,))  # (the lock this command holds)
        removed.append(f"the pieces in {parts}" + (f" (your files there stay: {', '.join(kept)})" if kept else ""))
    if removed:
        say(f"starting over (--restart): removed {' and '.join(removed)}")


def _claim_parts(parts: Path, wanted: dict[str, Any]) -> None:
    settings = parts / "settings.json"
    if settings.is_file():
        try:
            stored = parse_json(settings.read_text())
        except (OSError, ValueError):
            stored = None
        if not isinstance(stored, dict):
            raise FileExistsError(f"{parts} holds an unfinished run whose settings.json is damaged; start over with "
                                  f"--restart (its pieces are removed) or pass another --out") from None
        differ = _differences(stored, wanted)
        if differ:
            raise FileExistsError(f"{parts} holds an unfinished run with other settings ({differ}). "
                                  f"{_ways_on(parts, 'its pieces are')}")
        return
    if _holds_pieces(parts):
        raise FileExistsError(f"{parts} holds pieces without their settings.json; start over with --restart (its "
                              f"pieces are removed) or pass another --out")
    with private_folder(parts, f".{settings.name}.", _SCRATCH, (settings.name,)) as scratch:
        with open(scratch / settings.name, "x") as f:
            f.write(json.dumps(wanted, indent=1))
        replace_all([(scratch / settings.name, settings)], _WHAT)


def _check_parts(parts: Path, wanted: dict[str, Any]) -> None:
    stored = parse_json((parts / "settings.json").read_text())
    if _differences(stored, wanted):
        raise FileExistsError(f"{parts}: rank 0 claimed it with other settings than this process's")


def _merge(parts: Path, out: Path, batches: int, attributes: dict[str, Any], say: Callable[[str], None]) -> None:
    import h5py

    # (written in a folder of this command's own beside OUT, ``.OUT.x1y2.embed``: never through a link, never
    # into a file of another's, ``OUT.tmp`` another command's output; one a kill left is removed by the next run)
    with private_folder(out.parent, f".{out.name}.", _MERGE_SCRATCH, (out.name,)) as scratch:
        with h5py.File(scratch / out.name, "x") as f:
            for k in range(batches):
                piece = parts / f"batch-{k:08d}.h5"
                if piece.is_symlink() or not piece.is_file():
                    raise FileNotFoundError(f"{piece} is missing: a process did not finish its batches; run the "
                                            f"command again to write what is missing")
                with h5py.File(piece, "r") as p:
                    for name in p:
                        p.copy(p[name], f, name)
            for key, value in attributes.items():
                f.attrs[key] = value
        replace_all([(scratch / out.name, out)], _WHAT)
    kept = _remove_parts(parts)
    if kept:
        say(f"{parts} is kept: it holds files that are not this command's ({', '.join(kept)})")
