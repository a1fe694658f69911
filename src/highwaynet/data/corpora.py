"""Text corpora for language modelling, at the character or the word level.

A :class:`Corpus` holds a vocabulary built from the training split and the three splits as 1-D
tensors of token ids. Known corpora: Tiny Shakespeare (first 90% of the characters to train, next
5% to validate, last 5% to test) and Jane Austen's six novels (train on four, validate on
*Northanger Abbey*, test on *Persuasion*). Any folder with ``train.txt``, ``valid.txt`` and
``test.txt`` in Penn Treebank's format (one sentence a line, ``<eos>`` added at each line end) also
works.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from .._checks import check_choice, check_finite, check_flag, check_ids, check_int, check_path, check_size, describe
from .download import DataFile, locate, read_text, search_folders

__all__ = ["AUSTEN_NOVELS", "NGRAM_CELLS", "Corpus", "load_corpus", "tokenize_words"]

UNK, EOS = "<unk>", "<eos>"

TINY_SHAKESPEARE = DataFile(
    "tinyshakespeare.txt",
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
    "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed")

#: Which of Austen's six novels make each split of the ``austen`` corpus (whole novels, never cut).
AUSTEN_NOVELS = {
    "train": ["emma.txt", "mansfield_park.txt", "pride_prejudice.txt", "sense_sensibility.txt"],
    "valid": ["northanger_abbey.txt"],
    "test": ["persuasion.txt"],
}
#: The novels' sha256, as CRAN's janeaustenr (Debian's r-cran-janeaustenr) gives them, one novel a file.
AUSTEN_SHA256 = {
    "emma.txt": "7c67b5985c6d0de1efaeb5d342d52cb82c38083c40e2295129e30e87ee690ebe",
    "mansfield_park.txt": "98bc90519cdf4ef663ad7de2734bb529435ef24f7abbde6bb1a50898871dafe9",
    "northanger_abbey.txt": "51f91bbe0517db8e65cff009b097ce0a1836124c4e0532ac19e6c0cad982abed",
    "persuasion.txt": "8061549557aebd2fd6e353d18d9197cb707029112bd52d4d8b174583a925848a",
    "pride_prejudice.txt": "dfc684d4f857fa938268f9ab9c5567b64bd0691251eca959644adeabe6287a4d",
    "sense_sensibility.txt": "105e1651fe93bed7130078578efd31e0c557d68667ba672ddc876f735b30fe09",
}
AUSTEN_HINT = ("put the six novels' text files (emma.txt, mansfield_park.txt, northanger_abbey.txt, "
               "persuasion.txt, pride_prejudice.txt, sense_sensibility.txt; one novel a file, from CRAN's "
               "janeaustenr or Debian's r-cran-janeaustenr) in a folder 'austen' inside the data folder")

_WORD = re.compile(r"[a-z0-9]+(?:['’][a-z]+)*|[^\sa-z0-9]")


def tokenize_words(text: str) -> list[str]:
    """Lower-cased words and punctuation marks; a blank line (a paragraph's end) becomes ``<eos>``."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {describe(text)}")
    tokens: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text.lower()):
        words = _WORD.findall(paragraph)
        if words:
            tokens += words + [EOS]
    return tokens


#: The most cells an n-gram table of :meth:`Corpus.ngram_nats` may have (vocabulary size ** order).
NGRAM_CELLS = 50_000_000


@dataclass
class Corpus:
    """A tokenised corpus: a vocabulary and the train / valid / test splits as token ids.

    Attributes:
        name: the corpus's name.
        level: ``"char"`` or ``"word"``.
        vocab: the tokens, index = id; ``<unk>`` is id 0.
        train, valid, test: 1-D int64 tensors of token ids.
    """

    name: str
    level: str
    vocab: list[str]
    train: Tensor
    valid: Tensor
    test: Tensor

    def __post_init__(self) -> None:
        self.index = {tok: i for i, tok in enumerate(self.vocab)}

    def encode(self, text: str | list[str]) -> Tensor:
        """Token ids of ``text`` (a string, or a list of tokens); unknown tokens map to ``<unk>``."""
        if not isinstance(text, (str, list)) or not all(isinstance(t, str) for t in text):
            raise TypeError(f"text must be a str or a list of tokens (str), got {describe(text)}")
        tokens = list(text) if self.level == "char" and isinstance(text, str) else (
            tokenize_words(text)[:-1] if isinstance(text, str) else text)
        return torch.tensor([self.index.get(t, 0) for t in tokens], dtype=torch.long)

    def decode(self, ids: Tensor | list[int]) -> str:
        """The text of token ids (a 1-D tensor or a list of ints in the vocabulary)."""
        if isinstance(ids, Tensor):  # (its values checked at once)
            numbers = check_ids("Corpus.decode", "ids", ids, len(self.vocab)).reshape(-1).tolist()
        elif isinstance(ids, (list, tuple)):
            numbers = [check_int(f"ids[{k}]", i, minimum=0, below=len(self.vocab)) for k, i in enumerate(ids)]
        else:
            raise TypeError(f"ids must be a tensor or a list of token ids, got {describe(ids)}")
        tokens = [self.vocab[i] for i in numbers]
        if self.level == "char":
            return "".join(tokens)
        # Words joined by spaces; <eos> ends a paragraph (or a sentence, in PTB's format).
        return "".join("\n\n" if t == EOS else (t if i == 0 or tokens[i - 1] == EOS else " " + t)
                       for i, t in enumerate(tokens))

    def unigram_entropy_bits(self, split: str = "valid") -> float:
        """Entropy (bits per token) of the split's token frequencies: what a model must beat."""
        split = check_choice("split", split, ("train", "valid", "test"))
        counts = torch.bincount(getattr(self, split), minlength=len(self.vocab)).double()
        p = counts[counts > 0] / counts.sum()
        return float(-(p * p.log2()).sum())

    def ngram_nats(self, order: int, split: str = "test",
                   smoothing: tuple[float, ...] = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)) -> dict[str, float]:
        """Cross-entropy (nats per token) on ``split`` of an ``order``-gram model counted on the training
        split, add-k smoothed: :math:`p(w \\mid c) = (n(c, w) + k) / (n(c) + k V)`, with ``k`` the one of
        ``smoothing`` whose model scores best on the validation split (never on the test split). The
        first ``order - 1`` tokens of a split, which have no full context, are not scored. A reference a
        language model must beat: a character model that has not reached the bigram's loss has not yet
        learned which character follows which.

        Returns ``{"nats": ..., "k": ...}``."""
        order = check_size("order", order)
        split = check_choice("split", split, ("valid", "test"))
        if not isinstance(smoothing, (tuple, list)) or not smoothing:
            raise TypeError(f"smoothing must be a non-empty tuple of positive numbers, got {describe(smoothing)}")
        for k in smoothing:
            if check_finite("smoothing", k) <= 0:
                raise ValueError(f"smoothing must hold positive numbers, got {k}")
        vocab = len(self.vocab)
        if vocab ** order > NGRAM_CELLS:
            raise ValueError(f"an n-gram table of order {order} over {vocab} tokens has {vocab ** order:,} cells: "
                             f"too many to count here (at most {NGRAM_CELLS:,}); use a smaller order")
        for name in ("train", "valid", split):
            if len(getattr(self, name)) < order:
                raise ValueError(f"the {name} split has {len(getattr(self, name))} tokens: an n-gram model of "
                                 f"order {order} needs at least {order}")

        def cells(ids: Tensor) -> Tensor:  # (each position's context and token as one index)
            index = torch.zeros(len(ids) - order + 1, dtype=torch.long)
            for j in range(order):
                index = index * vocab + ids[j:len(ids) - order + 1 + j]
            return index

        counts = torch.bincount(cells(self.train), minlength=vocab ** order).double().view(-1, vocab)
        context = counts.sum(1, keepdim=True)

        def nats(index: Tensor, k: float) -> float:
            p = (counts.view(-1)[index] + k) / (context.view(-1)[index // vocab] + k * vocab)
            return float(-p.log().mean())

        valid = cells(self.valid)  # (indexed once, scored at each k)
        k = min(smoothing, key=lambda k: nats(valid, k))
        return {"nats": nats(valid if split == "valid" else cells(self.test), k), "k": k}

    def __repr__(self) -> str:
        return (f"Corpus({self.name!r}, {self.level}, vocab={len(self.vocab)}, train={len(self.train)}, "
                f"valid={len(self.valid)}, test={len(self.test)})")


def _build(name: str, level: str, texts: dict[str, str], max_vocab: int | None, min_count: int,
           lines_are_sentences: bool) -> Corpus:
    def tokens(text: str) -> list[str]:
        if level == "char":
            return list(text)
        if lines_are_sentences:  # Penn Treebank's format: already tokenised, one sentence a line
            return [t for line in text.splitlines() if line.strip() for t in (*line.split(), EOS)]
        return tokenize_words(text)

    split_tokens = {k: tokens(v) for k, v in texts.items()}
    if not split_tokens["train"]:
        raise ValueError(f"{name}: the training split is empty")
    counts = Counter(split_tokens["train"])
    counts.pop(UNK, None)
    ranked = sorted((t for t, c in counts.items() if c >= min_count), key=lambda t: (-counts[t], t))
    vocab = [UNK] + ranked[: None if max_vocab is None else max_vocab - 1]
    index = {t: i for i, t in enumerate(vocab)}
    ids = {k: torch.tensor([index.get(t, 0) for t in v], dtype=torch.long) for k, v in split_tokens.items()}
    return Corpus(name, level, vocab, ids["train"], ids["valid"], ids["test"])


def load_corpus(name: str, level: str = "char", data_dir: str | Path | None = None, *, download: bool = False,
                max_vocab: int | None = None, min_count: int = 1) -> Corpus:
    """Load ``"tinyshakespeare"``, ``"austen"``, or a folder path with ``train.txt / valid.txt / test.txt``.

    Args:
        name: a corpus name, or a folder holding PTB-format split files.
        level: ``"char"`` or ``"word"``.
        data_dir: where to look for the known corpora (then ``$HIGHWAYNET_DATA``).
        download: fetch Tiny Shakespeare from its public source if it is missing.
        max_vocab: keep the most frequent tokens of the training split (``<unk>`` included);
            the rest become ``<unk>``. Default: all (char) or 10,000 (word).
        min_count: tokens seen fewer times in training become ``<unk>``.
    """
    if not isinstance(name, (str, os.PathLike)):
        raise TypeError(f"name must be a corpus's name or a folder, got {describe(name)}")
    check_choice("level", level, ("char", "word"))
    if max_vocab is not None:
        check_size("max_vocab", max_vocab)
    check_size("min_count", min_count)
    check_flag("download", download)  # (and data_dir: checked here, for a folder too, which does not read them)
    if data_dir is not None:
        check_path("data_dir", data_dir)
    name = os.fspath(name)
    if not name:
        raise ValueError("name must be a corpus's name or a folder, got an empty string")
    if level == "word" and max_vocab is None:
        max_vocab = 10_000
    known = name in ("tinyshakespeare", "austen")
    folders = search_folders(data_dir, download=download) if known else []
    if name == "tinyshakespeare":
        path = locate(TINY_SHAKESPEARE, folders, download=download,
                      hint="download it from github.com/karpathy/char-rnn (data/tinyshakespeare/input.txt)")
        text = read_text(path)
        a, b = int(0.9 * len(text)), int(0.95 * len(text))
        return _build(name, level, {"train": text[:a], "valid": text[a:b], "test": text[b:]},
                      max_vocab, min_count, lines_are_sentences=False)
    if name == "austen":
        texts = {}
        for split, novels in AUSTEN_NOVELS.items():
            paths = [locate(DataFile(f"austen/{n}", None, AUSTEN_SHA256[n]), folders, download=False, hint=AUSTEN_HINT)
                     for n in novels]
            texts[split] = "\n\n".join(read_text(p) for p in paths)
        return _build(name, level, texts, max_vocab, min_count, lines_are_sentences=False)
    folder = check_path("name", name)  # (a folder given as ~/corpus, the shell not having expanded it: the home's)
    if not folder.is_dir():
        raise ValueError(f"unknown corpus {name!r}: name must be 'tinyshakespeare', 'austen', or a folder with "
                         f"train.txt, valid.txt and test.txt")
    texts = {}
    for split in ("train", "valid", "test"):
        path = folder / f"{split}.txt"
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: a corpus folder needs train.txt, valid.txt and test.txt "
                                    f"(one sentence a line)")
        texts[split] = read_text(path)
        if not texts[split].split():
            raise ValueError(f"{path} is empty: a corpus folder needs text in each of train.txt, valid.txt and "
                             f"test.txt (one sentence a line)")
    return _build(folder.name, level, texts, max_vocab, min_count, lines_are_sentences=True)
