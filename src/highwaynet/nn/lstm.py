"""Highway (Bi)LSTM: LSTM layers with a highway gate around each (the HBiLSTM of sentence classification).

One block computes, on a sequence ``x`` of width ``in``,

.. math::
    H = \\mathrm{BiLSTM}(x), \\qquad T = \\sigma(W_T x + b_T), \\qquad y = T \\odot H + (1 - T) \\odot x'

where ``H`` has width ``out`` (``2 · hidden_size`` when bidirectional), the gate ``T`` is computed
from the block's input, and ``x'`` is the input brought to width ``out`` by a learned projection
or by zero padding (:mod:`highwaynet.nn.resize`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import cast, overload

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from .._checks import (
    autocast_dtype,
    check_choice,
    check_factory,
    check_flag,
    check_gate_bias,
    check_input,
    check_lengths,
    check_probability,
    check_size,
    check_state,
    describe,
    warn_unused_dropout,
)
from ..kernels.gating import onnx_exporting
from ._signature import settings_repr
from .gate import TransformGate
from .resize import RESIZE_KINDS, make_resize
from .sequence import batch_sequence, initial_state, pack_like, unbatch_sequence, unpack_sequence

__all__ = ["HighwayLSTM", "HighwayLSTMBlock"]

LSTMState = tuple[Tensor, Tensor]


def exporting() -> bool:
    """Whether ``torch.export`` or ONNX export is tracing the caller."""
    is_exporting = getattr(torch.compiler, "is_exporting", None)  # (torch >= 2.5)
    return onnx_exporting() or (is_exporting is not None and is_exporting())


def unpacked_lstm(lstm: nn.LSTM, x: Tensor, lengths: Tensor, mask: Tensor,
                  state: LSTMState | None) -> tuple[Tensor, LSTMState]:
    """A one-layer, batch-first ``nn.LSTM`` over a padded batch without packing: what the block runs
    while being exported, where a packed sequence's shapes depend on the lengths' values.

    ``x`` ``(B, T, F)`` with zeros past each length, ``mask`` ``(B, T, 1)`` the steps within it. Each
    direction runs over the whole padded batch (``torch.lstm``, with that direction's weights), the
    backward one over each sequence reversed within its length, so that every valid step's output is
    ``nn.LSTM``'s. The final ``h`` is the output at each sequence's last step; the final ``c``, which
    no output shows, is the cell's linear recurrence ``c_t = f_t c_{t-1} + i_t g_t`` summed in closed
    form from the gates, which the outputs determine (``c_L = (∏ f) c_0 + Σ_k (∏_{j>k} f_j) i_k g_k``,
    the steps past the length taken as ``f = 1``, ``i g = 0``): no loop over steps, so that the
    exported graph stays the size of the LSTM's own. (``nn.LSTM``'s export fixes the sequence length:
    the program takes batches padded to the length it was traced with.)
    """
    batch, steps, _ = x.shape
    hidden, directions = lstm.hidden_size, 2 if lstm.bidirectional else 1
    valid = mask[..., 0]
    time = torch.arange(steps, device=x.device)[None, :]
    reverse = torch.where(valid, lengths.to(x.device)[:, None] - 1 - time, time)  # (B, T), padding in place
    last = (lengths.to(x.device) - 1).clamp(min=0).view(batch, 1, 1).expand(batch, 1, hidden)
    h0, c0 = state if state is not None else (x.new_zeros(directions, batch, hidden),) * 2
    outputs, finals_h, finals_c = [], [], []
    for d in range(directions):
        suffix = "_reverse" if d else ""
        weights = [getattr(lstm, f"{name}_l0{suffix}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        seq = x if d == 0 else x.gather(1, reverse.unsqueeze(-1).expand_as(x))
        out = torch.lstm(seq, (h0[d:d + 1], c0[d:d + 1]), weights, True, 1, 0.0, lstm.training, False, True)[0]
        finals_h.append(out.gather(1, last)[:, 0])
        finals_c.append(_final_cell(seq, out, h0[d], c0[d], weights, mask))
        outputs.append(out if d == 0 else out.gather(1, reverse.unsqueeze(-1).expand_as(out)))
    return torch.cat(outputs, dim=-1) * mask, (torch.stack(finals_h), torch.stack(finals_c))


def _final_cell(seq: Tensor, out: Tensor, h0: Tensor, c0: Tensor, weights: list[Tensor], mask: Tensor) -> Tensor:
    """The cell state after each sequence's last step, from its inputs and outputs (see :func:`unpacked_lstm`)."""
    w_ih, w_hh, b_ih, b_hh = weights
    h_prev = torch.cat([h0.unsqueeze(1), out[:, :-1]], dim=1)
    i, f, g, _ = (seq @ w_ih.t() + b_ih + h_prev @ w_hh.t() + b_hh).chunk(4, dim=-1)
    f = torch.where(mask, torch.sigmoid(f), 1.0)
    u = torch.where(mask, torch.sigmoid(i) * torch.tanh(g), 0.0)
    # ∏_{j >= k} f_j and ∏_{j > k} f_j, as sums of logarithms (ONNX has a cumulative sum, no product)
    log_f = torch.log(f)
    after_k = log_f.sum(1, keepdim=True) - log_f.cumsum(1)
    from_k, after_k = torch.exp(after_k + log_f), torch.exp(after_k)
    return from_k[:, 0] * c0 + (after_k * u).sum(1)


def lstm_inputs(x: Tensor, state: LSTMState | None) -> tuple[Tensor, LSTMState | None]:
    """An ``nn.LSTM``'s input and initial state, under CPU autocast in its dtype.

    CPU autocast casts oneDNN's LSTM, which ``nn.LSTM`` runs a float32 input with, to bfloat16 or float16
    whatever the processor, and oneDNN has no such LSTM on a processor without AVX-512
    (``torch.ops.mkldnn._is_mkldnn_bf16_supported()`` is False): there an ``nn.LSTM`` under CPU autocast
    fails inside torch (2.13), ``could not create a primitive descriptor for the LSTM forward propagation
    primitive``. An input already in the autocast dtype runs where it can: oneDNN's LSTM where the
    processor has it (as a float32 input did), else torch's own, whose products autocast casts the weights
    for. The state goes with it, so that the LSTM runs in that dtype throughout and returns its output and
    final state in it. (float64, which autocast leaves alone, is left alone.)
    """
    dtype = autocast_dtype("cpu") if x.device.type == "cpu" else None
    if dtype is None:
        return x, state

    def cast(t: Tensor) -> Tensor:
        return t if t.dtype == torch.float64 else t.to(dtype)
    return cast(x), None if state is None else (cast(state[0]), cast(state[1]))


def _onednn_has_bfloat16() -> bool:
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # (a build without oneDNN: nothing of it to avoid)
        return True


#: Whether oneDNN has a bfloat16 LSTM on this processor (AVX-512 and after). Where it has none, torch
#: 2.3 runs a bfloat16 ``nn.LSTM`` on the CPU through it all the same and fails ("could not create a
#: primitive descriptor for an LSTM forward propagation primitive"); later releases take torch's own LSTM
#: there, as :func:`run_lstm` then has every release do.
ONEDNN_BFLOAT16 = _onednn_has_bfloat16()


@overload
def run_lstm(lstm: nn.LSTM, x: Tensor, state: LSTMState | None) -> tuple[Tensor, LSTMState]: ...


@overload
def run_lstm(lstm: nn.LSTM, x: PackedSequence, state: LSTMState | None) -> tuple[PackedSequence, LSTMState]: ...


def run_lstm(lstm: nn.LSTM, x: Tensor | PackedSequence,
             state: LSTMState | None) -> tuple[Tensor | PackedSequence, LSTMState]:
    """``lstm(x, state)``, for an input already in its dtype (:func:`lstm_inputs`); on a processor whose
    oneDNN has no bfloat16 LSTM, a bfloat16 one runs on torch's own LSTM (see :data:`ONEDNN_BFLOAT16`)."""
    data = x.data if isinstance(x, PackedSequence) else x
    if ONEDNN_BFLOAT16 or data.dtype != torch.bfloat16 or data.device.type != "cpu" or torch.compiler.is_compiling():
        return lstm(x, state)  # type: ignore[no-any-return]
    with _onednn_off():
        return lstm(x, state)  # type: ignore[no-any-return]


_onednn_switch = threading.Lock()
#: How many calls of :func:`run_lstm` run with oneDNN off now (in any thread), and whether it was on before
#: the first of them switched it off.
_onednn_off_calls = 0
_onednn_was_on = True


@contextmanager
def _onednn_off() -> Iterator[None]:
    """oneDNN off (``torch.backends.mkldnn.enabled``, one switch for the whole process) until the last of the
    calls under way in any thread ends, then as it was before the first: a call that switched it back on at
    its own end while another thread's LSTM had yet to start ran that one through oneDNN, where it fails."""
    global _onednn_off_calls, _onednn_was_on
    with _onednn_switch:
        if _onednn_off_calls == 0:
            _onednn_was_on = bool(torch.backends.mkldnn.enabled)
            # (the switch alone: ``torch.backends.mkldnn.flags`` sets oneDNN's TF32 too, which torch 2.13 warns
            # of at each call)
            setattr(torch.backends.mkldnn, "enabled", False)  # noqa: B010 (typed as the property object it is)
        _onednn_off_calls += 1
    try:
        yield
    finally:
        with _onednn_switch:
            _onednn_off_calls -= 1
            if _onednn_off_calls == 0:
                setattr(torch.backends.mkldnn, "enabled", _onednn_was_on)  # noqa: B010


def _weight(block: HighwayLSTMBlock) -> Tensor | None:
    """The block's LSTM's first weight, whose dtype and device an input must have; None while
    compiled, where touching an ``nn.LSTM`` at all makes Dynamo give up on the whole frame (nn.LSTM
    checks the dtypes itself then)."""
    return None if torch.compiler.is_compiling() else cast(Tensor, block.lstm.weight_ih_l0)


class HighwayLSTMBlock(nn.Module):
    r"""One highway-gated (Bi)LSTM layer on padded sequences ``(B, T, in)`` with ``lengths``.

    Args:
        input_size: width of the input ``in``.
        hidden_size: LSTM state size per direction.
        bidirectional: a BiLSTM (output width ``2 · hidden_size``). Default: True.
        resize: how the carried input reaches the output width when they differ:
            ``"projection"`` (learned, no bias) or ``"zeropad"``. Default: ``"projection"``.
        gate_bias: initial bias of ``T``. Default: -2.0.
        highway: False gives a plain (Bi)LSTM layer (``y = H``), for comparisons. Default: True.
        dropout: dropout on ``H`` before the gate (the carried input is never dropped); on the output
            ``y = H`` of a plain layer. Default: 0.
        device, dtype: where and in what type the parameters are made, as for ``nn.LSTM``.

    Attributes:
        lstm: the ``nn.LSTM`` (one layer, batch first).
        transform: ``nn.Linear(in, out)`` computing the gate's logits from the input.
        resize: ``nn.Identity``, :class:`~highwaynet.nn.Projection` or :class:`~highwaynet.nn.ZeroPad`.
        gate: the :class:`TransformGate` (recorded and lesioned like every highway layer).

    Shape:
        ``x`` ``(B, T, in)`` padded, ``lengths`` ``(B,)`` (None: every sequence ``T`` long), ``state``
        ``(h_0, c_0)`` each ``(directions, B, hidden_size)`` or None -> ``(B, T, out)`` (zero past each
        length, ``out = directions · hidden_size``) and ``(h_n, c_n)``.

    Example::

        >>> block = HighwayLSTMBlock(300, 150)          # BiLSTM: 2 · 150 wide out
        >>> y, (h, c) = block(torch.randn(4, 12, 300), lengths=torch.tensor([12, 9, 5, 1]))
        >>> y.shape, h.shape
        (torch.Size([4, 12, 300]), torch.Size([2, 4, 150]))
    """

    def __init__(self, input_size: int, hidden_size: int, *, bidirectional: bool = True, resize: str = "projection",
                 gate_bias: float = -2.0, highway: bool = True, dropout: float = 0.0,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.input_size, self.hidden_size = check_size("input_size", input_size), check_size("hidden_size", hidden_size)
        self.bidirectional = check_flag("bidirectional", bidirectional)
        self.resize_kind = check_choice("resize", resize, RESIZE_KINDS)
        self.dropout_p = check_probability("dropout", dropout)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.output_size = self.hidden_size * (2 if bidirectional else 1)
        self.highway = check_flag("highway", highway)
        self.gate_bias = check_gate_bias(gate_bias, dtype)
        factory = check_factory(device, dtype)
        # (the checked sizes, Python ints: nn.LSTM refuses a NumPy integer, which check_size takes)
        self.lstm = nn.LSTM(self.input_size, self.hidden_size, batch_first=True, bidirectional=self.bidirectional,
                            **factory)
        if highway:
            self.transform = nn.Linear(self.input_size, self.output_size, **factory)
            # Only the bias here, not reset_parameters(): drawing the weights again would change
            # the initial weights every seed has given so far.
            nn.init.constant_(self.transform.bias, gate_bias)
            self.resize = make_resize(resize, self.input_size, self.output_size, **factory)
            self.gate = TransformGate()

    def reset_parameters(self) -> None:
        """The LSTM's and the projections' own initialisation; the gate's bias at ``gate_bias`` (what
        construction does, for a block made on the meta device and then ``to_empty``)."""
        self.lstm.reset_parameters()
        if self.highway:
            self.transform.reset_parameters()
            nn.init.constant_(self.transform.bias, self.gate_bias)
            if isinstance(self.resize, nn.Linear):
                self.resize.reset_parameters()

    def flatten_parameters(self) -> None:
        """``nn.LSTM.flatten_parameters`` of the block's :attr:`lstm`: on a GPU with cuDNN, lays its
        weights out again as the one contiguous buffer cuDNN runs from (after ``DataParallel``'s
        replication, or a ``.to()`` that moved them apart); a no-op elsewhere, as ``nn.LSTM``'s."""
        self.lstm.flatten_parameters()

    def forward(self, x: Tensor, lengths: Tensor | None = None,
                state: LSTMState | None = None) -> tuple[Tensor, LSTMState]:
        """``x`` ``(B, T, in)`` padded, ``lengths`` ``(B,)`` (None: every sequence ``T`` long) ->
        ``(B, T, out)`` (zero past each length), state."""
        check_input("HighwayLSTMBlock", "x", x, _weight(self))
        if x.dim() != 3 or x.shape[-1] != self.input_size or x.shape[1] == 0:
            raise ValueError(f"HighwayLSTMBlock expects x of shape (B, T, {self.input_size}) with T >= 1, "
                             f"got {tuple(x.shape)}")
        if state is not None:
            if not isinstance(state, (tuple, list)) or len(state) != 2:
                raise TypeError(f"HighwayLSTMBlock expects state to be a pair (h_0, c_0), got {describe(state)}")
            shape = (self.output_size // self.hidden_size, x.shape[0], self.hidden_size)
            state = cast(LSTMState, tuple(check_state("HighwayLSTMBlock", f"state's {part}", s, shape, x)
                                          for part, s in zip(("h_0", "c_0"), state, strict=True)))
        lengths = check_lengths("HighwayLSTMBlock", lengths, x.shape[0], x.shape[1], shortest=1,
                                device=x.device)
        if lengths is not None and x.shape[0] == 0:
            lengths = None  # (an empty batch: nothing padded, and nothing to pack)
        # (the gate reads x as it came; the LSTM its input in the autocast dtype, under CPU autocast: lstm_inputs)
        if lengths is None:
            # No packing when nothing is padded: faster, and no shape that depends on data (so that
            # torch.export can trace the block).
            h, state = run_lstm(self.lstm, *lstm_inputs(x, state))
            # (a view that changes nothing, but for torch 2.10 to 2.12's export, which gives nn.LSTM's
            # final state a shape of four dimensions, (D, 1, B, H), that its ONNX export then fails on)
            shape = (self.lstm.num_layers * (2 if self.lstm.bidirectional else 1), x.shape[0], self.lstm.hidden_size)
            state = (state[0].view(shape), state[1].view(shape))
            mask = None
        else:
            mask = (torch.arange(x.shape[1], device=x.device)[None, :] < lengths.to(x.device)[:, None]).unsqueeze(-1)
            # The gate reads every step of x: padding of any value, NaN included, becomes zeros first
            # (masking a non-finite result afterwards, times 0, would leave NaN in outputs and gradients).
            x = torch.where(mask, x, 0.0)
            lstm_x, state = lstm_inputs(x, state)
            if exporting() or x.device.type == "meta":  # (a meta tensor's lengths have no values to pack by)
                h, state = unpacked_lstm(self.lstm, lstm_x, lengths, mask, state)
            else:
                packed = pack_padded_sequence(lstm_x, lengths.cpu(), batch_first=True, enforce_sorted=False)
                packed_h, state = run_lstm(self.lstm, packed, state)
                h, _ = pad_packed_sequence(packed_h, batch_first=True, total_length=x.shape[1])
        if not self.highway:
            return self.dropout(h), state
        y = self.gate(self.dropout(h), self.transform(x), self.resize(x))
        return (y if mask is None else y * mask), state

    def extra_repr(self) -> str:
        return settings_repr(self, resize=self.resize_kind, dropout=self.dropout_p)


class HighwayLSTM(nn.Module):
    r"""A stack of highway-gated (Bi)LSTM blocks with an ``nn.LSTM``-like API.

    Sizes are positional and the settings keyword-only, in ``nn.LSTM``'s order where they are its own.

    Args:
        input_size: features of the input.
        hidden_size: LSTM state size per direction, in every block.
        num_layers: blocks in the stack. Default: 1.
        batch_first: ``(B, T, F)`` instead of ``(T, B, F)``. Default: False.
        dropout: for every block but the last, as ``nn.LSTM``'s: on the block's output in the plain
            stack; in the highway stack on the block's transform ``H`` only, so that the carried
            input is never dropped (dropping it at every block removes the identity path that lets
            a deep stack train: measured, a 10-block HBiLSTM with 0.5 dropout on block outputs
            stayed at chance on SST-2). With one block it drops nothing, and warns so, as ``nn.LSTM``'s.
            Default: 0.
        bidirectional: BiLSTM blocks. Default: True (the highway BiLSTM of the sentence papers;
            ``nn.LSTM``'s default is False).
        resize: ``"projection"`` or ``"zeropad"``: how the first block's input reaches the
            stack's width. Default: ``"projection"``.
        gate_bias: initial transform-gate bias. Default: -2.0.
        highway: False gives a plain (Bi)LSTM stack of the same depth and width. Default: True.
        device, dtype: where and in what type the parameters are made, as for ``nn.LSTM``.

    Inputs: ``input, state`` (and keyword ``lengths``)
        - **input**: ``(T, B, input_size)`` (or batch first), one unbatched sequence
          ``(T, input_size)``, or a ``PackedSequence``.
        - **state**: ``(h_0, c_0)``, each ``(num_layers · directions, B, hidden_size)`` (no ``B`` for an
          unbatched input); zeros when None. By keyword also as ``hx``, ``nn.LSTM``'s name for it (a
          ``TypeError`` if both are given).
        - **lengths**: ``(B,)`` valid lengths of a padded batch (default: all full length).

    Outputs: ``output, (h_n, c_n)`` as ``nn.LSTM``: ``output`` ``(T, B, directions · hidden_size)``
    (zero past each sequence's length), or batch first, unbatched or packed like the input.

    Exported (``torch.export``), the stack keeps the sequence length it was traced with, as
    ``nn.LSTM`` does, and serves any batch size; with ``lengths`` too (needs torch ≥ 2.5, whose
    ``torch.compiler.is_exporting`` lets the blocks run the LSTM over the padded batch rather than
    pack it), and compiled and exported code checks the lengths itself from torch 2.10. ONNX export
    (``torch.onnx.export(..., dynamo=True)``) needs torch ≥ 2.10.

    Under CPU autocast each block's ``nn.LSTM`` runs in the autocast dtype, its input and state cast to it
    (an ``nn.LSTM`` given float32 there fails inside oneDNN on a processor without AVX-512), and the output
    and final state come in that dtype.

    Example::

        >>> stack = HighwayLSTM(300, 150, num_layers=4, batch_first=True)
        >>> out, (h, c) = stack(torch.randn(8, 20, 300), lengths=torch.full((8,), 20))
        >>> out.shape, h.shape
        (torch.Size([8, 20, 300]), torch.Size([8, 8, 150]))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, *, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = True, resize: str = "projection",
                 gate_bias: float = -2.0, highway: bool = True, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.input_size, self.hidden_size = check_size("input_size", input_size), check_size("hidden_size", hidden_size)
        self.num_layers = check_size("num_layers", num_layers)
        self.directions = 2 if bidirectional else 1
        self.batch_first = check_flag("batch_first", batch_first)
        self.bidirectional, self.dropout_p = check_flag("bidirectional", bidirectional), check_probability(
            "dropout", dropout)
        warn_unused_dropout(self.dropout_p, self.num_layers)
        self.resize_kind, self.gate_bias, self.highway = resize, gate_bias, check_flag("highway", highway)
        width = hidden_size * self.directions
        self.blocks = nn.ModuleList(
            HighwayLSTMBlock(input_size if i == 0 else width, hidden_size, bidirectional=bidirectional, resize=resize,
                             gate_bias=gate_bias, highway=highway,
                             dropout=dropout if highway and i < num_layers - 1 else 0.0, device=device, dtype=dtype)
            for i in range(num_layers))
        self.dropout = nn.Dropout(dropout) if dropout > 0 and not highway else nn.Identity()

    def reset_parameters(self) -> None:
        for block in self._blocks():
            block.reset_parameters()

    def flatten_parameters(self) -> None:
        """``nn.LSTM.flatten_parameters`` of every block's ``nn.LSTM``, so that code written for an
        ``nn.LSTM`` (which calls it after ``DataParallel``'s replication, or at each forward) runs
        with the stack in its place: on a GPU with cuDNN each LSTM's weights are laid out again as the
        one contiguous buffer cuDNN runs from; elsewhere it does nothing, as ``nn.LSTM``'s."""
        for block in self._blocks():
            block.flatten_parameters()

    def _blocks(self) -> Iterable[HighwayLSTMBlock]:
        return cast("Iterable[HighwayLSTMBlock]", self.blocks)  # (a ModuleList's items are typed Module)

    # (the overloads tell a type checker what nn.LSTM's say: a PackedSequence in, a PackedSequence out)
    @overload
    def forward(self, input: Tensor, state: LSTMState | None = None, *, hx: LSTMState | None = None,
                lengths: Tensor | None = None) -> tuple[Tensor, LSTMState]: ...

    @overload
    def forward(self, input: PackedSequence, state: LSTMState | None = None, *, hx: LSTMState | None = None,
                lengths: None = None) -> tuple[PackedSequence, LSTMState]: ...

    def forward(self, input: Tensor | PackedSequence, state: LSTMState | None = None, *, hx: LSTMState | None = None,
                lengths: Tensor | None = None) -> tuple[Tensor | PackedSequence, LSTMState]:
        state = initial_state("HighwayLSTM", state, hx)
        input, lengths, packed = unpack_sequence(input, lengths, self.batch_first)
        x, state, unbatched = batch_sequence("HighwayLSTM", input, self.input_size, self.batch_first,
                                             time_major=False, state=state, lengths=lengths)
        check_input("HighwayLSTM", "input", x, _weight(cast(HighwayLSTMBlock, self.blocks[0])))
        expected = (self.num_layers * self.directions, x.shape[0], self.hidden_size)
        if state is not None:
            if not isinstance(state, (tuple, list)):
                raise TypeError(f"HighwayLSTM expects state to be a pair (h_0, c_0), got {describe(state)}")
            if tuple(state[0].shape) != expected or tuple(state[1].shape) != expected:
                raise ValueError(f"HighwayLSTM expects (h_0, c_0) of shape {expected} each, "
                                 f"got {tuple(state[0].shape)} and {tuple(state[1].shape)}")
            for part, s in zip(("h_0", "c_0"), state, strict=True):
                check_state("HighwayLSTM", f"state's {part}", s, expected, x)
        # At least one step each: nn.LSTM reads a padded batch packed, and a packed sequence cannot be empty.
        lengths = check_lengths("HighwayLSTM", lengths, x.shape[0], x.shape[1], shortest=1,
                                device=x.device)
        hs, cs = [], []
        for i, block in enumerate(self.blocks):
            block_state = None if state is None else tuple(
                s[i * self.directions:(i + 1) * self.directions].contiguous() for s in state)
            x, (h, c) = block(x, lengths, block_state)
            if i < self.num_layers - 1:
                x = self.dropout(x)
            hs.append(h)
            cs.append(c)
        final = (torch.cat(hs), torch.cat(cs))
        if packed is not None and lengths is not None:
            return pack_like(x, lengths, packed, batch_first=True), final
        return unbatch_sequence(x, final, unbatched, self.batch_first, time_major=False)

    def extra_repr(self) -> str:
        return settings_repr(self, resize=self.resize_kind, dropout=self.dropout_p)
