"""A fast RHN layer recurrence: a hand-written backward with batched weight gradients.

Reference: the autograd loop over :meth:`highwaynet.nn.RHNCell.step` (what ``RHN`` runs when this
path does not apply). The values and gradients are the same (tested in float64); the work differs:

- the forward runs without recording an autograd graph, saving only each micro-layer's input
  state and its ``[h | t]``;
- each micro-step runs one of several ways, an :class:`RHNPath` that :func:`choose_path` picks
  (and says why): with Triton and products on tensor cores, one kernel forward and one back, the
  recurrent product with the gate in its epilogue (:mod:`highwaynet.kernels.rhn_step`); with
  Triton otherwise (exact float32), cuBLAS's ``addmm`` and the gate's one-pass kernels
  (:mod:`highwaynet.kernels.gating`); without (the CPU), PyTorch operations laid out to be few
  (:mod:`highwaynet.kernels.rhn_eager`), with each micro-step's gating one pass of C++ where that
  extension can be built (:mod:`highwaynet.kernels.rhn_cpu`); or, on CUDA within its limits, the
  whole window as one launch each way (:mod:`highwaynet.kernels.triton_persistent`);
- the backward walks the time steps once, computing per micro-step only the gradient that must be
  sequential (the state's), and stacks the gate gradients of every step;
- each micro-layer's weight gradient is then one matrix product over all ``T·B`` rows, instead of
  ``T`` small products accumulated one by one;
- forward and backward are each one custom operator, so that ``torch.compile`` and
  ``torch.export`` take the recurrence as one call (see ``_forward_op`` below).

It applies to the coupled carry (either carry on the persistent kernel) with ``tanh`` transforms and
gates that nobody records or lesions;
:func:`choose_path` checks this and picks :attr:`RHNPath.LOOP`, the reference, otherwise. It knows
no lengths: for a padded batch ``RHN`` runs it over the padding (which never reaches a sequence's
earlier steps), then zeroes those outputs and reads each final state at its sequence's last step.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import torch
from torch import Tensor

from .._checks import check_same_device, check_tensor, describe, dtypes_meet
from . import rhn_cpu, rhn_eager
from .dispatch import Choice
from .gating import (
    Activation,
    first_order_only,
    fused_gate_backward,
    fused_gate_forward,
    kernel_dtypes_refusal,
    onnx_exporting,
    transforms_active,
    triton_available,
)
from .persistent import rhn_refusal
from .rhn_layout import halves, padded_halves, padded_states, padded_weight, unpadded_halves

__all__ = ["OPAQUE_TO_COMPILE", "RHNPath", "choose_path", "rhn_recurrence"]


class RHNPath(str, enum.Enum):
    """The ways an RHN layer's recurrence runs; :func:`choose_path` picks one per layer and call."""

    #: The autograd loop over :meth:`~highwaynet.nn.RHNCell.step`: every setting, gradients of any order.
    LOOP = "loop"
    #: PyTorch operations (:mod:`.rhn_eager`), each micro-step's ``z`` one ``(B, 2H)`` product.
    EAGER = "eager"
    #: The same, ``h`` and ``t`` made as two matrices side by side (two CPU threads or more).
    EAGER_HALVES = "eager, halves"
    #: :attr:`EAGER` with each micro-step's gating one pass of C++ (:mod:`.rhn_cpu`).
    CPP = "C++ loops"
    #: :attr:`EAGER_HALVES` with each micro-step's gating one pass of C++.
    CPP_HALVES = "C++ loops, halves"
    #: cuBLAS's product and the Triton gate kernels (:mod:`.gating`): exact float32, mixed dtypes.
    GATE_KERNEL = "gate kernel"
    #: One Triton kernel a micro-step each way (:mod:`.rhn_step`): products on tensor cores.
    ONE_KERNEL = "one kernel"
    #: :attr:`ONE_KERNEL` with each half of ``[h | t]`` and ``dz`` padded too. Never chosen
    #: automatically: a layout the benchmarks time against :attr:`ONE_KERNEL`, for a GPU run to decide.
    ONE_KERNEL_PADDED_HALVES = "one kernel, halves padded"
    #: The whole window in one Triton launch each way (:mod:`.triton_persistent`), the weights read
    #: from the L2 cache every micro-step: either carry. Chosen within its limits (:mod:`.persistent`).
    PERSISTENT = "persistent kernel"

    @property
    def fused(self) -> bool:
        """Whether this is :func:`rhn_recurrence` (one autograd function), not the reference loop."""
        return self is not RHNPath.LOOP

    @property
    def eager(self) -> bool:
        """Whether the micro-steps run :mod:`.rhn_eager`'s PyTorch operations (or its C++ loops)."""
        return self in _EAGER

    @property
    def halves(self) -> bool:
        """Whether :mod:`.rhn_eager` makes ``h`` and ``t`` as two matrices."""
        return self in (RHNPath.EAGER_HALVES, RHNPath.CPP_HALVES)

    @property
    def cpp(self) -> bool:
        """Whether each micro-step's gating runs in C++."""
        return self in (RHNPath.CPP, RHNPath.CPP_HALVES)

    @property
    def one_kernel(self) -> bool:
        """Whether each micro-step is one Triton launch each way."""
        return self in (RHNPath.ONE_KERNEL, RHNPath.ONE_KERNEL_PADDED_HALVES)


_EAGER = frozenset({RHNPath.EAGER, RHNPath.EAGER_HALVES, RHNPath.CPP, RHNPath.CPP_HALVES})


def _forward(path: str, x_proj: Tensor, s0: Tensor, mask: Tensor | None, weights: list[Tensor],
             biases: list[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """All states ``(T, B, H)``, then what :func:`_backward` reads: the micro-steps' ``[h | t]`` rows and
    their input states, each in the path's own layout. (The order is the eager path's own; with the
    input states first, the CPU path's buffers would swap places from 0.1's.)"""
    route = RHNPath(path)
    if route.eager:
        return rhn_eager.forward(x_proj, s0, mask, weights, biases, halves=route.halves, cpp=route.cpp)
    if route is RHNPath.PERSISTENT:
        from .triton_persistent import rhn_forward

        return rhn_forward(x_proj, s0, mask, weights, biases)
    depth, steps = len(weights), x_proj.shape[0]
    # Micro-step k = t * depth + d reads states[k] and writes states[k + 1]: the gate kernel
    # writes each new state in place, and the outputs are every depth-th state (one copy at the
    # end, so that the caller gets a contiguous tensor of its own, as from nn.LSTM). The one-kernel
    # paths keep the states and weights in rows padded to a multiple of 16 (.rhn_layout), which
    # Triton loads in vectors; the buffers saved for the backward are the padded ones.
    shape, hidden = (steps * depth + 1, *s0.shape), s0.shape[-1]
    buffer = padded_states(shape, x_proj) if route.one_kernel else x_proj.new_empty(shape)
    states = buffer[..., :hidden]
    states[0] = s0
    z_shape = (steps * depth, *x_proj.shape[1:])  # each micro-step's [h | t]
    padded = route is RHNPath.ONE_KERNEL_PADDED_HALVES
    z_all = padded_halves(z_shape, x_proj) if padded else x_proj.new_empty(z_shape)
    first = x_proj + biases[0]  # micro-layer 0 adds the input projection: one addition for all steps
    # Views of every step made in one call each (indexing inside the loop costs an operation a use).
    state_k, z_k, first_t = states.unbind(0), z_all.unbind(0), first.unbind(0)
    # cuBLAS's exact float32 product at a small batch is faster with Rᵀ stored contiguous than
    # through the transposed view (benchmarks/rhn_step.py): worth one copy per forward.
    weights_t = [w.t().contiguous() if route is RHNPath.GATE_KERNEL else w.t() for w in weights]
    if route.one_kernel:
        from .rhn_step import micro_step_forward

        weights = [padded_weight(w) for w in weights]
    for k in range(steps * depth):
        t, d = divmod(k, depth)
        add = first_t[t] if d == 0 else biases[d]
        if route.one_kernel:  # product and gate in one launch
            micro_step_forward(state_k[k], mask, weights[d], add, z_k[k], state_k[k + 1])
            continue
        u = state_k[k] if mask is None else state_k[k] * mask
        z = torch.addmm(add, u, weights_t[d], out=z_k[k])
        fused_gate_forward(z, state_k[k], Activation.TANH, keep_activations=True, out=state_k[k + 1])  # z: [h | t]
    return states[depth::depth].clone(memory_format=torch.contiguous_format), z_all, buffer


def _backward(path: str, grad_out: Tensor, z: Tensor, inputs: Tensor, mask: Tensor | None,
              weights: list[Tensor]) -> list[Tensor]:
    """The gradients ``[x_proj, s0, *weights, *biases]`` from the states' ``grad_out`` and the
    micro-steps' ``[h | t]`` rows and input states :func:`_forward` saved."""
    route = RHNPath(path)
    if route.eager:
        return rhn_eager.backward(grad_out, z, inputs, mask, weights, cpp=route.cpp)
    if route is RHNPath.PERSISTENT:
        from .triton_persistent import rhn_backward, rhn_gradients

        dz, grad_s0 = rhn_backward(grad_out, z, inputs, mask, weights)
        grad_x, *grad_params = rhn_gradients(dz, inputs, mask, len(weights))
        return [grad_x, grad_s0, *grad_params]
    hidden = weights[0].shape[1]
    states = inputs[..., :hidden]  # (the one-kernel paths' rows are padded)
    depth, micro_steps = len(weights), z.shape[0]
    padded = route is RHNPath.ONE_KERNEL_PADDED_HALVES
    dz_all = torch.zeros_like(z) if padded else torch.empty_like(z)  # (padding: zeros)
    dz_k, grad_out_t = dz_all.unbind(0), grad_out.contiguous().unbind(0)  # (an expanded gradient: contiguous)
    if route.one_kernel:
        g = _one_kernel_backward(grad_out_t, z, states, mask, weights, dz_k)
    else:
        g = _gate_kernel_backward(grad_out_t, z, states, mask, weights, dz_k)
    steps, batch = micro_steps // depth, states.shape[1]
    by_layer = dz_all.view(steps, depth, batch, -1)
    step_inputs = states[:-1].view(steps, depth, batch, -1)
    grad_w, grad_b = [], []
    for d in range(depth):
        u = step_inputs[:, d] if mask is None else step_inputs[:, d] * mask
        dz = by_layer[:, d].reshape(steps * batch, -1)
        product = dz.t() @ u.reshape(steps * batch, -1)   # one product over every step
        grad_w.append(product.unflatten(0, (2, -1))[:, :hidden].flatten(0, 1))  # (the padding's rows dropped)
        grad_b.append(unpadded_halves(dz.sum(0), hidden))
    return [unpadded_halves(by_layer[:, 0], hidden), g, *grad_w, *grad_b]


# Each direction is one custom operator (where torch.library.custom_op exists, torch >= 2.4):
# opaque to torch.compile and torch.export, which would otherwise try to trace the micro-step loop
# itself and break its graph at each in-place product into a buffer's view (on the CPU that took
# minutes to compile into a step several times slower than eager). The fake versions give the real
# outputs' shapes and strides (made the same way, on no data).

#: Whether the recurrence is one opaque call to ``torch.compile`` and ``torch.export`` (torch >= 2.4).
#: Where it is not, ``RHN`` runs its reference loop while being compiled or exported: torch 2.3's
#: compiler traces into the autograd function and fails at its first in-place product.
OPAQUE_TO_COMPILE = hasattr(torch.library, "custom_op")

#: The operators' version, in their names: inductor's cache on disk knows an operator by its name and
#: schema, not its code, and gives a compiled graph that calls it back from an earlier run. When what
#: an operator returns changes (the order or the layout of its buffers), a new name keeps that stale
#: code from running (it did once here: it read a 4-D buffer where a 5-D one now stood).
_VERSION = 2

if OPAQUE_TO_COMPILE:
    # (schemas written out: read from this module's annotations, which are strings here, they would
    # depend on the torch version)
    _forward_op = torch.library.custom_op(
        f"highwaynet::rhn_recurrence_forward_v{_VERSION}", _forward, mutates_args=(),
        schema="(str path, Tensor x_proj, Tensor s0, Tensor? mask, Tensor[] weights, Tensor[] biases)"
               " -> (Tensor, Tensor, Tensor)")
    _backward_op = torch.library.custom_op(
        f"highwaynet::rhn_recurrence_backward_v{_VERSION}", _backward, mutates_args=(),
        schema="(str path, Tensor grad_out, Tensor z, Tensor inputs, Tensor? mask, Tensor[] weights)"
               " -> Tensor[]")

    @_forward_op.register_fake
    def _(path, x_proj, s0, mask, weights, biases):
        route, depth, (steps, batch, width) = RHNPath(path), len(weights), x_proj.shape
        if route is RHNPath.PERSISTENT:  # (either carry: [h | t] or [h | t | c] rows)
            hidden = s0.shape[-1]
            return (x_proj.new_empty(steps, batch, hidden), x_proj.new_empty(steps * depth, batch, width),
                    x_proj.new_empty(steps * depth + 1, batch, hidden))
        hidden = width // 2
        out = x_proj.new_empty(steps, batch, hidden)
        if route.eager:  # z (h and t two matrices a micro-step, or one), inputs
            parts = 2 if route.halves else 1
            z = x_proj.new_empty(depth, steps, parts, batch, width // parts)
            return out, z, x_proj.new_empty(depth, steps + 1, batch, hidden)
        shape, z_shape = (steps * depth + 1, batch, hidden), (steps * depth, batch, width)
        if route is RHNPath.ONE_KERNEL_PADDED_HALVES:
            return out, padded_halves(z_shape, x_proj), padded_states(shape, x_proj)
        if route is RHNPath.ONE_KERNEL:
            return out, x_proj.new_empty(z_shape), padded_states(shape, x_proj)
        return out, x_proj.new_empty(z_shape), x_proj.new_empty(shape)

    @_backward_op.register_fake
    def _(path, grad_out, z, inputs, mask, weights):
        hidden, depth, steps, batch = weights[0].shape[1], len(weights), grad_out.shape[0], grad_out.shape[1]
        if RHNPath(path).eager:
            grad_x = z.new_empty(steps, batch, 2 * hidden)
        elif RHNPath(path) is RHNPath.PERSISTENT:  # micro-layer 0's dz: a view of all of them
            grad_x = z.new_empty(steps, depth, batch, z.shape[-1])[:, 0]
        else:
            grad_x = unpadded_halves(z.new_empty(steps, depth, batch, z.shape[-1])[:, 0], hidden)
        return [grad_x, z.new_empty(batch, hidden), *(z.new_empty(w.shape) for w in weights),
                *(z.new_empty(w.shape[0]) for w in weights)]
else:  # torch 2.3: plain functions, which torch.compile cannot take as one call (see OPAQUE_TO_COMPILE)
    _forward_op, _backward_op = _forward, _backward  # type: ignore[assignment]


def _traced(t: Tensor) -> bool:
    """Whether ``t`` comes from a trace (torch.compile, torch.export, AOT autograd's backward): then
    the recurrence must be the operator, whose fake version gives the shapes. Tracing tensors are
    subclasses (fake, functional); eager ones are plain tensors."""
    return torch.compiler.is_compiling() or type(t) is not Tensor


class _RHNRecurrence(torch.autograd.Function):
    # Eager calls take the functions themselves: through the operators, PyTorch's dispatch adds its
    # own cost to every call, and the first call in a process imports the whole compiler (a second).
    @staticmethod
    def forward(ctx, path: str, x_proj: Tensor, s0: Tensor, mask: Tensor | None, *params: Tensor) -> Tensor:
        depth = len(params) // 2
        forward = _forward_op if _traced(x_proj) else _forward
        out, z, inputs = forward(path, x_proj, s0, mask, list(params[:depth]), list(params[depth:]))
        ctx.save_for_backward(z, inputs, mask, *params[:depth])
        ctx.path = path
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        first_order_only("RHN")
        z, inputs, mask, *weights = ctx.saved_tensors
        backward = _backward_op if _traced(grad_out) else _backward
        grad_x, grad_s0, *grad_params = backward(ctx.path, grad_out, z, inputs, mask, weights)
        return (None, grad_x, grad_s0, None, *grad_params)


def choose_path(x_proj: Tensor, s0: Tensor, mask: Tensor | None, params: tuple[Tensor, ...], *,
                fused: bool = True, carry: str = "coupled", activation: object = torch.tanh,
                gates_plain: bool = True) -> Choice[RHNPath]:
    """The :class:`RHNPath` of one RHN layer (one direction) for these tensors, and why.

    Args:
        x_proj, s0, mask, params: the recurrence's inputs (as :func:`rhn_recurrence`), whose device,
            dtypes and layout decide among the fused paths.
        fused, carry, activation, gates_plain: the layer's settings (``RHN(fused=...)``), its
            cell's carry and transform, and whether its gates are free of observers and lesions.

    The persistent kernel (:attr:`RHNPath.PERSISTENT`, either carry) runs within its limits
    (:func:`~.persistent.rhn_refusal`: CUDA, products on tensor cores, the weights within the GPU's
    L2 cache); every other choice says why it was not taken. The loop (:attr:`RHNPath.LOOP`) runs
    where no fused recurrence applies: ``fused=False``, the independent carry (where the persistent
    kernel does not run), a transform other than ``tanh``, gates recorded or lesioned, under
    ``torch.func``'s transforms or forward-mode AD (which need more of an autograd function than a
    backward), while ONNX export traces the layer (ONNX has no translation of the fused operator;
    the exported graph then holds the unrolled loop, for the traced sequence length), and under
    torch 2.3 while being compiled or exported. Otherwise, without Triton for these tensors (the
    CPU) or with a dtype its kernels would compute in float32 only (float64): PyTorch operations,
    with ``h`` and ``t`` apart on two threads or more, and each micro-step's gating in C++ where
    that can run. With Triton: one kernel a micro-step where the products run
    on tensor cores (one dtype, contiguous), else cuBLAS's product and the gate kernels.
    """
    if not fused:
        return Choice(RHNPath.LOOP, "fused=False")
    if activation is not torch.tanh:
        return Choice(RHNPath.LOOP, "the fused recurrence is written for tanh transforms")
    if not gates_plain:
        return Choice(RHNPath.LOOP, "its gates are being recorded or are lesioned (highwaynet.analysis)")
    if transforms_active():
        return Choice(RHNPath.LOOP, "torch.func transforms or forward-mode AD need more than the fused backward")
    if onnx_exporting():
        return Choice(RHNPath.LOOP, "ONNX export: the fused operator has no ONNX translation")
    if not OPAQUE_TO_COMPILE and torch.compiler.is_compiling():
        return Choice(RHNPath.LOOP, "torch < 2.4 compiles and exports the loop (no torch.library.custom_op)")
    depth = len(params) // 2
    not_persistent = rhn_refusal(x_proj, s0, mask, params[:depth], params[depth:])
    if not_persistent is None:
        return Choice(RHNPath.PERSISTENT, "CUDA, products on tensor cores, the weights within the GPU's L2 cache: "
                                          "the whole window in one launch each way")
    if carry != "coupled":
        return Choice(RHNPath.LOOP, f"the fused recurrence is written for the coupled carry, not carry={carry!r}; "
                                    f"not the persistent kernel: {not_persistent}")
    choice = _choose_fused(x_proj, s0, mask, params)
    return Choice(choice.path, f"{choice.why}; not the persistent kernel: {not_persistent}")


def _choose_fused(x_proj: Tensor, s0: Tensor, mask: Tensor | None, params: tuple[Tensor, ...]) -> Choice[RHNPath]:
    """The fused path for the coupled carry where the persistent kernel does not run."""
    tensors = (x_proj, s0, *params) + ((mask,) if mask is not None else ())
    no_triton = "no Triton for these tensors" if not triton_available(x_proj) else kernel_dtypes_refusal(*tensors)
    if no_triton is not None:
        halves = rhn_eager.use_halves(x_proj)
        layout = "h and t as two matrices, for two CPU threads or more" if halves else "one product a micro-step"
        why_not_cpp = rhn_cpu.unavailable(x_proj)
        if why_not_cpp is None:
            path = RHNPath.CPP_HALVES if halves else RHNPath.CPP
            return Choice(path, f"{no_triton}: PyTorch's products with the gating in C++; {layout}")
        path = RHNPath.EAGER_HALVES if halves else RHNPath.EAGER
        return Choice(path, f"{no_triton}: PyTorch operations ({why_not_cpp}); {layout}")
    dtypes = {p.dtype for p in tensors}
    tensor_cores = dtypes in ({torch.bfloat16}, {torch.float16}) or \
        (dtypes == {torch.float32} and torch.backends.cuda.matmul.allow_tf32)
    if not tensor_cores:
        return Choice(RHNPath.GATE_KERNEL, "products off tensor cores (exact float32, or mixed dtypes as under "
                                           "autocast), where cuBLAS's beat Triton's")
    if not all(p.is_contiguous() for p in tensors):
        return Choice(RHNPath.GATE_KERNEL, "a tensor that is not contiguous, which the one-kernel path needs")
    return Choice(RHNPath.ONE_KERNEL, "products on tensor cores (TF32, bfloat16 or float16)")


def _one_kernel_backward(grad_out_t: tuple[Tensor, ...], z_all: Tensor, states: Tensor, mask: Tensor | None,
                         weights: list[Tensor], dz_k: tuple[Tensor, ...]) -> Tensor:
    """The backward walk with one launch a micro-step; returns the gradient of the initial state.

    Launch ``k`` takes micro-step ``k``'s ``dz`` and carried gradient, and its epilogue computes
    micro-step ``k − 1``'s (:func:`~.rhn_step.micro_step_backward`); the last micro-step's gate
    starts the walk."""
    from .rhn_step import Previous, micro_step_backward

    depth, last = len(weights), z_all.shape[0] - 1
    # as the forward's: made again rather than kept from it (a copy of each R, 5.5 MB at the PTB
    # shape, instead of holding them all between forward and backward)
    weights = [padded_weight(w) for w in weights]
    z_k, state_k = z_all.unbind(0), states.unbind(0)
    # The last micro-step's gate (the Triton gate kernel) on its [h | t] without the padding.
    hidden = states.shape[-1]
    z_last, padded = unpadded_halves(z_k[last], hidden), z_k[last].shape[-1] > 2 * hidden
    grad_z = torch.empty_like(z_last) if padded else dz_k[last]
    carried = fused_gate_backward(grad_out_t[-1], z_last, state_k[last], Activation.TANH, grad_z=grad_z,
                                  activated=True)[1]
    if padded:
        halves(dz_k[last], hidden).copy_(halves(grad_z, hidden))
    # Launch k reads all of one carried gradient while writing the next: two buffers, in turn.
    buffers = torch.empty(2, *carried.shape, dtype=carried.dtype, device=carried.device).unbind(0)
    for k in range(last, 0, -1):
        t, d = divmod(k - 1, depth)
        previous = Previous(z_k[k - 1], state_k[k - 1], grad_out_t[t] if d == depth - 1 else None,
                            dz_k[k - 1], buffers[k % 2])
        micro_step_backward(dz_k[k], carried, weights[k % depth], mask, previous=previous)
        carried = previous.carried
    grad_s0 = torch.empty_like(carried)
    micro_step_backward(dz_k[0], carried, weights[0], mask, out=grad_s0)
    return grad_s0


def _gate_kernel_backward(grad_out_t: tuple[Tensor, ...], z_all: Tensor, states: Tensor, mask: Tensor | None,
                          weights: list[Tensor], dz_k: tuple[Tensor, ...]) -> Tensor:
    """The backward walk with the gate's one-pass backward kernel then ``addmm`` a micro-step;
    returns the gradient of the initial state."""
    depth = len(weights)
    z_k, state_k = z_all.unbind(0), states.unbind(0)
    g = torch.zeros_like(grad_out_t[0])
    for k in range(len(dz_k) - 1, -1, -1):
        t, d = divmod(k, depth)
        if d == depth - 1:
            g = g + grad_out_t[t]
        # writes the gradient of z into dz_k[k]; returns what the carry passes on to the state
        carried = fused_gate_backward(g, z_k[k], state_k[k], Activation.TANH, grad_z=dz_k[k], activated=True)[1]
        # the state's gradient: what the carry passes on, plus what flows back through R_d
        g = carried.addmm_(dz_k[k], weights[d]) if mask is None else carried.addcmul_(dz_k[k] @ weights[d], mask)
    return g


def _check(x_proj: object, s0: object, weights: object, biases: object, mask: object,
           path: object) -> None:
    """:func:`rhn_recurrence`'s arguments, from their metadata alone (no value is read: this runs at every
    forward of an RHN layer, compiled too)."""
    x_proj, s0 = check_tensor("x_proj", x_proj), check_tensor("s0", s0)
    # H is s0's; x_proj's rows are [h | t], 2H wide (the independent carry's [h | t | c], 3H, on the
    # persistent kernel only)
    width = x_proj.shape[-1] if x_proj.dim() == 3 else 0
    rows = 3 if path is RHNPath.PERSISTENT and s0.dim() == 2 and width == 3 * s0.shape[1] else 2
    if width == 0 or width % rows:
        raise ValueError(f"x_proj must be (T, B, 2H) with H >= 1, got shape {tuple(x_proj.shape)}")
    if x_proj.shape[0] == 0:
        raise ValueError(f"x_proj must hold at least one step (T >= 1), got shape {tuple(x_proj.shape)}")
    batch, hidden = x_proj.shape[1], width // rows
    if s0.shape != (batch, hidden):
        raise ValueError(f"s0 must be (B, H) = ({batch}, {hidden}) for x_proj of shape {tuple(x_proj.shape)}, "
                         f"got {tuple(s0.shape)}")
    tensors = {"s0": s0}
    for name, sequence in (("weights", weights), ("biases", biases)):
        # (a list or tuple, an nn.ParameterList, or the micro-layers' tensors stacked along dim 0)
        if not isinstance(sequence, (list, tuple, torch.nn.ParameterList, Tensor)) \
                or isinstance(sequence, Tensor) and sequence.dim() == 0:
            raise TypeError(f"{name} must be a list of tensors, one per micro-layer, got {describe(sequence)}")
    assert isinstance(weights, (list, tuple, torch.nn.ParameterList, Tensor))  # (for mypy)
    assert isinstance(biases, (list, tuple, torch.nn.ParameterList, Tensor))
    if len(weights) == 0:
        raise ValueError("weights must hold one tensor per micro-layer (a depth of at least 1), got none")
    if len(biases) != len(weights):
        raise ValueError(f"biases must hold one tensor per micro-layer, as weights ({len(weights)}), got {len(biases)}")
    for d in range(len(weights)):  # (as many biases: checked above)
        weight, bias = check_tensor(f"weights[{d}]", weights[d]), check_tensor(f"biases[{d}]", biases[d])
        tensors[f"weights[{d}]"], tensors[f"biases[{d}]"] = weight, bias
        if weight.shape != (width, hidden):
            raise ValueError(f"weights[{d}] must be ({rows}H, H) = ({width}, {hidden}), got {tuple(weight.shape)}")
        if bias.shape != (width,):
            raise ValueError(f"biases[{d}] must be ({rows}H,) = ({width},), got {tuple(bias.shape)}")
    if mask is not None:
        mask = tensors["mask"] = check_tensor("mask", mask)
        if mask.shape != (batch, hidden):
            raise ValueError(f"mask must be (B, H) = ({batch}, {hidden}) or None, got {tuple(mask.shape)}")
    check_same_device("x_proj", x_proj, **tensors)
    for name, t in tensors.items():
        if not dtypes_meet(t.dtype, x_proj.dtype, x_proj.device.type):
            raise TypeError(f"{name} must have x_proj's dtype {x_proj.dtype}, got {t.dtype} (convert one to the "
                            f"other, or run under torch.autocast, which casts float32 but not float64)")
    if path is not None and not isinstance(path, RHNPath):
        raise TypeError(f"path must be an RHNPath or None, got {describe(path)}")
    if path is RHNPath.LOOP:
        raise ValueError("path must be a fused RHNPath: rhn_recurrence runs the fused paths; RHNPath.LOOP is "
                         "RHNCell.step's loop")
    if path in _TRITON_PATHS and not triton_available(x_proj):
        raise RuntimeError(f"rhn_recurrence: path {path} needs Triton and CUDA tensors (or TRITON_INTERPRET=1 on "
                           f"the CPU); path=None picks one that runs")


#: The paths that are Triton kernels only (the gate kernel's falls back to the PyTorch reference).
_TRITON_PATHS = frozenset({RHNPath.ONE_KERNEL, RHNPath.ONE_KERNEL_PADDED_HALVES, RHNPath.PERSISTENT})


def rhn_recurrence(x_proj: Tensor, s0: Tensor, weights: Sequence[Tensor], biases: Sequence[Tensor],
                   mask: Tensor | None = None, path: RHNPath | None = None) -> Tensor:
    """All states ``(T, B, H)`` of one coupled-carry, tanh RHN layer.

    Args:
        x_proj: the input projection of every step, ``(T, B, 2H)`` (added at micro-layer 0), ``T >= 1``
            (``(T, B, 3H)``, ``[h | t | c]``, for the independent carry on :attr:`RHNPath.PERSISTENT`).
        s0: the initial state ``(B, H)``.
        weights, biases: micro-layer ``d``'s ``R_d`` ``(2H, H)`` and ``b_d`` ``(2H,)`` (``3H`` with
            ``x_proj``'s ``3H``): one tensor per micro-layer, at least one, in a list, a tuple or an
            ``nn.ParameterList`` (or stacked: ``(L, 2H, H)`` and ``(L, 2H)``).
        mask: a variational dropout mask ``(B, H)`` on the state where it enters the products.
        path: a fused :class:`RHNPath` (default: :func:`choose_path`'s for these tensors).

    Every tensor has ``x_proj``'s device and dtype (under autocast, float32 and the half types mix).

    Raises:
        TypeError: a tensor argument not a floating-point tensor, or of another dtype than ``x_proj``
            (under autocast: float64 beside another); ``weights`` or ``biases`` not a sequence of
            tensors; ``path`` not an :class:`RHNPath`.
        ValueError: shapes other than the above (``T = 0`` too), no weights, not as many biases as weights,
            tensors on different devices, ``path`` :attr:`RHNPath.LOOP`.
        RuntimeError: a forced Triton path without Triton for these tensors.
    """
    _check(x_proj, s0, weights, biases, mask, path)
    if path is None:
        path = choose_path(x_proj, s0, mask, (*weights, *biases)).path
    return _RHNRecurrence.apply(path.value, x_proj, s0, mask, *weights, *biases)
