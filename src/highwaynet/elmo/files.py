"""Reading bilm-tf's ``options.json`` and ``weights.hdf5``, checked against each other, and the
published models by name.

The weight file's layout is what bilm-tf's ``dump_weights`` writes (``bilm/training.py``) and its
``BidirectionalLanguageModel`` reads back (``bilm/model.py``): datasets named after the TensorFlow
variables, without the ``lm/`` scope, in float32.

============================================================  ==============================
dataset                                                       shape
============================================================  ==============================
``char_embed``                                                ``(261, char_dim)``: ids 1-261
``CNN/W_cnn_{i}``, ``CNN/b_cnn_{i}``                          ``(1, width_i, char_dim, n_i)``, ``(n_i,)``
``CNN_high_{k}/W_carry``, ``b_carry``, ``W_transform``,       ``(F, F)``, ``(F,)``, ``F = sum(n_i)``
``b_transform``
``CNN_proj/W_proj``, ``b_proj`` (where ``F != projection``)   ``(F, P)``, ``(P,)``
``RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell/W_0``             ``(in + P, 4 C)``: ``[x | h]`` rows
``.../LSTMCell/B``                                            ``(4 C,)``
``.../LSTMCell/W_P_0`` (where ``P < C``)                      ``(C, P)``
============================================================  ==============================

``d`` is the direction (0 forward, 1 backward), ``l`` the layer, ``P`` the options'
``lstm.projection_dim``, ``C`` its ``lstm.dim``, ``in`` the layer's input width (``P``).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .._checks import check_flag, check_path, describe
from ..data.download import DataFile, locate, parse_json, read_text, search_folders
from .chars import MAX_CHARACTERS_BOUND, NUM_IDS

__all__ = ["MODELS", "ELMoOptions", "download_model", "read_options", "read_weights"]


@dataclass(frozen=True)
class ELMoOptions:
    """A biLM's sizes, read from its ``options.json`` (the keys in brackets).

    Attributes:
        filters: ``(width, count)`` of each character convolution (``char_cnn.filters``).
        num_highway: highway layers after the convolutions (``char_cnn.n_highway``; absent: 0).
        char_dim: the character embedding's width (``char_cnn.embedding.dim``).
        activation: the convolutions' nonlinearity, ``"relu"`` or ``"tanh"`` (``char_cnn.activation``).
        max_characters: ids per token (``char_cnn.max_characters_per_token``).
        projection_dim: the token vectors' and each LSTM direction's output width (``lstm.projection_dim``).
        cell_dim: the LSTM cell's width (``lstm.dim``).
        num_layers: LSTM layers per direction (``lstm.n_layers``; absent: 1).
        cell_clip, proj_clip: the cell's and the projected output's clipping (``lstm.cell_clip``,
            ``lstm.proj_clip``; absent: none).
        skip_connections: a residual connection around each layer above the first
            (``lstm.use_skip_connections``).
    """

    filters: tuple[tuple[int, int], ...]
    num_highway: int
    char_dim: int
    activation: str
    max_characters: int
    projection_dim: int
    cell_dim: int
    num_layers: int
    cell_clip: float | None
    proj_clip: float | None
    skip_connections: bool

    @property
    def num_filters(self) -> int:
        return sum(n for _, n in self.filters)

    @property
    def num_parameters(self) -> int:
        """The parameters of the biLM these sizes make (:class:`~highwaynet.elmo.ELMoBiLM`): the character
        embedding, the convolutions, the highway layers, the projection and both directions' LSTMs."""
        cnn = sum(n * (self.char_dim * w + 1) for w, n in self.filters)
        highway = self.num_highway * 2 * self.num_filters * (self.num_filters + 1)
        cells, proj = 4 * self.cell_dim, self.projection_dim
        lstm = 2 * self.num_layers * (2 * cells * proj + cells + proj * self.cell_dim)
        return NUM_IDS * self.char_dim + cnn + highway + (self.num_filters + 1) * proj + lstm

    def settings(self) -> dict[str, Any]:
        """The keyword settings of :class:`~highwaynet.elmo.ELMoBiLM` these options give."""
        return {"filters": self.filters, "num_highway": self.num_highway, "char_dim": self.char_dim,
                "activation": self.activation, "max_characters": self.max_characters, "cell_clip": self.cell_clip,
                "proj_clip": self.proj_clip, "skip_connections": self.skip_connections}


#: The largest value :func:`read_options` takes for each size, with what ELMo's published models hold
#: (small to original): a value far beyond them (an edited or damaged file) is refused, naming the file and
#: the key, rather than met as an allocation error deep inside torch. By section: ``(what, bound, ELMo's)``.
_SIZE_BOUNDS = {"max_characters": ("char_cnn", "'max_characters_per_token'", MAX_CHARACTERS_BOUND, "50"),
                "filters": ("char_cnn", "the number of 'filters'", 1_000, "7"),
                "num_filters": ("char_cnn", "the sum of the 'filters' counts", 65_536, "2,048"),
                "num_highway": ("char_cnn", "'n_highway'", 100, "1 or 2"),
                "char_dim": ("char_cnn", "'embedding.dim'", 65_536, "16"),
                "projection_dim": ("lstm", "'projection_dim'", 65_536, "128 to 512"),
                "cell_dim": ("lstm", "'dim'", 65_536, "1,024 to 4,096"),
                "num_layers": ("lstm", "'n_layers'", 100, "2")}
#: The most parameters :func:`read_options` takes, all sizes together (each within its bound above can still
#: make trillions: ``dim`` and ``projection_dim`` of 65,536 each): about 46 times the original ELMo's 93.6 M.
_PARAMETER_BOUND = 2**32


def _get(section: Mapping[str, Any], key: str, where: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    if key not in section:
        if default is not ...:
            return default
        raise ValueError(f"{where}: the options have no {key!r}")
    value = section[key]
    if value is None and default is None:
        return None
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        what = " or ".join(k.__name__ for k in kind) if isinstance(kind, tuple) else kind.__name__
        raise ValueError(f"{where}: {key!r} must be {what}, got {value!r}")
    return value


def read_options(options: str | Path | Mapping[str, Any]) -> ELMoOptions:
    """The sizes in a bilm-tf ``options.json`` (a path, or the parsed dictionary), checked.

    Raises:
        FileNotFoundError: there is no such file.
        ValueError: the file is not JSON, or a key is missing, of the wrong kind or out of bounds (the
            message names it). The bounds are far above any published model's: ``max_characters_per_token``
            at most 10,000 (ELMo's is 50), the filters' counts summing to at most 65,536 (ELMo's: 2,048),
            ``embedding.dim``, ``lstm.dim`` and ``lstm.projection_dim`` at most 65,536, at most 1,000
            filters, 100 highway layers and 100 LSTM layers, and all together at most 2**32 parameters
            (:attr:`ELMoOptions.num_parameters`; the original ELMo's: 93.6 million).
    """
    if isinstance(options, Mapping):
        raw, name = options, "options"
    elif isinstance(options, (str, os.PathLike)):
        path = check_path("options", options)
        if not path.is_file():
            raise FileNotFoundError(f"ELMo options file {path} " + ("is a folder; pass the file" if path.is_dir()
                                                                    else "not found"))
        try:
            raw = parse_json(read_text(path))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not an ELMo options file: not JSON ({error})") from None
        except ValueError as error:  # (not UTF-8 text: the weight file given for the options, say)
            hdf5 = path.read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"
            raise ValueError(f"{path} is not an ELMo options file: " + (
                "it is an HDF5 file (a weights.hdf5? --options takes options.json, --weights weights.hdf5)" if hdf5
                else f"not JSON text ({error})")) from None
        name = str(path)
    else:
        raise TypeError(f"options must be a path or a dict, got {describe(options)}")
    if not isinstance(raw, Mapping) or "lstm" not in raw:
        raise ValueError(f"{name} is not an ELMo options file: it has no 'lstm' section")
    if "char_cnn" not in raw:
        raise ValueError(f"{name}: the options have no 'char_cnn' section; a biLM that reads word ids (bilm-tf's "
                         f"token-embedding input) is not supported, only the character models ELMo and SeqVec publish")
    lstm, cnn = raw["lstm"], raw["char_cnn"]
    where_lstm, where_cnn = f"{name} [lstm]", f"{name} [char_cnn]"
    for section, value in (("lstm", lstm), ("char_cnn", cnn)):
        if not isinstance(value, Mapping):
            raise ValueError(f"{name}: the options' {section!r} section must be a JSON object, got {value!r}")
    filters = _get(cnn, "filters", where_cnn, list)
    if not filters or not all(isinstance(f, (list, tuple)) and len(f) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in f) for f in filters):
        raise ValueError(f"{where_cnn}: 'filters' must be a list of [width, count] pairs of positive integers, got "
                         f"{filters!r}")
    embedding = _get(cnn, "embedding", where_cnn, dict)
    activation = _get(cnn, "activation", where_cnn, str)
    if activation not in ("relu", "tanh"):
        raise ValueError(f"{where_cnn}: 'activation' must be 'relu' or 'tanh' (bilm-tf knows no other), got "
                         f"{activation!r}")
    n_characters = _get(cnn, "n_characters", where_cnn, int)
    if n_characters not in (NUM_IDS - 1, NUM_IDS):
        raise ValueError(f"{where_cnn}: 'n_characters' must be {NUM_IDS} ({NUM_IDS - 1} in the options a training "
                         f"run writes), the ids of UTF-8 bytes and ELMo's 5 markers; got {n_characters}")
    opts = ELMoOptions(
        filters=tuple((int(w), int(n)) for w, n in filters),
        num_highway=_get(cnn, "n_highway", where_cnn, int, None) or 0,
        char_dim=_get(embedding, "dim", f"{where_cnn} [embedding]", int),
        activation=activation,
        max_characters=_get(cnn, "max_characters_per_token", where_cnn, int),
        projection_dim=_get(lstm, "projection_dim", where_lstm, int),
        cell_dim=_get(lstm, "dim", where_lstm, int),
        num_layers=_get(lstm, "n_layers", where_lstm, int, 1),
        cell_clip=_float_or_none(_get(lstm, "cell_clip", where_lstm, (int, float), None)),
        proj_clip=_float_or_none(_get(lstm, "proj_clip", where_lstm, (int, float), None)),
        skip_connections=bool(_get(lstm, "use_skip_connections", where_lstm, bool, False)),
    )
    for key, value in (("n_highway", opts.num_highway), ("embedding.dim", opts.char_dim),
                       ("projection_dim", opts.projection_dim), ("dim", opts.cell_dim), ("n_layers", opts.num_layers)):
        if value < (0 if key == "n_highway" else 1):
            raise ValueError(f"{name}: {key!r} must be positive, got {value}")
    for attribute, (section, what, bound, elmo) in _SIZE_BOUNDS.items():
        value = len(opts.filters) if attribute == "filters" else getattr(opts, attribute)
        if value > bound:
            raise ValueError(f"{name} [{section}]: {what} must be at most {bound:,} (ELMo's: {elmo}), got {value:,}: "
                             f"the options file was edited or is damaged; put back the one that came with the weights")
    if opts.num_parameters > _PARAMETER_BOUND:
        raise ValueError(f"{name}: its sizes make a biLM of {opts.num_parameters:,} parameters, beyond the "
                         f"{_PARAMETER_BOUND:,} read_options takes (the original ELMo's: 93.6 million): the options "
                         f"file was edited or is damaged; put back the one that came with the weights")
    for key, clip in (("cell_clip", opts.cell_clip), ("proj_clip", opts.proj_clip)):
        if clip is not None and not (math.isfinite(clip) and clip > 0):
            raise ValueError(f"{where_lstm}: {key!r} must be a positive finite number (or absent: no clipping), got "
                             f"{clip}")
    if opts.max_characters < max(w for w, _ in opts.filters) or opts.max_characters < 4:
        raise ValueError(f"{where_cnn}: 'max_characters_per_token' ({opts.max_characters}) must be at least 4 and "
                         f"the widest filter's width")
    if opts.projection_dim > opts.cell_dim:
        raise ValueError(f"{where_lstm}: 'projection_dim' ({opts.projection_dim}) exceeds 'dim' ({opts.cell_dim})")
    if opts.num_filters < opts.projection_dim:
        raise ValueError(f"{where_cnn}: the filters' total ({opts.num_filters}) is below lstm.projection_dim "
                         f"({opts.projection_dim}); bilm-tf projects the token vectors down only")
    return opts


def _float_or_none(value: int | float | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except OverflowError:  # (an int beyond any float, 10**400: refused as infinity is)
        return math.inf


def expected_shapes(opts: ELMoOptions) -> dict[str, tuple[int, ...]]:
    """Every dataset a weight file for ``opts`` holds, with its shape (the table above)."""
    shapes: dict[str, tuple[int, ...]] = {"char_embed": (NUM_IDS - 1, opts.char_dim)}
    for i, (width, count) in enumerate(opts.filters):
        shapes[f"CNN/W_cnn_{i}"] = (1, width, opts.char_dim, count)
        shapes[f"CNN/b_cnn_{i}"] = (count,)
    features = opts.num_filters
    for k in range(opts.num_highway):
        for kind in ("carry", "transform"):
            shapes[f"CNN_high_{k}/W_{kind}"] = (features, features)
            shapes[f"CNN_high_{k}/b_{kind}"] = (features,)
    if features != opts.projection_dim:
        shapes["CNN_proj/W_proj"] = (features, opts.projection_dim)
        shapes["CNN_proj/b_proj"] = (opts.projection_dim,)
    for direction in (0, 1):
        for layer in range(opts.num_layers):
            cell = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            shapes[f"{cell}/W_0"] = (2 * opts.projection_dim, 4 * opts.cell_dim)
            shapes[f"{cell}/B"] = (4 * opts.cell_dim,)
            if opts.projection_dim < opts.cell_dim:
                shapes[f"{cell}/W_P_0"] = (opts.cell_dim, opts.projection_dim)
    return shapes


# which option sets each dataset's shape, for the message where they disagree
def _set_by(name: str) -> str:
    if name == "char_embed":
        return "char_cnn.embedding.dim (and the 261 character ids)"
    if name.startswith("CNN/"):
        return "char_cnn.filters and char_cnn.embedding.dim"
    if name.startswith("CNN_high"):
        return "the sum of char_cnn.filters' counts"
    if name.startswith("CNN_proj"):
        return "char_cnn.filters and lstm.projection_dim"
    return "lstm.projection_dim and lstm.dim"


#: What h5py raises reading a file whose structure is damaged: OSError where HDF5 cannot read (a truncated file, a
#: chunk that does not decompress), RuntimeError where the file's own index is corrupt (its links, groups or
#: attributes: "bad symbol table node signature"), KeyError on a lookup through such an index, TypeError where a
#: dataset's type is damaged ("Unknown string encoding").
DAMAGED_HDF5 = (OSError, RuntimeError, KeyError, TypeError)


def stored_dataset(handle: Any, name: str) -> tuple[Any, str | None]:
    """The dataset ``name`` of the open HDF5 file ``handle``, where the file itself holds it: ``(dataset, None)``,
    else ``(None, what is wrong)`` (a phrase: ``"is missing"``, ``"is a soft link to '/x'"``, ...).

    bilm-tf's ``dump_weights`` and ``highwaynet elmo embed`` write plain datasets only. A link (soft, or external
    to another file) or a dataset whose values lie in another file (external or virtual storage) is an edit:
    followed, it would read data that no sha256 of this file covers, or fail deep inside h5py where the other
    file is gone."""
    import h5py

    parts = name.split("/")
    try:
        for end in range(1, len(parts) + 1):
            here = "/".join(parts[:end])
            link = handle.get(here, getlink=True)
            if link is None:
                return None, "is missing"
            if isinstance(link, h5py.SoftLink):
                return None, f"is a soft link ({here!r} to {link.path!r}), not data stored there"
            if isinstance(link, h5py.ExternalLink):
                return None, f"is an external link ({here!r} to {link.path!r} in the file {link.filename!r}), not " \
                             f"data stored in this file"
        dataset = handle[name]
        if not isinstance(dataset, h5py.Dataset):
            return None, "is a group, not a dataset"
        if dataset.external or dataset.is_virtual:
            return None, "keeps its values in other files (external or virtual storage), not in this one"
        if dataset.shape is None:
            return None, "holds no values (an empty dataspace)"
        dataset.dtype  # noqa: B018 (read once here, in the try: a damaged type raises where it is first read)
    except DAMAGED_HDF5 as error:
        return None, f"cannot be read ({error}): the file is damaged"
    return dataset, None


def read_weights(weights: str | Path, opts: ELMoOptions) -> dict[str, np.ndarray]:
    """Every dataset of a bilm-tf ``weights.hdf5`` that ``opts`` calls for, as float32 arrays, each
    checked against the shape the options give it.

    Raises:
        ImportError: h5py, the ``elmo`` extra, is not installed (``pip install h5py``).
        FileNotFoundError: there is no such file.
        ValueError: it is not an HDF5 file, a dataset is missing (named, with what to check), is a link or
            keeps its values in another file (:func:`stored_dataset`), its shape is not the one the options give
            (both shapes named, and the options that set it), it holds no numbers, or values that are not finite
            in float32 (NaN, infinity: refused, not warned of, as every vector they reach would be NaN).
    """
    try:
        import h5py
    except ImportError:
        raise ImportError("reading ELMo weights needs h5py, highwaynet's elmo extra: pip install h5py") \
            from None
    if not isinstance(opts, ELMoOptions):
        raise TypeError(f"opts must be the ELMoOptions that read_options gives, got {describe(opts)}")
    path = check_path("weights", weights)
    if not path.is_file():
        raise FileNotFoundError(f"ELMo weight file {path} " + ("is a folder; pass the file" if path.is_dir()
                                                               else "not found"))
    try:
        handle = h5py.File(path, "r")
    except OSError as error:
        raise ValueError(f"{path} is not an ELMo weight file: not HDF5 ({error})") from None
    arrays: dict[str, np.ndarray] = {}
    with handle:
        for name, shape in expected_shapes(opts).items():
            dataset, problem = stored_dataset(handle, name)
            if problem in ("is missing", "is a group, not a dataset"):
                hint = ("is this an ELMo weights.hdf5 (bilm-tf's dump_weights)?" if name == "char_embed"
                        else "does the options file belong to this weight file?")
                raise ValueError(f"{path} has no dataset {name!r}: {hint}")
            if problem and problem.startswith("cannot be read"):
                raise ValueError(f"{path}: dataset {name!r} {problem}; download it again")
            if problem:
                raise ValueError(f"{path}: dataset {name!r} {problem}: bilm-tf's weight files hold their values "
                                 f"in plain datasets; the file was edited or is damaged: use the weight file as "
                                 f"published")
            if tuple(dataset.shape) != shape:
                raise ValueError(f"{path}: dataset {name!r} has shape {tuple(dataset.shape)}, but the options give "
                                 f"{shape} (set by {_set_by(name)}): the options and the weights are not one model's")
            if dataset.dtype.kind not in "fiu":
                raise ValueError(f"{path}: dataset {name!r} holds {dataset.dtype} values, not numbers: the file is "
                                 f"damaged or not an ELMo weight file")
            try:
                array = np.asarray(dataset[...], dtype=np.float32)
            except DAMAGED_HDF5 as error:
                raise ValueError(f"{path}: dataset {name!r} cannot be read ({error}): the file is damaged; download "
                                 f"it again") from None
            if not np.isfinite(array).all():
                raise ValueError(f"{path}: dataset {name!r} holds values that are not finite (NaN or infinity): "
                                 f"the file is damaged")
            arrays[name] = array
    return arrays


@dataclass(frozen=True)
class PublishedModel:
    """A published biLM: its options and weight files (URLs, and a sha256 where one is known) and what it is."""

    options: DataFile
    weights: DataFile
    about: str


_ALLENNLP = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo"
_SEQVEC = "http://data.bioembeddings.com/public/embeddings/embedding_models/seqvec"


def _elmo(folder: str, stem: str, about: str) -> PublishedModel:
    return PublishedModel(DataFile(f"elmo-{folder}/options.json", f"{_ALLENNLP}/{folder}/{stem}_options.json", ""),
                          DataFile(f"elmo-{folder}/weights.hdf5", f"{_ALLENNLP}/{folder}/{stem}_weights.hdf5", ""),
                          about)


#: The published models by name, with their files' public URLs (AllenNLP's ELMo page and bio_embeddings'
#: SeqVec). The publishers give no sha256 for these files (nor does bilm-tf, AllenNLP or SeqVec's
#: repository), so a download is not checked against one: an
#: :class:`~highwaynet.data.download.UncheckedDownloadWarning` names each file and gives the sha256 it
#: was found to have, which :func:`download_model`'s ``sha256`` (``--sha256`` on ``highwaynet elmo
#: embed``) pins; the loader's checks of every dataset's name and shape catch a wrong or damaged file.
MODELS: dict[str, PublishedModel] = {
    "small": _elmo("2x1024_128_2048cnn_1xhighway", "elmo_2x1024_128_2048cnn_1xhighway",
                   "ELMo small: 2 layers of 1,024 cells projected to 128, one highway layer (13.6 M parameters)"),
    "medium": _elmo("2x2048_256_2048cnn_1xhighway", "elmo_2x2048_256_2048cnn_1xhighway",
                    "ELMo medium: 2 layers of 2,048 cells projected to 256, one highway layer (28.0 M parameters)"),
    "original": _elmo("2x4096_512_2048cnn_2xhighway", "elmo_2x4096_512_2048cnn_2xhighway",
                      "ELMo original: 2 layers of 4,096 cells projected to 512, two highway layers (93.6 M)"),
    "original-5.5b": _elmo("2x4096_512_2048cnn_2xhighway_5.5B", "elmo_2x4096_512_2048cnn_2xhighway_5.5B",
                           "ELMo original, trained on 5.5 billion tokens (93.6 M parameters)"),
    "seqvec": PublishedModel(DataFile("seqvec/options.json", f"{_SEQVEC}/options.json", ""),
                             DataFile("seqvec/weights.hdf5", f"{_SEQVEC}/weights.hdf5", ""),
                             "SeqVec (Heinzinger et al., 2019): ELMo trained on UniRef50 protein sequences, one "
                             "token a residue"),
}


def download_model(name: str, data_dir: str | Path | None = None, *, download: bool = False,
                   sha256: tuple[str, str] | None = None) -> tuple[Path, Path]:
    """The options and weight files of a published model (:data:`MODELS`), found in ``data_dir`` (or
    ``$HIGHWAYNET_DATA``, ``~/.cache/highwaynet``) under ``elmo-<folder>/`` or ``seqvec/``, or with
    ``download=True`` fetched there from the publisher.

    Args:
        sha256: the sha256 of the options file and of the weight file, to check them against (found on
            disk or downloaded); None: the publisher's, where it gives one. The publishers give none
            (see :data:`MODELS`): a download is then unchecked, and a warning gives the sha256 it was
            found to have, to pin here.

    Raises:
        ValueError: no model of that name, or ``sha256`` not two sha256s.
        DataNotFoundError: ``data_dir`` is a file, or does not exist and ``download`` is false (as the data
            loaders': :func:`~highwaynet.data.download.search_folders`); a file is missing and ``download``
            is false, or the download failed.
        OSError: a file does not match its sha256 (a download that does not is deleted).
    """
    if not isinstance(name, str) or name not in MODELS:
        raise ValueError(f"unknown ELMo model {name!r}; name must be one of the published ones: {', '.join(MODELS)}")
    download = check_flag("download", download)
    model = MODELS[name]
    files = [model.options, model.weights]
    if sha256 is not None:
        if isinstance(sha256, str) or not isinstance(sha256, (tuple, list)) or len(sha256) != 2 or not all(
                isinstance(h, str) and re.fullmatch(r"[0-9a-fA-F]{64}", h) for h in sha256):
            raise ValueError(f"download_model: sha256 must be two sha256s (64 hexadecimal digits each), the options "
                             f"file's and the weight file's, got {sha256!r}")
        files = [replace(file, sha256=digest.lower()) for file, digest in zip(files, sha256, strict=True)]
    folders = search_folders(data_dir, download=download)  # (checked as the data loaders check theirs)
    hint = f"download {model.options.url} and {model.weights.url} into a folder and pass --options and --weights"
    pin = (f"pass both files' sha256 as download_model({name!r}, ..., sha256=(OPTIONS, WEIGHTS)), or "
           f"highwaynet elmo embed --model {name} --sha256 OPTIONS WEIGHTS")
    options = locate(files[0], folders, download=download, hint=hint, pin=pin)
    weights = locate(files[1], folders, download=download, hint=hint, pin=pin)
    return options, weights
