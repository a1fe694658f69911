"""Which path a layer runs, and why: each fused layer's choice is a typed value made by one function.

The layers with fast paths (:class:`~highwaynet.nn.Highway`, :class:`~highwaynet.nn.RHN`,
:class:`~highwaynet.elmo.ProjectedLSTM`) each call one function per forward that returns a
:class:`Choice`: the path (a member of the layer's own ``Enum``,
:class:`~highwaynet.kernels.dense_highway.DensePath`, :class:`~highwaynet.kernels.rhn_recurrence.RHNPath`
or :class:`~highwaynet.kernels.lstmp.LSTMPPath`) and, in words, why. :func:`explain` runs a
model once and collects those choices, so that a user can see which path each layer took and what
kept it off a faster one::

    >>> for decision in explain(RHN(8, 16, depth=3), torch.randn(5, 2, 8)):
    ...     print(decision)                                          # doctest: +SKIP
    cells.0: C++ loops (no Triton for these tensors: ...)
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

import torch
from torch import nn

from .._checks import check_module

__all__ = ["Choice", "Decision", "explain"]


PathT = TypeVar("PathT", bound=enum.Enum)


@dataclass  # (not frozen: torch 2.3's compiler cannot make a frozen dataclass while it traces a forward)
class Choice(Generic[PathT]):
    """A layer's path for one call (a member of the layer's ``Enum`` of paths), and why it was taken
    (a sentence a user can act on)."""

    path: PathT
    why: str


class Decision(NamedTuple):
    """What :func:`explain` reports for one layer: its qualified name in the model, the path it ran and why."""

    layer: str
    path: str
    why: str

    def __str__(self) -> str:
        return f"{self.layer or '(the model itself)'}: {self.path} ({self.why})"


# The layers' choices during explain(), else None. A list read and appended in eager mode only.
_recorded: list[tuple[nn.Module, Choice[Any]]] | None = None


def note(layer: nn.Module, choice: Choice[PathT]) -> Choice[PathT]:
    """Called by a layer with the choice it just made; returns it. Records it while :func:`explain` runs."""
    if _recorded is not None and not torch.compiler.is_compiling():
        _recorded.append((layer, choice))
    return choice


@contextmanager
def _recording() -> Iterator[list[tuple[nn.Module, Choice[Any]]]]:
    global _recorded
    previous, _recorded = _recorded, []
    try:
        yield _recorded
    finally:
        _recorded = previous


def _tensors(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[torch.Tensor]:
    """The model's parameters and buffers and the tensors among the call's arguments (their devices)."""
    yield from model.parameters()
    yield from model.buffers()
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            yield value


def explain(model: nn.Module, *args: Any, **kwargs: Any) -> list[Decision]:
    """Run ``model(*args, **kwargs)`` once without gradients and report each fused-capable layer's path.

    Returns one :class:`Decision` per layer and distinct choice, in the order the layers ran: an
    RHN reports each of its cells (layer and direction), a :class:`~highwaynet.nn.Highway` stack
    itself. Layers without a fast path (convolutions, the highway LSTM) do not appear. The path
    depends on the input (its device and dtype), the layer's settings, and on what is active
    around the call (``torch.func`` transforms, gate recording, ONNX export), as the reasons say.

    The model's buffers (a batch norm's running statistics, the states a stateful
    :class:`~highwaynet.elmo.ELMoBiLM` carries) and the random generators (dropout's draws) are as
    they were before the call, at the cost of a copy of the buffers while it runs; what a module keeps
    outside its buffers (a lazy module's first call, which makes its parameters) is not put back.
    """
    check_module("model", model)
    names = {id(module): name for name, module in model.named_modules()}
    # Each module's buffers as they are (None included), and a copy of their values (none on meta: no values).
    kept = [(module, dict(module._buffers), set(module._non_persistent_buffers_set),
             {name: b.clone() for name, b in module._buffers.items() if b is not None and not b.is_meta})
            for module in model.modules()]
    devices = sorted({t.device.index or 0 for t in _tensors(model, args, kwargs) if t.device.type == "cuda"})
    try:
        with _recording() as recorded, torch.no_grad(), torch.random.fork_rng(devices=devices):
            model(*args, **kwargs)
    finally:
        with torch.no_grad():
            for module, buffers, non_persistent, values in kept:
                # The same tensors back (others may hold them), their values too where the call wrote them
                # in place (an inference tensor, made under torch.inference_mode, only under it); a buffer
                # the call set from None or registered is gone.
                for name, before in values.items():
                    buffer = buffers[name]
                    assert buffer is not None  # (values holds the buffers that were tensors)
                    with torch.inference_mode(buffer.is_inference()):
                        if buffer.shape != before.shape:  # (resized in place)
                            buffer.resize_(before.shape).copy_(before)
                        elif not torch.equal(buffer, before):
                            buffer.copy_(before)
                module._buffers.clear()
                module._buffers.update(buffers)
                module._non_persistent_buffers_set.clear()
                module._non_persistent_buffers_set.update(non_persistent)
    decisions = []
    for layer, choice in recorded:
        decision = Decision(names.get(id(layer), type(layer).__name__), str(choice.path.value), choice.why)
        if decision not in decisions:
            decisions.append(decision)
    return decisions
