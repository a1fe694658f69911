"""What the gates do: recording transform-gate activity, and lesioning layers.

Both tools act on :class:`highwaynet.nn.Gate` modules, the single point through which every layer
of the package mixes its transform with its carry (:class:`~highwaynet.nn.TransformGate`: dense,
convolutional, recurrent micro-layers, highway LSTM, highway and GTrXL residuals) or adds a scaled
residual branch (:class:`~highwaynet.nn.BranchGate`: residual, ReZero, the gated residual network).
So they work on any model built from these layers, however deeply nested, without knowing the
layer types.

Gates are numbered in the order of ``model.named_modules()``, which for a stack is the order of
its layers: :func:`gate_modules` lists them.

Example::

    >>> net = Highway(16, num_layers=4)
    >>> with record_gates(net) as rec:
    ...     y = net(torch.randn(32, 16))
    >>> rec.mean_per_gate().shape          # mean T of each of the 4 layers
    torch.Size([4])
    >>> with lesion(net, [0, 2]):          # layers 0 and 2 carry their input through
    ...     y = net(torch.randn(32, 16))
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from ._checks import check_int, check_module, check_usable_device, describe
from .nn.gate import Gate, GateObserver

__all__ = ["GateRecord", "gate_means", "gate_modules", "lesion", "record_gates"]


def gate_modules(model: nn.Module) -> list[tuple[str, Gate]]:
    """Every gate in ``model`` (:class:`~highwaynet.nn.TransformGate`, :class:`~highwaynet.nn.BranchGate`) as
    ``(qualified name, gate)``, in module order."""
    check_module("model", model)
    return [(name, m) for name, m in model.named_modules() if isinstance(m, Gate)]


@dataclass
class GateRecord:
    """Gate values captured by :func:`record_gates`.

    Attributes:
        names: the gates' qualified names, in module order.
        transform: for each name, the list of ``T`` tensors it produced, one per call (a recurrent
            micro-layer is called once per time step).
        carry: the same for independent carry gates ``C`` (empty lists for coupled gates).
    """

    names: list[str]
    transform: dict[str, list[Tensor]] = field(default_factory=dict)
    carry: dict[str, list[Tensor]] = field(default_factory=dict)

    def values(self, gate: int | str) -> Tensor:
        """All ``T`` values of one gate (its index in :attr:`names`, or its name), its calls concatenated
        along the first dimension (calls on inputs of other shapes, sequences of other lengths say, do
        not concatenate: :attr:`transform` holds each call's)."""
        name, calls = self._calls(gate)
        shapes = sorted({", ".join(["N", *map(str, c.shape[1:])]) for c in calls if c.dim()})
        if len(shapes) > 1:
            raise ValueError(f"gate {name!r} ran on inputs of other shapes, giving values of shapes ({shapes[0]}) and "
                             f"({shapes[1]}), which do not concatenate: take record.transform[{name!r}], its values "
                             f"call by call")
        return torch.cat([c if c.dim() else c.reshape(1) for c in calls])

    def _calls(self, gate: int | str) -> tuple[str, list[Tensor]]:
        """The name of one gate (its index in :attr:`names`, or its name) and the ``T`` of each of its calls."""
        if isinstance(gate, str):
            if gate not in self.transform:
                raise ValueError(f"gate must be one of the recorded gates' names {self.names}, got {gate!r}")
            name = gate
        else:
            index = check_int("gate", gate)
            if not -len(self.names) <= index < len(self.names):
                raise IndexError(f"gate index {index} out of range: {len(self.names)} gates were recorded")
            name = self.names[index]
        calls = self.transform[name]
        if not calls:
            raise RuntimeError(f"gate {name!r} was not called while recording")
        return name, calls

    def mean_per_gate(self) -> Tensor:
        """Mean transform-gate activity of each gate over everything recorded, shape ``(num_gates,)``.

        Everything includes the padding of padded sequences: a ``HighwayLSTM`` block's gate runs on
        every step of the padded batch (``(B, T, width)``), so for a mean over real words take
        ``values(gate)[mask]`` with the batch's ``(B, T)`` mask of steps within each length.
        """
        if not self.names:  # (a model without gates: no mean, rather than torch.stack's error)
            return torch.zeros(0)
        # (call by call, not over values(): calls on inputs of other shapes do not concatenate)
        calls = [self._calls(n)[1] for n in self.names]
        counts = [sum(c.numel() for c in gate_calls) for gate_calls in calls]
        empty = [n for n, count in zip(self.names, counts, strict=True) if count == 0]
        if empty:
            raise ValueError(f"gates {empty} saw no values while recording (only empty batches ran): "
                             f"they have no mean; record a batch of at least one example")
        # (summed in float64, as gate_means does: a float32 sum over many calls drifts)
        return torch.stack([torch.stack([c.double().sum() for c in gate_calls]).sum() / count
                            for gate_calls, count in zip(calls, counts, strict=True)]).float()

    def clear(self) -> None:
        for name in self.names:
            self.transform[name].clear()
            self.carry[name].clear()


@contextmanager
def record_gates(model: nn.Module, device: str | torch.device | None = "cpu") -> Iterator[GateRecord]:
    """Capture every gate's ``T = sigmoid(z_T)`` (detached) while the block runs.

    Under ``torch.func``'s transforms the values kept are plain tensors: a call under ``vmap`` records the
    whole batch's values, the batch dimension first (the outermost ``vmap``'s first), as a forward of the
    model on the batch does; under ``grad``, ``jvp`` and ``functionalize`` the values themselves. (A ``vmap``
    over something else than examples, an ensemble's stacked parameters say, puts that dimension first.)

    Args:
        model: any module containing highway layers.
        device: where to keep the recorded values (``None``: where they were computed; a model on the
            meta device, which computes no values, records their shapes there).

    Yields:
        a :class:`GateRecord`, filled as forward passes run.
    """
    gates = gate_modules(model)
    if device is not None:
        device = check_usable_device("device", device)
    record = GateRecord(names=[name for name, _ in gates])
    record.transform = {name: [] for name in record.names}
    record.carry = {name: [] for name in record.names}

    def observe(name: str, t: Tensor, c: Tensor | None) -> None:
        if t.is_meta and device is not None and device.type != "meta":
            raise ValueError(f"gate {name!r} ran on the meta device, which computes no values to keep on {device}: "
                             f"pass device=None to record their shapes, or record a model with its weights")
        record.transform[name].append(t.detach().to(device) if device else t.detach())
        if c is not None:
            record.carry[name].append(c.detach().to(device) if device else c.detach())

    with _observing(gates, observe):
        yield record


@contextmanager
def _observing(gates: list[tuple[str, Gate]], observe: Callable[[str, Tensor, Tensor | None], None]
               ) -> Iterator[None]:
    """``observe(name, t, c)`` on every forward pass of each of ``gates`` while the block runs."""
    # Each observer knows its gate's name, rather than looking the gate up: nn.DataParallel's replicas of a
    # gate share its observers (a shallow copy), and record under its name.
    def observer(name: str) -> GateObserver:
        def call(gate: Gate, t: Tensor, c: Tensor | None) -> None:
            # With torch.func's transforms off, what observe computes from the plain values stays plain. (A guard
            # held as torch's printing of a wrapped tensor holds it, not a context manager on every torch we take;
            # deleted, not left to the frame, which an exception's traceback keeps.)
            guard = torch._C._DisableFuncTorch()
            try:
                observe(name, _unwrapped(t), None if c is None else _unwrapped(c))
            finally:
                del guard
        return call

    detach = [g.add_observer(observer(name)) for name, g in gates]
    try:
        yield
    finally:
        for d in detach:
            d()


def _unwrapped(t: Tensor) -> Tensor:
    """A gate's value as a plain tensor, however many of ``torch.func``'s transforms it was computed under.

    Inside a transform a value is wrapped, one wrapper a transform: ``vmap``'s holds the values of the whole
    batch, with its batch dimension; ``grad``'s, ``jvp``'s and ``functionalize``'s hold the value. A wrapper kept
    after its transform returned fails at its first use (``vmap``'s: "your tensor may have escaped from inside a
    function being vmapped") or stands for a transform gone. So the values are unwrapped, as torch's own printing
    of a wrapped tensor does, and each ``vmap``'s batch dimension put first, the outermost ``vmap``'s first: what
    the model computed for the whole batch, as a forward without ``vmap`` on the batch records it.
    """
    functorch = torch._C._functorch
    batch_dims: list[int] = []  # (the vmaps' batch dimensions in the unwrapped tensor, innermost vmap first)
    while functorch.is_functorch_wrapped_tensor(t):
        if functorch.is_functionaltensor(t):
            torch._sync(t)  # (the wrapper may hold updates its inner tensor has not had yet)
        if functorch.is_batchedtensor(t):
            dim = functorch.maybe_get_bdim(t)
            batch_dims = [d + (d >= dim) for d in batch_dims] + [dim]
        t = functorch.get_unwrapped(t)
    if not batch_dims:
        return t
    batch_dims.reverse()
    return t.permute([*batch_dims, *(d for d in range(t.dim()) if d not in batch_dims)])


@contextmanager
def gate_means(model: nn.Module) -> Iterator[dict[str, float]]:
    """The mean of every gate's values (``T``, or a branch's scale: α, γ, 1) over the block's forward
    passes, by gate name, filled in when the block ends: a running sum, nothing kept (unlike
    :func:`record_gates`), for a long evaluation of a deep model. A gate not called is left out.

    Example::

        >>> net = Highway(16, num_layers=2)
        >>> with gate_means(net) as means:
        ...     y = net(torch.randn(32, 16))
        >>> sorted(means)
        ['gates.0', 'gates.1']
    """
    sums: dict[str, list[Tensor]] = {}

    def observe(name: str, t: Tensor, c: Tensor | None) -> None:
        if t.is_meta:  # (refused here: float() of its sum failed when the block ended, hiding any error of its own)
            raise ValueError(f"gate {name!r} ran on the meta device, which computes no values: gate_means has no "
                             f"mean of them; run a model with its weights")
        t = t.detach()
        # (both in float64: a count in the gate's dtype, bfloat16 say, stops growing exactly after a few
        # hundred values)
        total = sums.setdefault(name, [t.new_zeros((), dtype=torch.float64), t.new_zeros((), dtype=torch.float64)])
        total[0] += t.double().sum()
        total[1] += t.numel()

    means: dict[str, float] = {}
    try:
        with _observing(gate_modules(model), observe):
            yield means
    finally:
        means.update({name: float(total / count) for name, (total, count) in sums.items()})


def _select(gates: list[tuple[str, Gate]], layers: object) -> list[Gate]:
    """The gates ``layers`` names: a gate index or name, or an iterable of them."""
    if isinstance(layers, (numbers.Integral, str)) and not isinstance(layers, bool):
        layers = [layers]
    if isinstance(layers, (bytes, Tensor)) or not isinstance(layers, Iterable):
        raise TypeError(f"layers must be a gate index (int), a gate name (str) or a list of them, "
                        f"got {describe(layers)}")
    by_name = dict(gates)
    chosen = []
    for layer in layers:
        if isinstance(layer, str):
            if layer not in by_name:
                raise ValueError(f"layers: no gate named {layer!r}; the model's gates are: {list(by_name)}")
            chosen.append(by_name[layer])
        elif isinstance(layer, numbers.Integral) and not isinstance(layer, bool):  # (a NumPy integer too)
            index = check_int("layers", layer)
            if not -len(gates) <= index < len(gates):
                raise IndexError(f"layers: gate index {index} out of range: the model has {len(gates)} gates")
            chosen.append(gates[index][1])
        else:
            raise TypeError(f"layers must be gate indices (int) or names (str), got {describe(layer)}")
    return chosen


@contextmanager
def lesion(model: nn.Module, layers: int | str | Iterable[int | str]) -> Iterator[list[str]]:
    """Force ``T = 0`` (pure carry, the layer becomes the identity) in the chosen gates.

    Args:
        model: any module containing highway layers.
        layers: a gate index (as numbered by :func:`gate_modules`, negative allowed) or name, or
            several of them.

    Yields:
        the names of the lesioned gates. They are restored on exit, even after an exception.

    The lesion is the block's: a copy of the model made inside it (``copy.deepcopy``, ``torch.save`` of the
    model), as a ``state_dict``, is the model without it. For a lesion the model keeps, and its copies with it,
    set the gate's ``lesioned = True``.
    """
    gates = gate_modules(model)
    chosen = _select(gates, layers)
    ends = [g.add_lesion() for g in chosen]
    try:
        yield [name for name, g in gates if any(g is c for c in chosen)]
    finally:
        for end in ends:
            end()
