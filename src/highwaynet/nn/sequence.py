"""The sequence inputs of the recurrent layers, checked and laid out as ``nn.LSTM`` takes them.

:class:`~highwaynet.nn.RHN` and :class:`~highwaynet.nn.HighwayLSTM` take what ``nn.LSTM`` takes: a
batch ``(T, B, F)`` (``(B, T, F)`` when ``batch_first``), one unbatched sequence ``(T, F)`` with a
state that has no batch dimension either, or a ``PackedSequence``. This module turns the first two
into the one layout a layer computes in, and says what is wrong, in the caller's own terms (the
shape it passed, not a transposed one), when an input is not one of them.
"""

from __future__ import annotations

from typing import TypeVar, cast

from torch import Tensor
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from .._checks import TRACED_ASSERTS_HOLD, check_lengths, check_tensor, describe

__all__ = ["TRACED_ASSERTS_HOLD", "batch_sequence", "check_lengths", "initial_state", "pack_like",
           "unbatch_sequence", "unpack_sequence"]

# An RHN's state, an LSTM's (h, c), or none given: each function returns the kind it was given.
State = TypeVar("State", bound="Tensor | tuple[Tensor, ...] | None")
FinalState = TypeVar("FinalState", bound="Tensor | tuple[Tensor, ...]")


def initial_state(name: str, state: State, hx: State) -> State:
    """The initial state a recurrent layer was given, as ``state`` or as ``hx``: ``nn.LSTM``'s,
    ``nn.GRU``'s and ``nn.RNNCell``'s name for it, which code written for them passes by keyword."""
    if hx is None:
        return state
    if state is not None:
        raise TypeError(f"{name} got the initial state twice, as state and as hx (nn.LSTM's name for it): "
                        f"pass one")
    return hx


def unpack_sequence(input: Tensor | PackedSequence, lengths: Tensor | None,
                    batch_first: bool) -> tuple[Tensor, Tensor | None, PackedSequence | None]:
    """A ``PackedSequence`` as its padded batch, its lengths and itself (for :func:`pack_like`); any
    other input as given, with ``lengths``, and None."""
    if not isinstance(input, PackedSequence):
        return input, lengths, None
    if lengths is not None:
        raise ValueError("pass lengths or a PackedSequence, not both")
    padded, lengths = pad_packed_sequence(input, batch_first=batch_first)
    return padded, lengths, input


def pack_like(output: Tensor, lengths: Tensor, packed: PackedSequence, batch_first: bool) -> PackedSequence:
    """The padded ``output`` (in the original batch order) packed as ``packed`` is: its ``batch_sizes``,
    ``sorted_indices`` and ``unsorted_indices``, so that row ``i`` of the output's ``data`` is the step
    and sequence of row ``i`` of the input's, as ``nn.LSTM`` gives. (Packing anew would sort the
    sequences again, and put those of equal length in another order than the input's.)"""
    batch_dim = 0 if batch_first else 1
    if packed.sorted_indices is not None:
        indices = packed.sorted_indices.to(output.device)
        output, lengths = output.index_select(batch_dim, indices), lengths[packed.sorted_indices.to(lengths.device)]
    data = pack_padded_sequence(output, lengths.cpu(), batch_first=batch_first).data
    return PackedSequence(data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices)


def batch_sequence(name: str, input: Tensor, input_size: int, batch_first: bool, time_major: bool,
                   state: State, lengths: Tensor | None = None, *, pair: bool = True) -> tuple[Tensor, State, bool]:
    """``input`` as a batch in the layer's layout (``(T, B, F)`` if ``time_major`` else ``(B, T, F)``),
    ``state`` with a batch dimension of one added where the input had none (each tensor's
    dimension 1, as ``nn.LSTM``), and whether the input was unbatched. ``pair``: the layer's state is a
    pair ``(h_0, c_0)``, else one tensor."""
    if not isinstance(input, Tensor):
        raise TypeError(f"{name} expects input to be a torch.Tensor or PackedSequence, got {describe(input)}")
    given: Tensor | tuple[Tensor, ...] | None = state  # (State's bound, which isinstance narrows)
    if isinstance(given, (tuple, list)):
        if not pair:  # (a layer whose state is one tensor: a tuple of one is no pair short of a tensor)
            raise TypeError(f"{name} expects state to be a torch.Tensor (num_layers * num_directions, B, "
                            f"hidden_size), got a {type(given).__name__} of {len(given)}")
        if len(given) != 2:
            raise ValueError(f"{name} expects state to be a pair (h_0, c_0), got {len(given)} tensors")
        for part, tensor in zip(("h_0", "c_0"), given, strict=True):
            check_tensor(f"state's {part}", tensor, owner=name)
    elif given is not None:
        check_tensor("state", given, owner=name)
    if input.dim() not in (2, 3) or input.shape[-1] != input_size:
        layout = "(B, T, input_size)" if batch_first else "(T, B, input_size)"
        raise ValueError(f"{name} expects input of shape {layout}, or (T, input_size) for one unbatched "
                         f"sequence, with input_size={input_size}; got {tuple(input.shape)}")
    unbatched = input.dim() == 2
    steps = input.shape[0 if unbatched or not batch_first else 1]
    if steps == 0:
        raise ValueError(f"{name} expects at least one time step, got input of shape {tuple(input.shape)}")
    if unbatched:
        if lengths is not None:
            raise ValueError(f"lengths is for a padded batch; an unbatched input of shape {tuple(input.shape)} "
                             "is one sequence of its own length")
        tensors = (given,) if isinstance(given, Tensor) else (given or ())
        if any(s.dim() != 2 for s in tensors):
            raise ValueError(f"for an unbatched input, {name} expects a state without a batch dimension, "
                             f"(num_layers * directions, hidden_size); got {[tuple(s.shape) for s in tensors]}")
        if given is not None:
            batched = given.unsqueeze(1) if isinstance(given, Tensor) else tuple(s.unsqueeze(1) for s in given)
            state = cast(State, batched)
        return input.unsqueeze(1 if time_major else 0), state, True
    return (input if batch_first != time_major else input.transpose(0, 1)), state, False


def unbatch_sequence(output: Tensor, state: FinalState, unbatched: bool, batch_first: bool,
                     time_major: bool) -> tuple[Tensor, FinalState]:
    """The inverse of :func:`batch_sequence`: ``output`` in the caller's layout, and ``state`` without
    the batch dimension that an unbatched input was given."""
    if unbatched:
        output = output.squeeze(1 if time_major else 0)
        final: Tensor | tuple[Tensor, ...] = state
        state = cast(FinalState, final.squeeze(1) if isinstance(final, Tensor) else tuple(s.squeeze(1) for s in final))
        return output, state
    return (output if batch_first != time_major else output.transpose(0, 1)), state
