"""A fast RHN layer recurrence: a hand-written backward with batched weight gradients.

Reference: the autograd loop over :meth:`highwaynet.nn.RHNCell.step` (what ``RHN`` runs when this
path does not apply). The values and gradients are the same (tested in float64); the work differs:

- the forward runs without recording an autograd graph, saving only each micro-layer's input
  state and its ``[h | t]``;
- each micro-step runs one of three ways (:func:`_path`): with Triton and products on tensor
  cores, one kernel forward and one back, the recurrent product with the gate in its epilogue
  (:mod:`highwaynet.kernels.rhn_step`); with Triton otherwise (exact float32), cuBLAS's ``addmm``
  and the gate's one-pass kernels (:mod:`highwaynet.kernels.gating`); without (the CPU), PyTorch
  operations laid out to be few (:mod:`highwaynet.kernels.rhn_eager`), with each micro-step's
  gating one pass of C++ where that extension can be built (:mod:`highwaynet.kernels.rhn_cpu`);
- the backward walks the time steps once, computing per micro-step only the gradient that must be
  sequential (the state's), and stacks the gate gradients of every step;
- each micro-layer's weight gradient is then one matrix product over all ``T·B`` rows, instead of
  ``T`` small products accumulated one by one;
- forward and backward are each one custom operator, so that ``torch.compile`` and
  ``torch.export`` take the recurrence as one call (see ``_forward_op`` below).

It applies to the coupled carry with ``tanh`` transforms and gates that nobody records or lesions;
``RHN`` checks this and falls back to the reference otherwise. It knows no lengths: for a padded
batch ``RHN`` runs it over the padding (which never reaches a sequence's earlier steps), then
zeroes those outputs and reads each final state at its sequence's last step.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import rhn_cpu, rhn_eager
from .gating import ACTIVATION_CODES, first_order_only, gate_backward, gate_forward, triton_available
from .rhn_step import (
    Previous,
    halves,
    micro_step_backward,
    micro_step_forward,
    padded_halves,
    padded_states,
    padded_weight,
    unpadded_halves,
)

_TANH = ACTIVATION_CODES["tanh"]
_HALVES_PADDED = "one kernel, halves padded"

__all__ = ["pad_halves", "rhn_recurrence"]

#: Whether the one-kernel path also pads each half of ``[h | t]`` and ``dz`` (``"one kernel, halves
#: padded"``), so that the backward's product can load ``dz`` in vectors, as the forward's loads the
#: padded states. Off until timed on a GPU: ``benchmarks/rhn.py`` and ``benchmarks/rhn_step.py`` time
#: both layouts side by side, and the faster becomes the only one. Read when a forward starts.
pad_halves = False


def _forward(path: str, x_proj: Tensor, s0: Tensor, mask: Tensor | None, weights: list[Tensor],
             biases: list[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """All states ``(T, B, H)`` and the two buffers :func:`_backward` reads."""
    if path.startswith("eager"):
        return rhn_eager.forward(x_proj, s0, mask, weights, biases, halves="halves" in path, cpp="C++" in path)
    depth, steps = len(weights), x_proj.shape[0]
    # Micro-step k = t * depth + d reads states[k] and writes states[k + 1]: the gate kernel
    # writes each new state in place, and the outputs are every depth-th state (one copy at the
    # end, so that the caller gets a contiguous tensor of its own, as from nn.LSTM). The one-kernel
    # path keeps the states and weights in rows padded to a multiple of 16, which Triton loads in
    # vectors (H100, TF32, width 830: 6.0 µs a micro-step forward instead of 10.2, 9.8 back instead
    # of 13.7), and with pad_halves the halves of [h | t] and dz too (untimed); the buffers saved
    # for the backward are the padded ones.
    shape, hidden = (steps * depth + 1, *s0.shape), s0.shape[-1]
    buffer = padded_states(shape, x_proj) if path.startswith("one kernel") else x_proj.new_empty(shape)
    states = buffer[..., :hidden]
    states[0] = s0
    z_shape = (steps * depth, *x_proj.shape[1:])  # each micro-step's [h | t]
    z_all = padded_halves(z_shape, x_proj) if path == _HALVES_PADDED else x_proj.new_empty(z_shape)
    first = x_proj + biases[0]  # micro-layer 0 adds the input projection: one addition for all steps
    # Views of every step made in one call each (indexing inside the loop costs an operation a use).
    state_k, z_k, first_t = states.unbind(0), z_all.unbind(0), first.unbind(0)
    # cuBLAS's exact float32 product at batch 20 takes 16 µs with Rᵀ stored contiguous, 24 µs
    # with the transposed view (H100, benchmarks/rhn_step.py): worth one copy per forward.
    weights_t = [w.t().contiguous() if path == "gate kernel" else w.t() for w in weights]
    if path.startswith("one kernel"):
        weights = [padded_weight(w) for w in weights]
    for k in range(steps * depth):
        t, d = divmod(k, depth)
        add = first_t[t] if d == 0 else biases[d]
        if path.startswith("one kernel"):  # product and gate in one launch
            micro_step_forward(state_k[k], mask, weights[d], add, z_k[k], state_k[k + 1])
            continue
        u = state_k[k] if mask is None else state_k[k] * mask
        z = torch.addmm(add, u, weights_t[d], out=z_k[k])
        gate_forward(z, state_k[k], _TANH, keep_activations=True, out=state_k[k + 1])  # z becomes [h | t]
    return states[depth::depth].clone(memory_format=torch.contiguous_format), buffer, z_all


def _backward(path: str, grad_out: Tensor, saved_a: Tensor, saved_b: Tensor, mask: Tensor | None,
              weights: list[Tensor]) -> list[Tensor]:
    """The gradients ``[x_proj, s0, *weights, *biases]`` from the states' ``grad_out`` and the
    buffers :func:`_forward` returned."""
    if path.startswith("eager"):
        return rhn_eager.backward(grad_out, saved_a, saved_b, mask, weights, cpp="C++" in path)
    hidden = weights[0].shape[1]
    states, z_all = saved_a[..., :hidden], saved_b  # (the one-kernel path's rows are padded)
    depth, micro_steps = len(weights), z_all.shape[0]
    dz_all = torch.zeros_like(z_all) if path == _HALVES_PADDED else torch.empty_like(z_all)  # (padding: zeros)
    dz_k, grad_out_t = dz_all.unbind(0), grad_out.contiguous().unbind(0)  # (an expanded gradient: contiguous)
    if path.startswith("one kernel"):
        g = _one_kernel_backward(grad_out_t, z_all, states, mask, weights, dz_k)
    else:
        g = _gate_kernel_backward(grad_out_t, z_all, states, mask, weights, dz_k)
    steps, batch = micro_steps // depth, states.shape[1]
    by_layer = dz_all.view(steps, depth, batch, -1)
    inputs = states[:-1].view(steps, depth, batch, -1)
    grad_w, grad_b = [], []
    for d in range(depth):
        u = inputs[:, d] if mask is None else inputs[:, d] * mask
        dz = by_layer[:, d].reshape(steps * batch, -1)
        product = dz.t() @ u.reshape(steps * batch, -1)   # one product over every step
        grad_w.append(product.unflatten(0, (2, -1))[:, :hidden].flatten(0, 1))  # (the padding's rows dropped)
        grad_b.append(unpadded_halves(dz.sum(0), hidden))
    return [unpadded_halves(by_layer[:, 0], hidden), g, *grad_w, *grad_b]


# Each direction is one custom operator (where torch.library.custom_op exists, torch >= 2.4):
# opaque to torch.compile and torch.export, which would otherwise try to trace the micro-step loop
# itself and break its graph at each in-place product into a buffer's view (measured on the CPU,
# depth 4, hidden 256, 35 steps: 290 s to compile and 176 ms a step, 5x slower than eager). The
# fake versions give the real outputs' shapes and strides (made the same way, on no data).

#: Whether the recurrence is one opaque call to ``torch.compile`` and ``torch.export`` (torch >= 2.4).
#: Where it is not, ``RHN`` runs its reference loop while being compiled or exported: torch 2.3's
#: compiler traces into the autograd function and fails at its first in-place product.
OPAQUE_TO_COMPILE = hasattr(torch.library, "custom_op")

if OPAQUE_TO_COMPILE:
    # (schemas written out: read from this module's annotations, which are strings here, they would
    # depend on the torch version)
    _forward_op = torch.library.custom_op(
        "highwaynet::rhn_recurrence_forward", _forward, mutates_args=(),
        schema="(str path, Tensor x_proj, Tensor s0, Tensor? mask, Tensor[] weights, Tensor[] biases)"
               " -> (Tensor, Tensor, Tensor)")
    _backward_op = torch.library.custom_op(
        "highwaynet::rhn_recurrence_backward", _backward, mutates_args=(),
        schema="(str path, Tensor grad_out, Tensor saved_a, Tensor saved_b, Tensor? mask, Tensor[] weights)"
               " -> Tensor[]")

    @_forward_op.register_fake
    def _(path, x_proj, s0, mask, weights, biases):
        depth, (steps, batch, width) = len(weights), x_proj.shape
        hidden = width // 2
        out = x_proj.new_empty(steps, batch, hidden)
        if path.startswith("eager"):  # z (h and t two matrices a micro-step, or one), inputs
            parts = 2 if "halves" in path else 1
            z = x_proj.new_empty(depth, steps, parts, batch, width // parts)
            return out, z, x_proj.new_empty(depth, steps + 1, batch, hidden)
        shape, z_shape = (steps * depth + 1, batch, hidden), (steps * depth, batch, width)
        if path == _HALVES_PADDED:
            return out, padded_states(shape, x_proj), padded_halves(z_shape, x_proj)
        if path == "one kernel":
            return out, padded_states(shape, x_proj), x_proj.new_empty(z_shape)
        return out, x_proj.new_empty(shape), x_proj.new_empty(z_shape)

    @_backward_op.register_fake
    def _(path, grad_out, saved_a, saved_b, mask, weights):
        z = saved_a if path.startswith("eager") else saved_b
        hidden, depth, steps, batch = weights[0].shape[1], len(weights), grad_out.shape[0], grad_out.shape[1]
        if path.startswith("eager"):
            grad_x = z.new_empty(steps, batch, 2 * hidden)
        else:
            grad_x = unpadded_halves(z.new_empty(steps, depth, batch, z.shape[-1])[:, 0], hidden)
        return [grad_x, z.new_empty(batch, hidden), *(z.new_empty(w.shape) for w in weights),
                *(z.new_empty(w.shape[0]) for w in weights)]
else:  # torch 2.3: plain functions, which torch.compile cannot take as one call (see OPAQUE_TO_COMPILE)
    _forward_op, _backward_op = _forward, _backward  # type: ignore[assignment]


class _RHNRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, path: str, x_proj: Tensor, s0: Tensor, mask: Tensor | None, *params: Tensor) -> Tensor:
        depth = len(params) // 2
        out, saved_a, saved_b = _forward_op(path, x_proj, s0, mask, list(params[:depth]), list(params[depth:]))
        ctx.save_for_backward(saved_a, saved_b, mask, *params[:depth])
        ctx.path = path
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        first_order_only("RHN")
        saved_a, saved_b, mask, *weights = ctx.saved_tensors
        grad_x, grad_s0, *grad_params = _backward_op(ctx.path, grad_out, saved_a, saved_b, mask, weights)
        return (None, grad_x, grad_s0, None, *grad_params)


def _path(x_proj: Tensor, s0: Tensor, mask: Tensor | None, params: tuple[Tensor, ...]) -> str:
    """How the micro-steps run:

    - ``"one kernel"``: one launch each way (:mod:`.rhn_step`), where Triton runs and the products
      use tensor cores (one dtype: bfloat16, float16, or float32 with TF32 allowed); ``"one kernel,
      halves padded"`` where :data:`pad_halves` asks for that layout;
    - ``"gate kernel"``: cuBLAS's product and the Triton gate kernels, where Triton runs otherwise
      (exact float32, where cuBLAS's products beat Triton's without tensor cores; mixed dtypes,
      as under autocast, where the weights stay float32 while ``x_proj`` is not);
    - ``"eager"``: PyTorch operations (the CPU; :mod:`.rhn_eager`), and ``"eager, halves"``, the
      same with each micro-step's ``h`` and ``t`` made side by side (:func:`.rhn_eager.use_halves`);
      either with ``", C++ loops"`` where :mod:`.rhn_cpu` is available: the same buffers and
      products, each micro-step's gating one pass of C++.
    """
    if not triton_available(x_proj):
        path = "eager, halves" if rhn_eager.use_halves(x_proj) else "eager"
        return path + ", C++ loops" if rhn_cpu.available(x_proj) else path
    tensors = (x_proj, s0, *params) + ((mask,) if mask is not None else ())
    dtypes = {p.dtype for p in tensors}
    tensor_cores = dtypes in ({torch.bfloat16}, {torch.float16}) or \
        (dtypes == {torch.float32} and torch.backends.cuda.matmul.allow_tf32)
    if not (tensor_cores and all(p.is_contiguous() for p in tensors)):
        return "gate kernel"
    return _HALVES_PADDED if pad_halves else "one kernel"


def _one_kernel_backward(grad_out_t: tuple[Tensor, ...], z_all: Tensor, states: Tensor, mask: Tensor | None,
                         weights: list[Tensor], dz_k: tuple[Tensor, ...]) -> Tensor:
    """The backward walk with one launch a micro-step; returns the gradient of the initial state.

    Launch ``k`` takes micro-step ``k``'s ``dz`` and carried gradient, and its epilogue computes
    micro-step ``k − 1``'s (:func:`~.rhn_step.micro_step_backward`); the last micro-step's gate
    starts the walk."""
    depth, last = len(weights), z_all.shape[0] - 1
    # as the forward's: made again rather than kept from it (a copy of each R, 5.5 MB at the PTB
    # shape, instead of holding them all between forward and backward)
    weights = [padded_weight(w) for w in weights]
    z_k, state_k = z_all.unbind(0), states.unbind(0)
    # The last micro-step's gate (the Triton gate kernel) on its [h | t] without the padding.
    hidden = states.shape[-1]
    z_last, padded = unpadded_halves(z_k[last], hidden), z_k[last].shape[-1] > 2 * hidden
    grad_z = torch.empty_like(z_last) if padded else dz_k[last]
    carried = gate_backward(grad_out_t[-1], z_last, state_k[last], _TANH, grad_z=grad_z, activated=True)[1]
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
        carried = gate_backward(g, z_k[k], state_k[k], _TANH, grad_z=dz_k[k], activated=True)[1]
        # the state's gradient: what the carry passes on, plus what flows back through R_d
        g = carried.addmm_(dz_k[k], weights[d]) if mask is None else carried.addcmul_(dz_k[k] @ weights[d], mask)
    return g


def rhn_recurrence(x_proj: Tensor, s0: Tensor, weights: list[Tensor], biases: list[Tensor],
                   mask: Tensor | None = None) -> Tensor:
    """All states ``(T, B, H)`` of one coupled-carry, tanh RHN layer.

    Args:
        x_proj: the input projection of every step, ``(T, B, 2H)`` (added at micro-layer 0).
        s0: the initial state ``(B, H)``.
        weights, biases: micro-layer ``d``'s ``R_d`` ``(2H, H)`` and ``b_d`` ``(2H,)``.
        mask: a variational dropout mask ``(B, H)`` on the state where it enters the products.
    """
    path = _path(x_proj, s0, mask, (*weights, *biases))
    return _RHNRecurrence.apply(path, x_proj, s0, mask, *weights, *biases)
