"""Sentence classifiers: highway BiLSTM stacks, plain BiLSTM stacks, Kim's CNN, and Kim's CNN with highway layers."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import torch
from torch import Tensor, nn

from .._checks import (
    check_choice,
    check_gate_bias,
    check_ids,
    check_lengths,
    check_path,
    check_probability,
    check_size,
    check_sizes,
)
from ..config import ENCODERS
from ..nn import CharCNNHighway, Highway, HighwayLSTM
from ..nn._signature import settings_repr
from ..nn.char import PRESETS
from ..nn.resize import RESIZE_KINDS

__all__ = ["ENCODERS", "ENCODER_DESCRIPTIONS", "STACKED_ENCODERS", "WORD_FEATURES", "SentenceClassifier",
           "load_word_vectors"]

STACKED_ENCODERS = ("hbilstm", "bilstm")  # the encoders whose depth is a setting (num_layers); the CNNs have none
WORD_FEATURES = ("words", "chars", "words+chars")  # what each word enters the encoder as
ENCODER_DESCRIPTIONS = {
    "hbilstm": "a stack of highway BiLSTM blocks",
    "bilstm": "a plain BiLSTM stack of the same depth and width",
    "cnn": "Kim's CNN (filter widths 3, 4 and 5, 100 maps each)",
    "cnn-highway": "Kim's CNN followed by 2 dense highway layers",
}


def _masked_max(x: Tensor, valid: Tensor) -> Tensor:
    """Max over time of ``x`` ``(B, T, F)`` where ``valid`` ``(B, T)`` is True."""
    return x.masked_fill(~valid.unsqueeze(-1), float("-inf")).amax(dim=1)


class SentenceClassifier(nn.Module):
    r"""Embedding -> encoder -> max over time -> dropout -> linear classifier.

    Encoders:
        - ``"hbilstm"``: a stack of highway-gated BiLSTM blocks (:class:`~highwaynet.nn.HighwayLSTM`);
        - ``"bilstm"``: the same stack without the gates (a plain BiLSTM stack of equal depth and width);
        - ``"cnn"``: Kim (2014)'s CNN: filters of widths 3, 4, 5 with 100 maps each, ReLU, max over time;
        - ``"cnn-highway"``: Kim's CNN followed by ``highway_layers`` dense highway layers.

    Args:
        vocab_size: tokens in the vocabulary, ``<pad>`` = 0.
        num_classes: labels.
        encoder: one of :data:`ENCODERS`.
        embed_dim: embedding size. Default: 300.
        hidden_size: LSTM state size per direction. Default: 150 (a BiLSTM then keeps 300 wide).
        num_layers: blocks in a (H)BiLSTM stack. Default: 1.
        dropout: dropout on the sentence vector and between blocks. Default: 0.5.
        resize: how an HBiLSTM block brings its input to its width: ``"projection"`` or ``"zeropad"``.
        gate_bias: initial transform-gate bias. Default: -2.0.
        highway_layers: dense highway layers after the CNN (``"cnn-highway"``). Default: 2.
        embed_dropout: dropout on the word vectors, before the encoder. Default: 0.0.
        word_features: each word as its own vector (``"words"``), as its characters read by a
            :class:`~highwaynet.nn.CharCNNHighway` (``"chars"``), or both side by side
            (``"words+chars"``, as BiDAF). Default: ``"words"``.
        word_chars: with characters, ``(V, L)`` character ids of every word id (a buffer); ids from
            ``num_words`` on are words the embedding does not hold (seen outside the training set):
            their word vector is ``<unk>``'s (id 1), their characters their own.
        num_chars: the character vocabulary's size (with characters).
        char_encoder: the character encoder's preset (:data:`~highwaynet.nn.char.PRESETS`). Default:
            ``"compact"``.
        num_words: the embedding's rows (default: ``vocab_size``).

    Shape:
        ``tokens`` ``(B, T)`` ids (0 = padding), ``lengths`` ``(B,)`` -> logits ``(B, num_classes)``.
        Padding never changes a sentence's logits.

    Example::

        >>> model = SentenceClassifier(vocab_size=20000, num_classes=2, encoder="hbilstm", num_layers=4)
        >>> tokens = torch.tensor([[5, 81, 7, 0], [9, 12, 3, 44]])    # two sentences, the first padded
        >>> model(tokens, lengths=torch.tensor([3, 4])).shape
        torch.Size([2, 2])
    """

    def __init__(self, vocab_size: int, num_classes: int, *, encoder: str = "hbilstm", embed_dim: int = 300,
                 hidden_size: int = 150, num_layers: int = 1, dropout: float = 0.5, resize: str = "projection",
                 gate_bias: float = -2.0, highway_layers: int = 2, kernel_sizes: tuple[int, ...] = (3, 4, 5),
                 feature_maps: int = 100, embed_dropout: float = 0.0, word_features: str = "words",
                 word_chars: Tensor | None = None, num_chars: int | None = None, char_encoder: str = "compact",
                 num_words: int | None = None) -> None:
        super().__init__()
        if encoder not in ENCODERS:
            raise ValueError(f"unknown encoder {encoder!r}; expected one of {ENCODERS}")
        if word_features not in WORD_FEATURES:
            raise ValueError(f"word_features must be one of {WORD_FEATURES}, got {word_features!r}")
        if word_features != "words" and (word_chars is None or num_chars is None):
            raise ValueError(f"word_features={word_features!r} needs word_chars and num_chars (CharVocab)")
        if word_features == "words" and (word_chars is not None or num_chars is not None):
            raise ValueError("word_chars and num_chars are read only with word_features='chars' or 'words+chars' "
                             "(a model that reads each word's characters), got them with word_features='words'")
        for name, size in (("vocab_size", vocab_size), ("num_classes", num_classes), ("embed_dim", embed_dim),
                           ("hidden_size", hidden_size), ("num_layers", num_layers), ("feature_maps", feature_maps)):
            check_size(name, size)
        if check_size("highway_layers", highway_layers, minimum=0) == 0 and encoder == "cnn-highway":
            raise ValueError("highway_layers must be positive for encoder 'cnn-highway' (encoder 'cnn' is the CNN "
                             "without them), got 0")
        kernel_sizes = check_sizes("kernel_sizes", kernel_sizes)
        check_probability("dropout", dropout)
        check_probability("embed_dropout", embed_dropout)
        check_choice("resize", resize, RESIZE_KINDS)
        check_gate_bias(gate_bias)
        if num_words is not None and check_size("num_words", num_words) > vocab_size:
            raise ValueError(f"num_words must be at most vocab_size ({vocab_size}), got {num_words}")
        if word_features != "words":
            num_chars = check_size("num_chars", num_chars)
            word_chars = check_ids("SentenceClassifier", "word_chars", word_chars, num_chars)
            if word_chars.dim() != 2 or word_chars.shape[1] == 0:
                raise ValueError(f"word_chars must be (V, L) character ids, L at least 1, got shape "
                                 f"{tuple(word_chars.shape)}")
            check_choice("char_encoder", char_encoder, PRESETS)
        self.encoder = encoder
        self.vocab_size, self.num_classes, self.embed_dim, self.hidden_size = vocab_size, num_classes, embed_dim, \
            hidden_size
        self.num_layers, self.dropout_p, self.resize, self.gate_bias = num_layers, dropout, resize, gate_bias
        self.highway_layers, self.feature_maps, self.embed_dropout_p = highway_layers, feature_maps, embed_dropout
        self.word_features, self.num_chars, self.char_encoder = word_features, num_chars, char_encoder
        self.num_words = num_words or vocab_size
        if word_features != "chars":
            self.embedding = nn.Embedding(self.num_words, embed_dim, padding_idx=0)
            nn.init.uniform_(self.embedding.weight, -0.25, 0.25)  # Kim's random initialisation
            with torch.no_grad():
                self.embedding.weight[0].zero_()
        input_size = 0 if word_features == "chars" else embed_dim
        if word_features != "words":
            assert word_chars is not None and num_chars is not None  # (checked above)
            if len(word_chars) != vocab_size:
                raise ValueError(f"word_chars must hold one row per word id ({vocab_size}), got {len(word_chars)}")
            self.register_buffer("word_chars", word_chars.long().clone())
            self.chars = CharCNNHighway.preset(char_encoder, num_chars)
            input_size += self.chars.output_size
        embed_dim = input_size
        self.dropout = nn.Dropout(dropout)
        self.embed_dropout = nn.Dropout(embed_dropout)
        self.kernel_sizes = tuple(kernel_sizes)
        if encoder in STACKED_ENCODERS:
            # (dropout between blocks: none with one block, where HighwayLSTM, as nn.LSTM, warns of it)
            self.lstm = HighwayLSTM(embed_dim, hidden_size, num_layers, bidirectional=True, batch_first=True,
                                    dropout=dropout if num_layers > 1 else 0.0, resize=resize, gate_bias=gate_bias,
                                    highway=encoder == "hbilstm")
            features = 2 * hidden_size
        else:
            self.convs = nn.ModuleList(nn.Conv1d(embed_dim, feature_maps, k) for k in self.kernel_sizes)
            features = feature_maps * len(self.kernel_sizes)
            self.highway = Highway(features, highway_layers, gate_bias=gate_bias) if encoder == "cnn-highway" else None
        self.classifier = nn.Linear(features, num_classes)

    @property
    def min_length(self) -> int:
        """The shortest padded batch the encoder accepts (the widest filter for a CNN)."""
        return 1 if self.encoder in STACKED_ENCODERS else max(self.kernel_sizes)

    def extra_repr(self) -> str:
        return settings_repr(self, dropout=self.dropout_p, embed_dropout=self.embed_dropout_p,
                             word_chars=getattr(self, "word_chars", None),
                             num_words=None if self.num_words == self.vocab_size else self.num_words)

    def encode(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """The sentence vectors ``(B, features)`` before dropout and the classifier."""
        # (a model that reads characters takes every word word_chars spells: predict() adds unseen words' rows)
        known = self.vocab_size if self.word_features == "words" else len(cast(Tensor, self.word_chars))
        # (on the embedding's device; a model of characters alone indexes its word_chars, which takes CPU ids too)
        words = self.word_features != "chars"
        table = self.embedding.weight if words else cast(Tensor, self.word_chars)
        tokens = check_ids("SentenceClassifier", "tokens", tokens, known, table, cpu_ids=not words)
        if tokens.dim() != 2 or tokens.shape[1] < self.min_length:
            raise ValueError(f"SentenceClassifier expects tokens of shape (B, T), padded to T >= {self.min_length} "
                             f"(the encoder's widest filter), got {tuple(tokens.shape)}")
        checked = check_lengths("SentenceClassifier", lengths, tokens.shape[0], tokens.shape[1], shortest=1,
                               device=tokens.device)
        if checked is None:
            raise TypeError("SentenceClassifier expects lengths, an integer tensor (B,), got None")
        x = self.embed_dropout(self.embed(tokens))
        steps = torch.arange(tokens.shape[1], device=tokens.device)[None, :]
        lengths = checked.to(tokens.device)
        if self.encoder in STACKED_ENCODERS:
            out, _ = self.lstm(x, lengths=lengths)
            return _masked_max(out, steps < lengths[:, None])
        x = x.transpose(1, 2)  # (B, E, T)
        pooled = []
        for k, conv in zip(self.kernel_sizes, self.convs, strict=True):
            feature = torch.relu(conv(x)).transpose(1, 2)  # (B, T - k + 1, maps)
            # A window counts if it lies inside the sentence (or is the first, for a short one).
            valid = steps[:, :feature.shape[1]] < (lengths[:, None] - k + 1).clamp(min=1)
            pooled.append(_masked_max(feature, valid))
        h = torch.cat(pooled, dim=-1)
        return self.highway(h) if self.highway is not None else h

    def embed(self, tokens: Tensor) -> Tensor:
        """Each word's input ``(B, T, E)``: its vector, its characters' (:attr:`chars`), or both."""
        parts = []
        if self.word_features != "chars":  # (a word the embedding does not hold reads as <unk>)
            parts.append(self.embedding(torch.where(tokens < self.num_words, tokens, 1)))
        if self.word_features != "words":
            parts.append(self.chars(cast(Tensor, self.word_chars)[tokens]))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)

    def forward(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        return self.classifier(self.dropout(self.encode(tokens, lengths)))


def load_word_vectors(path: str | Path, vocab: list[str], embedding: nn.Embedding) -> int:
    """Copy the vectors of a text file (GloVe, or word2vec's text format) into ``embedding`` for the
    words of ``vocab`` it has; returns how many were found. Other rows keep their random values."""
    index = {w: i for i, w in enumerate(vocab)}
    found = 0
    with open(check_path("path", path), encoding="utf-8", errors="replace") as f, torch.no_grad():
        for number, line in enumerate(f, 1):
            parts = line.rstrip().split(" ")
            if number == 1 and len(parts) == 2:  # word2vec's header: "count dimension"
                continue
            if parts[0] in index:
                if len(parts) - 1 != embedding.embedding_dim:
                    raise ValueError(f"{path}, line {number}: {len(parts) - 1} values, but the embedding has "
                                     f"{embedding.embedding_dim} dimensions (use --embed-dim)")
                embedding.weight[index[parts[0]]] = torch.tensor([float(v) for v in parts[1:]])
                found += 1
    return found
