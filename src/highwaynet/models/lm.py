"""Language models: an RHN language model and an LSTM baseline built the same way, and a
character-aware one that reads each word by its characters.

The first two are ``embedding -> (variational dropout) -> recurrent stack -> (variational dropout)
-> linear decoder`` with optional weight tying (Press & Wolf, 2017; Inan et al., 2017), so that at
equal parameters they differ only in the recurrent cell. :class:`CharAwareLanguageModel` replaces
the embedding by a character-level word encoder with highway layers (Kim et al., 2016).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from typing import Any, cast

import torch
from torch import Tensor, nn

from .._checks import (
    check_choice,
    check_finite,
    check_flag,
    check_ids,
    check_int,
    check_module,
    check_probability,
    check_size,
    check_state,
    check_tensor,
    describe,
)
from ..nn import RHN, CharCNNHighway
from ..nn._signature import settings_repr
from ..nn.char import PRESETS
from ..nn.lstm import lstm_inputs, run_lstm
from ..nn.rhn import variational_dropout
from .transformer import CausalTransformer

__all__ = ["CharAwareLanguageModel", "LSTMLanguageModel", "LanguageModel", "RHNLanguageModel", "count_parameters",
           "generate", "sample_tokens"]

State = Tensor | tuple[Tensor, Tensor]


class _LanguageModel(nn.Module):
    """The shared frame; subclasses set ``self.rnn`` and implement :meth:`_recur`."""

    def __init__(self, vocab_size: int, embed_size: int, hidden_size: int, tie_weights: bool,
                 input_dropout: float, output_dropout: float) -> None:
        super().__init__()
        vocab_size, hidden_size = check_size("vocab_size", vocab_size), check_size("hidden_size", hidden_size)
        embed_size = check_size("embed_size", embed_size)
        check_probability("input_dropout", input_dropout)
        check_probability("output_dropout", output_dropout)
        if check_flag("tie_weights", tie_weights) and embed_size != hidden_size:
            raise ValueError(f"tying weights needs embed_size == hidden_size, got {embed_size} and {hidden_size}")
        self.vocab_size, self.embed_size, self.hidden_size = vocab_size, embed_size, hidden_size
        self.input_dropout, self.output_dropout = input_dropout, output_dropout
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.decoder = nn.Linear(hidden_size, vocab_size)
        if tie_weights:
            self.decoder.weight = self.embedding.weight
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)

    def forward(self, tokens: Tensor, state: State | None = None) -> tuple[Tensor, State]:
        """``tokens`` ``(T, B)`` ids -> logits ``(T, B, vocab_size)`` and the state to pass on."""
        tokens = check_tokens(type(self).__name__, tokens, self.vocab_size, self.embedding.weight)
        x = self.embedding(tokens)
        x = variational_dropout(x, self.input_dropout, self.training)
        out, state = self._recur(x, state)
        out = variational_dropout(out, self.output_dropout, self.training)
        return self.decoder(out), state

    def _recur(self, x: Tensor, state: State | None) -> tuple[Tensor, State]:
        raise NotImplementedError

    def extra_repr(self) -> str:
        return settings_repr(self, tie_weights=self.decoder.weight is self.embedding.weight,
                             embed_size=None if self.embed_size == self.hidden_size else self.embed_size)


def check_tokens(owner: str, tokens: object, vocab_size: int, table: Tensor, *, cpu_ids: bool = False) -> Tensor:
    """A language model's input: ids ``(T, B)`` in its vocabulary, at least one step, on the device of the
    ``table`` they index (:func:`~highwaynet._checks.check_ids`)."""
    tokens = check_ids(owner, "tokens", tokens, vocab_size, table, cpu_ids=cpu_ids)
    if tokens.dim() != 2 or tokens.shape[0] == 0:
        raise ValueError(f"{owner} expects tokens of shape (T, B) with T >= 1, got {tuple(tokens.shape)}")
    return tokens


class RHNLanguageModel(_LanguageModel):
    r"""Embedding, a Recurrent Highway Network, a decoder (Zilly et al., 2017).

    Args:
        vocab_size: tokens in the vocabulary.
        hidden_size: the RHN's state size.
        num_layers: stacked RHN layers. Default: 1 (as the paper).
        depth: recurrence depth, keyword-only. Default: 4.
        embed_size: embedding size; default ``hidden_size`` (needed for tying).
        tie_weights: share the embedding and decoder weights. Default: True.
        input_dropout, state_dropout, output_dropout: variational dropout on the embeddings, on
            the recurrent states, and on the RHN's outputs (and between layers).
        gate_bias: the RHN's initial transform-gate bias. Default: -2.0.

    Shape:
        ``(T, B)`` token ids, state ``(num_layers, B, hidden_size)`` -> logits ``(T, B, vocab_size)``, state.

    Example::

        >>> lm = RHNLanguageModel(65, 256, depth=4)     # characters of Tiny Shakespeare
        >>> logits, state = lm(torch.randint(65, (35, 8)))
        >>> logits, state = lm(torch.randint(65, (35, 8)), state)   # the next window goes on from the last
        >>> logits.shape, state.shape
        (torch.Size([35, 8, 65]), torch.Size([1, 8, 256]))
    """

    def __init__(self, vocab_size: int, hidden_size: int, num_layers: int = 1, *, depth: int = 4,
                 embed_size: int | None = None, tie_weights: bool = True, input_dropout: float = 0.0,
                 state_dropout: float = 0.0, output_dropout: float = 0.0, gate_bias: float = -2.0) -> None:
        super().__init__(vocab_size, hidden_size if embed_size is None else embed_size, hidden_size, tie_weights,
                         input_dropout, output_dropout)
        self.num_layers, self.depth, self.state_dropout, self.gate_bias = num_layers, depth, state_dropout, gate_bias
        # (output_dropout between layers too: none with one layer, where RHN, as nn.LSTM, warns of it)
        between = output_dropout if check_size("num_layers", num_layers) > 1 else 0.0
        self.rnn = RHN(self.embed_size, hidden_size, num_layers, depth=depth, dropout=between,
                       gate_bias=gate_bias, state_dropout=state_dropout)

    def _recur(self, x: Tensor, state: State | None) -> tuple[Tensor, State]:
        return self.rnn(x, state)


class LSTMLanguageModel(_LanguageModel):
    """The LSTM baseline: as :class:`RHNLanguageModel`, with ``nn.LSTM`` (cuDNN on GPU) as the stack.

    ``state_dropout`` has no counterpart in ``nn.LSTM``'s fused kernel and is not offered.

    Shape:
        ``(T, B)`` token ids, state ``(h, c)`` each ``(num_layers, B, hidden_size)`` -> logits
        ``(T, B, vocab_size)``, state.

    Example::

        >>> logits, (h, c) = LSTMLanguageModel(65, 128, num_layers=2)(torch.randint(65, (35, 8)))
        >>> logits.shape, h.shape
        (torch.Size([35, 8, 65]), torch.Size([2, 8, 128]))
    """

    def __init__(self, vocab_size: int, hidden_size: int, num_layers: int = 1, *, embed_size: int | None = None,
                 tie_weights: bool = True, input_dropout: float = 0.0, output_dropout: float = 0.0) -> None:
        super().__init__(vocab_size, hidden_size if embed_size is None else embed_size, hidden_size, tie_weights,
                         input_dropout, output_dropout)
        self.num_layers = check_size("num_layers", num_layers)
        # (the checked sizes, Python ints: nn.LSTM refuses a NumPy integer, which check_size takes)
        self.rnn = nn.LSTM(self.embed_size, self.hidden_size, self.num_layers,
                           dropout=output_dropout if num_layers > 1 else 0.0)

    def _recur(self, x: Tensor, state: State | None) -> tuple[Tensor, State]:
        check_lstm_state(type(self).__name__, state, self.num_layers, self.hidden_size, x)
        return run_lstm(self.rnn, *lstm_inputs(x, cast("tuple[Tensor, Tensor] | None", state)))


def check_lstm_state(owner: str, state: object, num_layers: int, hidden_size: int, x: Tensor) -> None:
    """An ``nn.LSTM``'s ``(h_0, c_0)`` for the input ``x`` ``(T, B, F)`` (None: zeros), checked before
    ``nn.LSTM`` sees it, so that a wrong one is named as the model's argument."""
    if state is None:
        return
    if not isinstance(state, (tuple, list)) or len(state) != 2:
        raise TypeError(f"{owner} expects state to be a pair (h_0, c_0), got {describe(state)}")
    for part, tensor in zip(("h_0", "c_0"), state, strict=True):
        check_state(owner, f"state's {part}", tensor, (num_layers, x.shape[1], hidden_size), x,
                    "(num_layers, B, hidden_size)")


class CharAwareLanguageModel(nn.Module):
    r"""Words read by their characters (Kim, Jernite, Sontag & Rush, 2016): each word's vector from a
    :class:`~highwaynet.nn.CharCNNHighway`, then an LSTM (or an RHN), then a softmax over the words.

    The model takes word ids, as the word-level models do: ``word_chars`` holds each vocabulary
    word's characters (:meth:`CharVocab.encode <highwaynet.nn.CharVocab.encode>` of the vocabulary),
    kept as a buffer, so that it trains on the same batches and task as they do.

    Args:
        word_chars: ``(V, L)`` character ids of the ``V`` words.
        num_chars: the character vocabulary's size.
        hidden_size: the recurrent layer's state size.
        num_layers: stacked recurrent layers. Default: 2 (Kim et al.'s LSTMs).
        rnn: ``"lstm"`` or ``"rhn"``. Default: ``"lstm"``.
        depth: the RHN's recurrence depth (unused by the LSTM). Default: 4.
        encoder: the word encoder's :data:`~highwaynet.nn.char.PRESETS` name. Default: ``"kim-small"``.
        encoder_options: settings of :class:`~highwaynet.nn.CharCNNHighway` that replace the
            preset's (``{"num_highway": 0}``, ``{"highway": False}`` for MLP layers, ...).
        input_dropout, state_dropout, output_dropout: variational dropout on the word vectors, the
            RHN's states (an LSTM model refuses any) and the recurrent outputs (between layers too).

    Shape:
        ``(T, B)`` word ids, a state -> logits ``(T, B, V)``, the state to pass on.

    Example::

        >>> words = ["<unk>", "the", "cat", "sat"]
        >>> chars = CharVocab.from_words(words)
        >>> lm = CharAwareLanguageModel(chars.encode(words), len(chars), 64)
        >>> logits, state = lm(torch.tensor([[1], [2]]))           # "the cat", a batch of one
        >>> logits.shape
        torch.Size([2, 1, 4])
    """

    def __init__(self, word_chars: Tensor, num_chars: int, hidden_size: int, num_layers: int = 2, *,
                 rnn: str = "lstm", depth: int = 4, encoder: str = "kim-small",
                 encoder_options: dict[str, Any] | None = None, input_dropout: float = 0.0,
                 state_dropout: float = 0.0, output_dropout: float = 0.0) -> None:
        super().__init__()
        check_choice("rnn", rnn, ("lstm", "rhn"))
        num_chars = check_size("num_chars", num_chars)
        word_chars = check_ids(type(self).__name__, "word_chars", word_chars, num_chars)
        if word_chars.dim() != 2 or 0 in word_chars.shape:
            raise ValueError(f"word_chars must be (V, L) character ids, V and L at least 1, got shape "
                             f"{tuple(word_chars.shape)}")
        hidden_size, num_layers = check_size("hidden_size", hidden_size), check_size("num_layers", num_layers)
        check_choice("encoder", encoder, PRESETS)
        if encoder_options is not None and not isinstance(encoder_options, dict):
            raise TypeError(f"encoder_options must be a dict of CharCNNHighway's settings, got "
                            f"{describe(encoder_options)}")
        for name, p in (("input_dropout", input_dropout), ("state_dropout", state_dropout),
                        ("output_dropout", output_dropout)):
            check_probability(name, p)
        depth = check_size("depth", depth)
        if rnn == "lstm" and state_dropout:
            raise ValueError(f"state_dropout is the RHN's (an LSTM model has none), got {state_dropout} with "
                             f"rnn='lstm': pass rnn='rhn', or state_dropout=0")
        self.vocab_size, self.num_chars, self.hidden_size, self.num_layers = len(word_chars), num_chars, \
            hidden_size, num_layers
        self.rnn_kind, self.depth, self.encoder_name = rnn, depth, encoder
        self.encoder_options = dict(encoder_options or {})
        self.input_dropout, self.state_dropout, self.output_dropout = input_dropout, state_dropout, output_dropout
        self.register_buffer("word_chars", word_chars.long().clone())
        self.encoder = CharCNNHighway.preset(encoder, num_chars, **self.encoder_options)
        width = self.encoder.output_size
        self.rnn: nn.Module
        if rnn == "lstm":
            self.rnn = nn.LSTM(width, hidden_size, num_layers, dropout=output_dropout if num_layers > 1 else 0.0)
        else:
            self.rnn = RHN(width, hidden_size, num_layers, depth=depth,
                           dropout=output_dropout if num_layers > 1 else 0.0, state_dropout=state_dropout)
        self.decoder = nn.Linear(hidden_size, self.vocab_size)

    def forward(self, tokens: Tensor, state: State | None = None) -> tuple[Tensor, State]:
        """``tokens`` ``(T, B)`` word ids -> logits ``(T, B, V)`` and the state to pass on."""
        word_chars = cast(Tensor, self.word_chars)  # (a buffer: typed as any attribute of a Module)
        tokens = check_tokens(type(self).__name__, tokens, self.vocab_size, word_chars, cpu_ids=True)
        x = self.encoder(word_chars[tokens])
        x = variational_dropout(x, self.input_dropout, self.training)
        if self.rnn_kind == "lstm":
            check_lstm_state(type(self).__name__, state, self.num_layers, self.hidden_size, x)
            out, state = run_lstm(cast(nn.LSTM, self.rnn), *lstm_inputs(x, cast("tuple[Tensor, Tensor] | None", state)))
        else:
            out, state = self.rnn(x, state)
        out = variational_dropout(out, self.output_dropout, self.training)
        return self.decoder(out), state

    def extra_repr(self) -> str:
        return settings_repr(self, rnn=self.rnn_kind, encoder=self.encoder_name,
                             encoder_options=self.encoder_options or None)


#: Any of the package's language models: ``(T, B)`` ids and a state in, logits and a state out.
LanguageModel = RHNLanguageModel | LSTMLanguageModel | CharAwareLanguageModel | CausalTransformer


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters, each shared tensor (tied weights) counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def generate(model: nn.Module, prompt: Tensor, length: int, temperature: float = 1.0,
             generator: torch.Generator | None = None) -> Tensor:
    """Sample ``length`` tokens after ``prompt`` (1-D ids); returns only the new ids.

    ``temperature`` < 1 sharpens the distribution, > 1 flattens it; 0 takes the likeliest token
    each step (greedy decoding, where ``generator`` plays no part). :func:`sample_tokens` gives the
    same tokens one at a time, as they are drawn.
    """
    return torch.tensor(list(sample_tokens(model, prompt, length, temperature, generator)), dtype=torch.long)


def sample_tokens(model: nn.Module, prompt: Tensor, length: int, temperature: float = 1.0,
                  generator: torch.Generator | None = None) -> Iterator[int]:
    """The ids :func:`generate` returns, yielded one by one as they are drawn (for text shown as it comes).
    The arguments are checked at the call, before the first id is asked for."""
    check_module("model", model)
    check_tensor("prompt", prompt, kind="integer")
    if prompt.dim() > 1:
        raise ValueError(f"prompt must be 1-D token ids (T,), got shape {tuple(prompt.shape)} (one prompt at a time: "
                         f"for a batch of one, pass prompt.flatten())")
    if prompt.numel() == 0:
        raise ValueError("the prompt is empty (or all of it is outside the vocabulary)")
    length = check_int("length", length, minimum=0)
    if isinstance(temperature, numbers.Real) and not 0 <= temperature < float("inf"):
        raise ValueError(f"temperature must be 0 (greedy) or positive, and finite, got {temperature}")
    temperature = check_finite("temperature", temperature)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {describe(generator)}")
    if generator is not None and generator.device.type != "cpu":
        raise ValueError(f"generator must be a CPU torch.Generator (the tokens are drawn on the CPU), got one on "
                         f"{generator.device}")
    weight = next(iter(model.parameters()), None)
    if weight is None:
        raise ValueError("model must be a language model with parameters (their device is where it runs), "
                         f"got {type(model).__name__} without any")
    return _sample_tokens(model, prompt, length, temperature, generator, weight.device)


def _sample_tokens(model: nn.Module, prompt: Tensor, length: int, temperature: float,
                   generator: torch.Generator | None, device: torch.device) -> Iterator[int]:
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits, state = model(prompt.to(device).view(-1, 1))
        for _ in range(length):
            if temperature == 0:
                token = logits[-1, 0].argmax().view(1).cpu()
            else:
                # Shifted before the division, in float64: a temperature so small that the logits over
                # it overflow would give inf - inf in softmax's own shift (NaN probabilities), and one
                # below float32's range would be 0 in float32. On the CPU, where the draw is made (MPS
                # has no float64).
                last = logits[-1, 0].to("cpu", torch.float64)
                probs = torch.softmax((last - last.max()) / temperature, dim=-1)
                token = torch.multinomial(probs, 1, generator=generator)
            yield int(token)
            with torch.no_grad():
                logits, state = model(token.to(device).view(1, 1), state)
    finally:
        model.train(was_training)
