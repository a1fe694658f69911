"""A file of sentences to an HDF5 file of ELMo vectors: what ``highwaynet elmo embed`` runs.

The output's layout (what AllenNLP's removed ``elmo`` command wrote, its keys and shapes):

- one dataset per input line, named by the line's index from 0 (``"0"``, ``"1"``, ...), float32:
  ``(num_layers + 1, tokens, 2 P)`` with ``layers="all"`` (layer 0 the token vectors, then each LSTM
  layer, ``[forward | backward]``), ``(tokens, 2 P)`` with ``"top"`` (the last layer) or ``"average"``
  (the layers' mean); ``tokens`` the line's white-space-separated tokens, without ``<S>`` and ``</S>``;
- the file's attributes: ``layers``, ``lines``, ``stateful``, ``batch_size``, the sha256 of the
  input, options and weight files, and the ``highwaynet_version`` that wrote it.

Nothing half-written is ever the output: each batch's vectors go to a piece file of their own
(written to a temporary name, then renamed) in ``OUT.parts/``; when every piece is there, they are
copied into ``OUT.tmp``, which is renamed to ``OUT``, and the pieces are removed. Run again with the
same settings, the command goes on from the pieces already written (and says so), or, where ``OUT``
is complete, says so and does nothing. Under ``torchrun`` each process embeds every ``world``-th
batch (batch ``k`` by rank ``k mod world``) into the shared pieces folder, and rank 0 writes the
one output file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from .. import __version__
from ..data.download import read_text
from ..training.distributed import barrier, init_distributed
from .bilm import ELMoBiLM
from .chars import batch_to_ids
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
    if not path.is_file():
        raise FileNotFoundError(f"input file {path} not found")
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


def _write_piece(path: Path, first_line: int, vectors: torch.Tensor, lengths: list[int]) -> None:
    import h5py

    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    with h5py.File(tmp, "w") as f:
        for row, length in enumerate(lengths):
            f.create_dataset(str(first_line + row), data=vectors[row, ..., :length, :].numpy())
    os.replace(tmp, path)


def _fingerprint(options: Path, weights: Path, input_path: Path, layers: str, batch_size: int,
                 stateful: bool) -> dict[str, Any]:
    return {"options_sha256": _sha256(options), "weights_sha256": _sha256(weights),
            "input_sha256": _sha256(input_path), "layers": layers, "batch_size": batch_size, "stateful": stateful}


def _stored_fingerprint(out: Path) -> dict[str, Any] | None:
    import h5py

    try:
        with h5py.File(out, "r") as f:
            return {key: (value.item() if hasattr(value, "item") else value) for key, value in f.attrs.items()}
    except OSError:
        return None


def _differs(stored: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    return [key for key, value in wanted.items() if stored.get(key) != value]


def embed_file(options: str | Path, weights: str | Path, input_path: str | Path, out: str | Path, *,
               layers: str = "all", batch_size: int = 64, device: str = "auto", stateful: bool = False,
               progress: bool = True, say: Callable[[str], None] = print) -> Path:
    """Embed every line of ``input_path`` (one sentence a line, tokens separated by white space) with the
    biLM of ``options`` and ``weights`` into the HDF5 file ``out`` (layout: this module's text).

    Args:
        layers: ``"all"``, ``"top"`` or ``"average"``. Default: ``"all"``.
        batch_size: sentences per forward. Default: 64.
        device: ``"auto"``, ``"cpu"``, ``"cuda"``... (under torchrun each process its own GPU).
        stateful: carry the LSTM states from batch to batch as AllenNLP's command did (a line's
            vectors then depend on the lines before it, on the batch size and on how many processes
            share the work); False: every batch starts from zero states, so that a line's vectors
            depend on the line alone. Default: False.
        progress: show a progress bar (rank 0's batches).
        say: where the lines for the user go.

    Returns:
        ``out``.
    """
    from ..training.devices import pick_device

    if layers not in LAYERS:
        raise ValueError(f"layers must be one of {', '.join(LAYERS)}, got {layers!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    options, weights, input_path, out = Path(options), Path(weights), Path(input_path), Path(out)
    for what, path in (("options", options), ("weights", weights)):
        if not path.is_file():
            raise FileNotFoundError(f"the {what} file {path} not found")
    sentences = _read_sentences(input_path)
    wanted = _fingerprint(options, weights, input_path, layers, batch_size, stateful)
    rank, size = init_distributed(device)
    if out.exists():
        stored = _stored_fingerprint(out)
        if stored is None or stored.get("format") != "highwaynet elmo embed":
            raise FileExistsError(f"{out} exists and is not a file this command wrote; choose another --out")
        differ = _differs(stored, wanted)
        if differ:
            raise FileExistsError(f"{out} exists, written with other settings ({', '.join(differ)} differ); remove "
                                  f"it or choose another --out")
        say(f"{out} is complete ({len(sentences)} lines); nothing to do")
        return out
    parts = out.with_name(out.name + ".parts")
    if rank == 0:
        _claim_parts(parts, wanted)
    barrier()
    if rank != 0:
        _check_parts(parts, wanted)
    batches = [(k, sentences[k * batch_size:(k + 1) * batch_size]) for k in range(-(-len(sentences) // batch_size))]
    done = {k for k, _ in batches if (parts / f"batch-{k:08d}.h5").is_file()}
    mine = [(k, batch) for k, batch in batches if k % size == rank and k not in done]
    if done and rank == 0:
        say(f"resuming: {len(done)} of {len(batches)} batches were written before"
            + ("; the LSTM states start over at the first batch left (--stateful)" if stateful else ""))
    target = pick_device(device)
    bilm = ELMoBiLM.from_files(options, weights, stateful=stateful, device=target)
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
                                          "highwaynet_version": __version__})
        say(f"wrote {out}: {len(sentences)} lines, layers={layers}")
    barrier()
    return out


def _claim_parts(parts: Path, wanted: dict[str, Any]) -> None:
    settings = parts / "settings.json"
    if parts.is_symlink() or (parts.exists() and not parts.is_dir()):
        raise FileExistsError(f"{parts} is in the way (not a folder this command made); remove it")
    if parts.is_dir():
        try:
            stored = json.loads(settings.read_text())
        except (OSError, ValueError):
            raise FileExistsError(f"{parts} exists without a readable settings.json: not this command's work "
                                  f"folder; remove it or choose another --out") from None
        differ = _differs(stored, wanted) if isinstance(stored, dict) else list(wanted)
        if differ:
            raise FileExistsError(f"{parts} holds an unfinished run with other settings ({', '.join(differ)} differ); "
                                  f"remove it to start over, or run with its settings")
        return
    parts.mkdir(parents=True)  # (and OUT's folder, where it is new)
    tmp = settings.with_name("settings.json.tmp")
    tmp.write_text(json.dumps(wanted, indent=1))
    os.replace(tmp, settings)


def _check_parts(parts: Path, wanted: dict[str, Any]) -> None:
    stored = json.loads((parts / "settings.json").read_text())
    if _differs(stored, wanted):
        raise FileExistsError(f"{parts}: rank 0 claimed it with other settings than this process's")


def _merge(parts: Path, out: Path, batches: int, attributes: dict[str, Any]) -> None:
    import h5py

    tmp = out.with_name(out.name + ".tmp")
    with h5py.File(tmp, "w") as f:
        for k in range(batches):
            piece = parts / f"batch-{k:08d}.h5"
            if not piece.is_file():
                raise FileNotFoundError(f"{piece} is missing: a process did not finish its batches; run the command "
                                        f"again to write what is missing")
            with h5py.File(piece, "r") as p:
                for name in p:
                    p.copy(p[name], f, name)
        for key, value in attributes.items():
            f.attrs[key] = value
    os.replace(tmp, out)
    shutil.rmtree(parts)
