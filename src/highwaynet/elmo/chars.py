r"""Sentences to ELMo's character ids: :func:`batch_to_ids`.

The mapping is bilm-tf's (``bilm/data.py``: ``UnicodeCharsVocabulary`` and ``Batcher``), which
AllenNLP's ``ELMoCharacterMapper`` repeats:

- a token is its UTF-8 bytes (0-255; a character that cannot be encoded, a lone surrogate, is
  dropped, as ``str.encode("utf-8", "ignore")`` drops it), cut to ``max_characters - 2`` bytes
  (48: a cut may fall inside a character of several bytes, as in the original), between the
  begin-of-word id 258 and the end-of-word id 259, then the padding id 260 to ``max_characters``
  (50) ids;
- each sentence is framed by a begin-of-sentence token ``[258, 256, 259, 260, ...]`` and an
  end-of-sentence token ``[258, 257, 259, 260, ...]``, and the literal tokens ``<S>`` and ``</S>``
  inside a sentence take those two rows (bilm-tf's vocabulary maps them so; AllenNLP too);
- every id is shifted up by one, so that 0 marks the positions past a sentence's end (a row of
  zeros): the ids run from 1 to 261.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .._checks import check_int, describe

__all__ = ["BOS", "BOW", "EOS", "EOW", "MAX_CHARACTERS", "MAX_CHARACTERS_BOUND", "PAD", "batch_to_ids",
           "sentence_to_ids", "word_to_ids"]

# The ids before the shift by one (bilm-tf's bos_char ... pad_char)
BOS, EOS, BOW, EOW, PAD = 256, 257, 258, 259, 260
#: ELMo's word width (``options["char_cnn"]["max_characters_per_token"]`` of every published model)
MAX_CHARACTERS = 50
#: The ids' range after the shift: 0 (masked) to 261, so an embedding of 262 rows.
NUM_IDS = PAD + 2
#: The most ids per token taken (200 times ELMo's 50): ``max_characters`` sizes every row of ids, so a
#: mistyped one (``10**9``) would allocate gigabytes a token; :func:`~highwaynet.elmo.read_options` takes no
#: more from an options file either.
MAX_CHARACTERS_BOUND = 10_000


def check_max_characters(value: object) -> int:
    """``max_characters`` checked: an int from 4 (a word's two markers and one byte) to
    :data:`MAX_CHARACTERS_BOUND`."""
    value = check_int("max_characters", value, minimum=4)
    if value > MAX_CHARACTERS_BOUND:
        raise ValueError(f"max_characters must be at most {MAX_CHARACTERS_BOUND:,} (ELMo's: {MAX_CHARACTERS}), got "
                         f"{value:,}")
    return value


def _boundary(character: int, width: int) -> list[int]:
    return [BOW + 1, character + 1, EOW + 1] + [PAD + 1] * (width - 3)


def word_to_ids(word: str, max_characters: int = MAX_CHARACTERS) -> list[int]:
    """One token's ``max_characters`` ids (shifted by one), as bilm-tf maps it; ``<S>`` and ``</S>``
    map to the sentence-boundary rows.

    Example::

        >>> word_to_ids("hi", 6)
        [259, 105, 106, 260, 261, 261]

    Raises:
        TypeError: ``word`` is not a str, or ``max_characters`` not an int.
        ValueError: ``max_characters`` is below 4 (a word's two markers and one byte, as in
            :func:`batch_to_ids`) or above :data:`MAX_CHARACTERS_BOUND`.
    """
    if not isinstance(word, str):
        raise TypeError(f"word must be a str, got {describe(word)}")
    return _word_ids(word, check_max_characters(max_characters))


def _word_ids(word: str, max_characters: int) -> list[int]:
    """:func:`word_to_ids` of arguments already checked (the loop over a batch's tokens)."""
    if word == "<S>":
        return _boundary(BOS, max_characters)
    if word == "</S>":
        return _boundary(EOS, max_characters)
    body = word.encode("utf-8", "ignore")[: max_characters - 2]
    return [BOW + 1, *(b + 1 for b in body), EOW + 1] + [PAD + 1] * (max_characters - 2 - len(body))


def _tokens(sentence: str | Sequence[str], index: int, as_text: bool, where: str = "batch_to_ids") -> list[str]:
    if as_text:
        if not isinstance(sentence, str):
            raise TypeError(f"{where}: sentences mix strings and token lists (sentence 0 is a string, sentence "
                            f"{index} a {type(sentence).__name__}); pass all as strings (split at white space) or "
                            f"all as lists of tokens")
        tokens = sentence.split()
    else:
        if isinstance(sentence, (bytes, bytearray)):
            raise TypeError(f"{where}: sentences[{index}] is {type(sentence).__name__}, not text: decode it (a string "
                            f"is split at white space) or pass a list of tokens")
        if isinstance(sentence, str) or not isinstance(sentence, Sequence):
            if index == 0:  # (the first sentence sets the kind: this one is neither)
                raise TypeError(f"{where}: sentences[0] is a {type(sentence).__name__}, not a list of tokens or a "
                                f"string")
            raise TypeError(f"{where}: sentences mix token lists and strings (sentence 0 is a list of tokens, "
                            f"sentence {index} a {type(sentence).__name__}); pass all as strings (split at white "
                            f"space) or all as lists of tokens")
        tokens = list(sentence)
        for position, token in enumerate(tokens):
            if not isinstance(token, str):
                raise TypeError(f"{where}: in sentences, sentence {index}, token {position} is a "
                                f"{type(token).__name__}, not a str")
            if not token:
                raise ValueError(f"{where}: in sentences, sentence {index}, token {position} is empty: a token "
                                 f"needs at least one character")
    if not tokens:
        raise ValueError(f"{where}: in sentences, sentence {index} is empty: ELMo has no vector for it (the "
                         f"original would embed <S> </S> alone); leave it out and keep its place in your own index")
    return tokens


def sentence_to_ids(tokens: Sequence[str], max_characters: int = MAX_CHARACTERS) -> list[list[int]]:
    """A tokenized sentence's rows, ``<S>`` and ``</S>`` added: ``len(tokens) + 2`` rows of ids.

    Raises:
        TypeError: ``tokens`` is not a list of strings (a string: split it, or use :func:`batch_to_ids`), or
            ``max_characters`` not an int.
        ValueError: ``tokens`` or a token is empty, or ``max_characters`` is out of :func:`word_to_ids`' range.
    """
    if isinstance(tokens, str):
        raise TypeError(f"sentence_to_ids takes tokens, a list of strings, got a str {tokens[:20]!r}: split it "
                        f"first, or pass it to batch_to_ids, which does")
    return _sentence_ids(_tokens(tokens, 0, False, "sentence_to_ids"), check_max_characters(max_characters))


def _sentence_ids(tokens: list[str], max_characters: int) -> list[list[int]]:
    """:func:`sentence_to_ids` of arguments already checked (the loop over a batch's sentences)."""
    return [_boundary(BOS, max_characters), *(_word_ids(t, max_characters) for t in tokens),
            _boundary(EOS, max_characters)]


def batch_to_ids(sentences: Sequence[str] | Sequence[Sequence[str]], max_characters: int = MAX_CHARACTERS) -> Tensor:
    """ELMo's character ids of a batch of sentences, sentence boundaries added.

    Args:
        sentences: the sentences, each a list of tokens (``["The", "cat", "."]``; a protein sequence
            as SeqVec reads it: ``list("MKV...")``, one token a residue) or each a string, split at
            white space. All of one kind.
        max_characters: the ids per token (the options' ``max_characters_per_token``). Default: 50.

    Returns:
        An int64 tensor ``(len(sentences), max_len + 2, max_characters)``: each sentence's ``<S>``
        row, its tokens' rows, its ``</S>`` row, then rows of zeros to the longest sentence's length.

    Raises:
        TypeError: ``sentences`` is a string, or mixes strings and token lists, or a token is not a str.
        ValueError: a sentence or a token is empty, or ``max_characters`` is below 4 or above
            :data:`MAX_CHARACTERS_BOUND` (10,000).

    Example::

        >>> ids = batch_to_ids([["Hello", "world", "!"], "A sentence ."])
        Traceback (most recent call last):
        ...
        TypeError: batch_to_ids: sentences mix token lists and strings ...
        >>> batch_to_ids([["Hello", "world", "!"], ["Hi"]]).shape
        torch.Size([2, 5, 50])
    """
    if isinstance(sentences, str) or not isinstance(sentences, Sequence):
        raise TypeError(f"batch_to_ids expects a list of sentences (each a list of tokens, or a string), got "
                        f"{type(sentences).__name__}" + (": wrap one sentence in a list" if isinstance(sentences, str)
                                                         else ""))
    max_characters = check_max_characters(max_characters)
    if not sentences:
        return torch.zeros(0, 2, max_characters, dtype=torch.long)
    as_text = isinstance(sentences[0], str)
    tokenized = [_tokens(s, i, as_text) for i, s in enumerate(sentences)]
    length = max(len(t) for t in tokenized) + 2
    ids = torch.zeros(len(tokenized), length, max_characters, dtype=torch.long)
    for i, tokens in enumerate(tokenized):
        ids[i, : len(tokens) + 2] = torch.tensor(_sentence_ids(tokens, max_characters), dtype=torch.long)
    return ids
