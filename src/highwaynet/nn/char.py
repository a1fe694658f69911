r"""Word vectors from characters, with highway layers: the character-level word encoder of
character-aware language models (Kim, Jernite, Sontag & Rush, AAAI 2016), ELMo and BiDAF.

Each word, a row of character ids, is embedded character by character, convolved with filters of
several widths, max-pooled over its valid positions, and passed through highway layers:

.. math::
    e_j = E[c_j], \qquad f^{(w)}_k = \max_{p} \; g\big(\textstyle\sum_{i<w} K^{(w)}_{k,i} e_{p+i} + b^{(w)}_k\big),
    \qquad y = \mathrm{Highway}([f^{(w_1)}; f^{(w_2)}; \dots])

(``g``: tanh in Kim et al., relu in ELMo). :class:`CharVocab` turns words into the padded id rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, cast

import torch
from torch import Tensor, nn

from .._checks import (
    check_choice,
    check_factory,
    check_flag,
    check_gate_bias,
    check_ids,
    check_int,
    check_size,
    check_sizes,
    describe,
)
from ..functional import get_activation
from ._signature import settings_repr
from .highway import Highway

__all__ = ["PRESETS", "CharCNNHighway", "CharVocab"]

#: The published encoders: filter widths with their filter counts, highway layers, character
#: embedding size, the convolutions' nonlinearity, and a projection (ELMo's, to its LSTM's width).
PRESETS: dict[str, dict[str, Any]] = {
    # Kim et al. (2016), LSTM-CharCNN-Small: widths 1-6, 25 filters per unit of width, one highway layer
    "kim-small": {"filters": tuple((w, 25 * w) for w in range(1, 7)), "num_highway": 1, "char_dim": 15,
                  "activation": "tanh", "projection": None},
    # LSTM-CharCNN-Large: widths 1-7, min(200, 50 w) filters, two highway layers
    "kim-large": {"filters": tuple((w, min(200, 50 * w)) for w in range(1, 8)), "num_highway": 2, "char_dim": 15,
                  "activation": "tanh", "projection": None},
    # A CPU-sized kim-small: two fifths of its filters (10 w), so that a highway layer costs 88 k
    # parameters rather than 551 k (what highwaynet's char-lm study runs by default)
    "compact": {"filters": tuple((w, 10 * w) for w in range(1, 7)), "num_highway": 1, "char_dim": 15,
                "activation": "tanh", "projection": None},
    # ELMo (Peters et al., 2018): 2,048 filters, two highway layers, a projection to 512
    "elmo": {"filters": ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024)), "num_highway": 2,
             "char_dim": 16, "activation": "relu", "projection": 512},
}


class CharCNNHighway(nn.Module):
    r"""A word's vector from its characters: character embeddings, convolutions of several widths
    max-pooled over the word, then highway layers (Kim et al., 2016; ELMo; BiDAF).

    Args:
        num_chars: the character vocabulary's size (:class:`CharVocab`'s ``len``), id ``padding_idx``
            being padding.
        filters: ``(width, count)`` for each convolution. Default: Kim et al.'s small model's.
        num_highway: highway layers on the pooled features. Default: 1.
        char_dim: character embedding size. Default: 15.
        activation: the convolutions' nonlinearity. Default: ``"tanh"``.
        highway_activation: the highway layers' transform. Default: ``"relu"``.
        gate_bias: the highway layers' initial transform-gate bias. Default: -2.0.
        highway: False puts plain MLP layers (``Linear`` and ``highway_activation``) of the same width
            in the highway layers' place, for the paper's comparison. Default: True.
        projection: a final linear map to this width (ELMo's), or None. Default: None.
        padding_idx: the padding character's id. Default: 0.
        pool: ``"word"``: each filter's maximum over the windows inside the word (below); ``"all"``:
            over every window of the row, padding included, then the activation (ELMo's order,
            ``g(max(...))``, the same values for the monotone relu and tanh, and a pass over the
            pooled features rather than over every window). Default: ``"word"``.
        device, dtype: where and in what type the parameters are made.

    Shape:
        - Input: character ids ``(*, L)``, each word's characters then padding (``padding_idx``); a
          word shorter than the widest filter is padded as needed.
        - Output: ``(*, F)``, ``F`` the filters' total (or ``projection``).

    Padding never reaches a word's features: each filter's maximum is over the windows that lie
    within the word (the first window alone for a word shorter than the filter, its padding
    embedded as zeros), so a word's vector does not depend on how much padding its batch has.
    ``pool="all"`` is the pooling of ELMo's encoder (bilm-tf's ``max_pool`` over all
    ``max_characters - width + 1`` windows), whose rows are always full width: their padding
    character is a learned one, not ``padding_idx``.

    Example::

        >>> vocab = CharVocab.from_words(["the", "cat", "sat"])
        >>> encoder = CharCNNHighway.preset("kim-small", len(vocab))
        >>> encoder(vocab.encode(["the", "mat"])).shape          # 'm' is an unknown character
        torch.Size([2, 525])
    """

    def __init__(self, num_chars: int, *, filters: Sequence[tuple[int, int]] = PRESETS["kim-small"]["filters"],
                 num_highway: int = 1, char_dim: int = 15, activation: str | Callable[[Tensor], Tensor] = "tanh",
                 highway_activation: str = "relu", gate_bias: float = -2.0, highway: bool = True,
                 projection: int | None = None, padding_idx: int = 0, pool: str = "word",
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if isinstance(filters, (str, bytes, Tensor)) or not isinstance(filters, Collection):
            raise TypeError(f"filters must be (width, count) pairs, got {describe(filters)}")
        pairs = tuple(check_sizes(f"filters[{i}]", f, length=2) for i, f in enumerate(filters))
        if not pairs:
            raise ValueError("filters must hold at least one (width, count) pair, got none")
        filters = cast("tuple[tuple[int, int], ...]", pairs)
        factory = check_factory(device, dtype)
        self.num_chars, self.filters = check_size("num_chars", num_chars), filters
        self.num_highway = check_size("num_highway", num_highway, minimum=0)
        self.char_dim = check_size("char_dim", char_dim)
        self.activation, self.highway_activation = get_activation(activation), highway_activation
        get_activation(highway_activation)
        self.gate_bias, self.highway = check_gate_bias(gate_bias, dtype), check_flag("highway", highway)
        self.padding_idx = check_int("padding_idx", padding_idx, minimum=0, below=num_chars)
        self.projection_size = None if projection is None else check_size("projection", projection)
        self.pool = check_choice("pool", pool, ("word", "all"))
        self.embedding = nn.Embedding(num_chars, char_dim, padding_idx=padding_idx, **factory)
        self.convs = nn.ModuleList(nn.Conv1d(char_dim, count, width, **factory) for width, count in filters)
        width = sum(count for _, count in filters)
        self.layers: nn.Module
        if num_highway == 0:
            self.layers = nn.Identity()
        elif highway:
            self.layers = Highway(width, num_highway, activation=highway_activation, gate_bias=gate_bias, **factory)
        else:
            act = get_activation(highway_activation)
            self.layers = nn.Sequential(*(_Apply(nn.Linear(width, width, **factory), act) for _ in range(num_highway)))
        self.projection = nn.Linear(width, projection, **factory) if projection else None
        self.output_size = projection or width

    def reset_parameters(self) -> None:
        """Each part's own initialisation, the padding character's embedding at 0 and the highway
        layers' gate biases at ``gate_bias``: what construction does, for an encoder made on the meta
        device and then ``to_empty``."""
        self.embedding.reset_parameters()
        for conv in self.convs:
            cast(nn.Conv1d, conv).reset_parameters()
        if isinstance(self.layers, Highway):
            self.layers.reset_parameters()
        else:  # (the MLP layers in the highway layers' place, or none)
            for layer in self.layers.modules():
                if isinstance(layer, nn.Linear):
                    layer.reset_parameters()
        if self.projection is not None:
            self.projection.reset_parameters()

    @classmethod
    def preset(cls, name: str, num_chars: int, **overrides: Any) -> CharCNNHighway:
        """An encoder by name (:data:`PRESETS`: ``"kim-small"``, ``"kim-large"``, ``"elmo"``, and
        ``"compact"``, a CPU-sized kim-small), any of its settings overridden by keyword."""
        if not isinstance(name, str) or name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}: name must be one of {', '.join(PRESETS)}")
        return cls(num_chars, **{**PRESETS[name], **overrides})

    def forward(self, chars: Tensor) -> Tensor:
        chars = check_ids("CharCNNHighway", "chars", chars, self.num_chars, self.embedding.weight)
        if chars.dim() < 1:
            raise ValueError("CharCNNHighway expects chars of shape (*, L), character ids, got a scalar")
        lead, length = chars.shape[:-1], chars.shape[-1]
        chars = chars.flatten(0, -2) if chars.dim() > 1 else chars[None]  # (N, L); (not reshape: L may be 0)
        widest = max(w for w, _ in self.filters)
        if length < widest:  # (padding, embedded as zeros: what a longer batch would hold)
            chars = nn.functional.pad(chars, (0, widest - length), value=self.padding_idx)
        x = self.embedding(chars).transpose(1, 2)  # (N, char_dim, L)
        if self.pool == "all":
            pooled = [self.activation(conv(x).amax(-1)) for conv in self.convs]
            return self._transform(torch.cat(pooled, dim=-1)).reshape(*lead, self.output_size)
        lengths = (chars != self.padding_idx).sum(-1, keepdim=True)  # (N, 1), padding at each row's end
        pooled = []
        for (width, _), conv in zip(self.filters, self.convs, strict=True):
            features = self.activation(conv(x))  # (N, count, L - width + 1)
            position = torch.arange(features.shape[-1], device=chars.device)
            # windows inside the word, or the first one where the word is shorter than the filter
            inside = (position[None, :] <= lengths - width) | (position[None, :] == 0)
            pooled.append(features.masked_fill(~inside[:, None, :], float("-inf")).amax(-1))
        return self._transform(torch.cat(pooled, dim=-1)).reshape(*lead, self.output_size)

    def _transform(self, features: Tensor) -> Tensor:
        """The pooled features ``(N, F)`` through the highway layers and the projection."""
        y = self.layers(features)
        return self.projection(y) if self.projection is not None else y

    def extra_repr(self) -> str:
        return settings_repr(self, projection=self.projection_size)


class _Apply(nn.Module):
    """``f(linear(x))``: one MLP layer (the highway layers' plain counterpart)."""

    def __init__(self, linear: nn.Linear, f: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        self.linear, self.f = linear, f

    def forward(self, x: Tensor) -> Tensor:
        return self.f(self.linear(x))


def _check_words(words: object) -> list[str]:
    """``words`` as a list of words: an iterable of ``str``, not one ``str`` (whose letters would be
    read as one-letter words)."""
    if isinstance(words, str):
        raise TypeError(f"words must be a list of words, got one str {words[:30]!r}: pass [{words[:30]!r}] "
                        f"for one word")
    if isinstance(words, (bytes, Tensor)) or not isinstance(words, Iterable):
        raise TypeError(f"words must be a list of words (str), got {describe(words)}")
    words = list(words)
    for word in words:
        if not isinstance(word, str):
            raise TypeError(f"words must hold str, got {describe(word)}")
    return words


def _check_word_length(name: str, length: object) -> int:
    """A word's length in ids: room for the two markers and a character at least."""
    number = check_int(name, length)
    if number < 3:
        raise ValueError(f"{name} must be at least 3 (the two markers and a character), got {number}")
    return number


class CharVocab:
    """Characters to ids, and words to padded rows of them (what :class:`CharCNNHighway` reads).

    Ids: 0 padding, 1 an unknown character, 2 and 3 the begin- and end-of-word markers, then the
    characters by frequency. A word becomes ``[BOW, c_1, ..., c_n, EOW]``, its characters cut to
    ``max_word_length - 2`` (a word is a string of Unicode code points: any script is taken as it is).

    Example::

        >>> vocab = CharVocab.from_words(["a", "bb"])
        >>> vocab.encode(["bb", "a", "c"])
        tensor([[2, 4, 4, 3],
                [2, 5, 3, 0],
                [2, 1, 3, 0]])
    """

    PAD, UNK, BOW, EOW = 0, 1, 2, 3
    SPECIALS = ("<pad>", "<unk>", "<bow>", "<eow>")

    def __init__(self, chars: Iterable[str], max_word_length: int = 50) -> None:
        self.max_word_length = _check_word_length("max_word_length", max_word_length)
        if isinstance(chars, (bytes, Tensor)) or not isinstance(chars, Iterable):
            raise TypeError(f"chars must be an iterable of characters (str), got {describe(chars)}")
        self.chars = list(chars)
        for c in self.chars:
            if not isinstance(c, str) or len(c) != 1:
                raise ValueError(f"chars must hold single characters (str of length 1), got {describe(c)}")
        if len(set(self.chars)) != len(self.chars):
            raise ValueError("chars must hold distinct characters, got one twice")
        self.index = {c: i + len(self.SPECIALS) for i, c in enumerate(self.chars)}

    @classmethod
    def from_words(cls, words: Iterable[str], max_word_length: int = 50, min_count: int = 1) -> CharVocab:
        """The characters of ``words`` seen at least ``min_count`` times, most frequent first."""
        words = _check_words(words)
        min_count = check_size("min_count", min_count, minimum=0)
        counts = Counter(c for word in words for c in word)
        return cls(sorted((c for c, n in counts.items() if n >= min_count), key=lambda c: (-counts[c], c)),
                   max_word_length)

    def __len__(self) -> int:
        return len(self.SPECIALS) + len(self.chars)

    def word_ids(self, word: str, length: int | None = None) -> list[int]:
        """``[BOW, ids of the word's characters (cut to fit), EOW]``: at most ``max_word_length`` ids
        (or ``length``, if shorter), the markers always kept."""
        if not isinstance(word, str):
            raise TypeError(f"word must be a str, got {describe(word)}")
        longest = self.max_word_length if length is None else min(_check_word_length("length", length),
                                                                  self.max_word_length)
        body = [self.index.get(c, self.UNK) for c in word[: longest - 2]]
        return [self.BOW, *body, self.EOW]

    def encode(self, words: Sequence[str], length: int | None = None) -> Tensor:
        """The words as a ``(len(words), L)`` int64 tensor, rows padded to the longest, or to ``length``
        (a word longer than that is cut, as by ``max_word_length``: its markers kept)."""
        words = _check_words(words)
        if length is not None:
            length = _check_word_length("length", length)
        rows = [self.word_ids(w, length) for w in words]
        width = length if length is not None else max((len(r) for r in rows), default=2)
        out = torch.full((len(rows), width), self.PAD, dtype=torch.long)
        for i, row in enumerate(rows):
            out[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        return out

    def state_dict(self) -> dict[str, Any]:
        """What :meth:`from_state_dict` makes the same vocabulary from (JSON-safe)."""
        return {"chars": self.chars, "max_word_length": self.max_word_length}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> CharVocab:
        """The vocabulary :meth:`state_dict` gave (read from a file: checked as any argument)."""
        if not isinstance(state, dict) or not {"chars", "max_word_length"} <= state.keys():
            raise ValueError(f"state must be a CharVocab's state_dict, a dict with 'chars' and 'max_word_length', "
                             f"got {describe(state)}")
        if not isinstance(state["chars"], list):
            raise ValueError(f"state's chars must be a list of characters, got {describe(state['chars'])}")
        return cls(state["chars"], state["max_word_length"])

    def __repr__(self) -> str:
        return f"CharVocab({len(self.chars)} characters, max_word_length={self.max_word_length})"
