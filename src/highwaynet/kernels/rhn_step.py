"""One RHN micro-step as one kernel: the recurrent product with the gate in its epilogue, and back.

A coupled-carry tanh micro-step of an RHN layer (state ``s`` ``(B, H)``, weight ``R = [R_H; R_T]``
``(2H, H)``, ``a`` the bias, plus the step's input projection at micro-layer 0) is

.. math::
    [z_H \\mid z_T] = (s \\odot m) R^\\top + a, \\quad h = \\tanh z_H, \\quad t = \\sigma(z_T),
    \\quad s' = s + t \\odot (h - s)

(``m``: the variational dropout mask, or none), and its backward, given ``g = dL/ds'``:

.. math::
    dz_H = g \\odot t \\odot (1 - h^2), \\quad dz_T = g \\odot (h - s) \\odot t (1 - t), \\quad
    dL/ds = \\underbrace{g \\odot (1 - t)}_{\\text{carried}} + (dz R) \\odot m.

At the RHN paper's shape (batch 20, hidden 830) each product is too small to fill a GPU, so the
time of a micro-step is its launches and the round trips through memory between them, not the
arithmetic: cuBLAS's product then the gate kernel, two launches forward and two back. Here each
direction is one launch, a product whose epilogue does the element-wise work:

- :func:`micro_step_forward`: a program computes a ``(BLOCK_B, BLOCK_H)`` tile of ``z_H`` and the
  matching tile of ``z_T`` (two accumulators over the same ``s`` tiles); its epilogue applies the
  gate, writing ``[h | t]`` (kept for the backward) and ``s'``;
- :func:`micro_step_backward`: a tile of ``dL/ds = carried + (dz R) ⊙ m``; since ``s`` is the
  previous micro-step's ``s'``, the epilogue goes straight on through that micro-step's gate
  (element-wise, on the same tile) and writes its ``dz`` and ``carried``, the next launch's inputs.
  The backward walk is then one launch per micro-step, plus the last micro-step's gate to start.

Both kernels read ``R`` and the states fastest in rows padded to a multiple of 16 values
(:mod:`.rhn_layout`), which Triton can prove aligned for vector loads; the backward's product reads
``dz``, whose halves can be padded too (:attr:`~.rhn_recurrence.RHNPath.ONE_KERNEL_PADDED_HALVES`, a
layout only the benchmarks select until a GPU run shows it faster). ``benchmarks/rhn_step.py``
times each kernel against cuBLAS's product and the gate kernel; in exact float32, Triton's products
(without tensor cores) are slower than cuBLAS's, so the RHN uses these kernels for products on
tensor cores only (TF32 allowed, bfloat16, float16; see :mod:`.rhn_recurrence`).

The reference is the maths above in float64 (``tests/test_kernels.py``). Float32 products are
exact (``ieee``) unless ``torch.backends.cuda.matmul.allow_tf32`` allows TF32, as for ``torch.mm``;
all products accumulate in float32.
"""

from __future__ import annotations

import inspect
from typing import NamedTuple

import torch
import triton
import triton.language as tl
import triton.testing
from torch import Tensor

from .gating import INTERPRETING
from .triton_gating import TANH, _activate_tl, _gate_grads_tl

__all__ = ["Previous", "micro_step_backward", "micro_step_forward"]


def _configs() -> list:
    """The tiles to try (rows, columns, K step, warps, stages), timed on the first call of each
    shape. Under the interpreter (no GPU; it checks arithmetic, not speed) one."""
    if INTERPRETING:
        tiles = [(16, 16, 32, 1, 1)]
    else:
        tiles = [(16, 16, 32, 2, 4), (16, 16, 64, 2, 3), (16, 32, 64, 4, 3), (16, 32, 128, 4, 3),
                 (32, 16, 32, 2, 4), (32, 16, 64, 2, 4), (32, 32, 64, 4, 3)]
    return [triton.Config({"BLOCK_B": b, "BLOCK_H": h, "BLOCK_K": k}, num_warps=w, num_stages=s)
            for b, h, k, w, s in tiles]


def _quick_bench(kernel_call, quantiles):
    """Time a candidate tile for a few milliseconds, not the default 125 (the kernels take microseconds)."""
    return triton.testing.do_bench(kernel_call, warmup=5, rep=20, quantiles=quantiles)


def _autotune(key: list[str]):
    """Tune the tiles on the first call of each shape in a process (seconds: each candidate is
    compiled once, then Triton's cache on disk keeps the compiled kernels)."""
    timing = ({"do_bench": _quick_bench} if "do_bench" in inspect.signature(triton.autotune).parameters
              else {"warmup": 5, "rep": 20})  # Triton 3.0 takes the times themselves
    return triton.autotune(configs=_configs(), key=key, **timing)


@_autotune(key=["B", "H", "stride_s", "stride_w", "HALF", "HAS_MASK", "PRECISION"])
@triton.jit
def _forward_kernel(s_ptr, mask_ptr, w_ptr, add_ptr, ht_ptr, out_ptr, B, H, stride_s, bound_s, stride_out,
                    stride_w, stride_add, HALF,
                    HAS_MASK: tl.constexpr, PRECISION: tl.constexpr, BLOCK_B: tl.constexpr,
                    BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)[:, None]
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)[None, :]
    ks = tl.arange(0, BLOCK_K)
    acc_h = tl.zeros((BLOCK_B, BLOCK_H), tl.float32)
    acc_t = tl.zeros((BLOCK_B, BLOCK_H), tl.float32)
    for k0 in range(0, H, BLOCK_K):
        k_col, k_row = k0 + ks[None, :], k0 + ks[:, None]
        # bound_s is H, or the padded width of a padded state (see _state_bound)
        a = tl.load(s_ptr + rows * stride_s + k_col, mask=(rows < B) & (k_col < bound_s), other=0.0)
        if HAS_MASK:
            a = a * tl.load(mask_ptr + rows * H + k_col, mask=(rows < B) & (k_col < H), other=0.0)
        # R[n, k] read as the (k, n) tile of Rᵀ: rows n of R_H, and the same rows of R_T. The
        # bound on k is the row stride, not H: R's columns past H are zero (padded_weight),
        # and a bound the compiler knows to be a multiple of 16 lets it load in vectors.
        in_w = (k_row < stride_w) & (cols < H)
        w_h = tl.load(w_ptr + cols * stride_w + k_row, mask=in_w, other=0.0)
        w_t = tl.load(w_ptr + (cols + H) * stride_w + k_row, mask=in_w, other=0.0)
        acc_h = tl.dot(a, w_h, acc_h, input_precision=PRECISION)
        acc_t = tl.dot(a, w_t, acc_t, input_precision=PRECISION)
    inside = (rows < B) & (cols < H)
    z_h = acc_h + tl.load(add_ptr + rows * stride_add + cols, mask=inside, other=0.0).to(tl.float32)
    z_t = acc_t + tl.load(add_ptr + rows * stride_add + H + cols, mask=inside, other=0.0).to(tl.float32)
    h = _activate_tl(z_h, TANH)
    t = tl.sigmoid(z_t)
    s = tl.load(s_ptr + rows * stride_s + cols, mask=inside, other=0.0).to(tl.float32)
    kind = ht_ptr.dtype.element_ty
    tl.store(ht_ptr + rows * 2 * HALF + cols, h.to(kind), mask=inside)  # [h | t]: halves HALF wide
    tl.store(ht_ptr + rows * 2 * HALF + HALF + cols, t.to(kind), mask=inside)
    tl.store(out_ptr + rows * stride_out + cols, (s + t * (h - s)).to(out_ptr.dtype.element_ty), mask=inside)

@_autotune(key=["B", "H", "stride_w", "stride_s", "HALF", "HAS_MASK", "PREVIOUS", "HAS_EXTRA", "PRECISION"])
@triton.jit
def _backward_kernel(dz_ptr, carried_ptr, w_ptr, mask_ptr, out_ptr, ht_ptr, s_ptr, extra_ptr,
                     dz_prev_ptr, carried_prev_ptr, B, H, stride_w, stride_s, HALF, HAS_MASK: tl.constexpr,
                     PREVIOUS: tl.constexpr, HAS_EXTRA: tl.constexpr, PRECISION: tl.constexpr,
                     BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)[:, None]
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)[None, :]
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_B, BLOCK_H), tl.float32)
    for j0 in range(0, H, BLOCK_K):  # acc = dz R over dz's 2H columns: its H and T halves
        j_col, j_row = j0 + ks[None, :], j0 + ks[:, None]
        # each half HALF wide: H, or padded to a multiple of 16 with zeros (padded_halves), read
        # to its end so that the compiler can load it in vectors
        in_dz = (rows < B) & (j_col < HALF)
        dz_h = tl.load(dz_ptr + rows * 2 * HALF + j_col, mask=in_dz, other=0.0)
        dz_t = tl.load(dz_ptr + rows * 2 * HALF + HALF + j_col, mask=in_dz, other=0.0)
        in_w = (j_row < H) & (cols < stride_w)  # (columns past H are zero, as forward)
        w_h = tl.load(w_ptr + j_row * stride_w + cols, mask=in_w, other=0.0)
        w_t = tl.load(w_ptr + (j_row + H) * stride_w + cols, mask=in_w, other=0.0)
        acc = tl.dot(dz_h, w_h, acc, input_precision=PRECISION)
        acc = tl.dot(dz_t, w_t, acc, input_precision=PRECISION)
    inside = (rows < B) & (cols < H)
    if HAS_MASK:
        acc *= tl.load(mask_ptr + rows * H + cols, mask=inside, other=0.0).to(tl.float32)
    grad = tl.load(carried_ptr + rows * H + cols, mask=inside, other=0.0).to(tl.float32) + acc
    if PREVIOUS:
        # grad is the gradient of the previous micro-step's new state: its gate's backward,
        # element by element, needs only this tile's columns.
        if HAS_EXTRA:
            grad += tl.load(extra_ptr + rows * H + cols, mask=inside, other=0.0).to(tl.float32)
        h = tl.load(ht_ptr + rows * 2 * HALF + cols, mask=inside, other=0.0).to(tl.float32)
        t = tl.load(ht_ptr + rows * 2 * HALF + HALF + cols, mask=inside, other=0.0).to(tl.float32)
        s = tl.load(s_ptr + rows * stride_s + cols, mask=inside, other=0.0).to(tl.float32)
        dz_h, dz_t, carried = _gate_grads_tl(grad, h, t, s, TANH)
        kind = dz_prev_ptr.dtype.element_ty
        tl.store(dz_prev_ptr + rows * 2 * HALF + cols, dz_h.to(kind), mask=inside)
        tl.store(dz_prev_ptr + rows * 2 * HALF + HALF + cols, dz_t.to(kind), mask=inside)
        tl.store(carried_prev_ptr + rows * H + cols, carried.to(carried_prev_ptr.dtype.element_ty), mask=inside)
    else:
        tl.store(out_ptr + rows * H + cols, grad.to(out_ptr.dtype.element_ty), mask=inside)


def _precision(dtype: torch.dtype) -> str:
    return "tf32" if dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32 else "ieee"






def _weight_stride(weight: Tensor, hidden: int) -> int:
    """The weight's row stride, its width (``H`` or padded_weight's), after checking its shape."""
    if weight.dim() != 2 or weight.shape[0] != 2 * hidden or weight.shape[1] < hidden or not weight.is_contiguous():
        raise ValueError(f"the micro-step needs a contiguous weight of shape ({2 * hidden}, {hidden}), or "
                         f"padded_weight's, got {tuple(weight.shape)}")
    return weight.shape[1]










def _half_width(rows: Tensor, hidden: int) -> int:
    """The width of each half of ``[h | t]`` rows: ``H``, or padded (:func:`~.rhn_layout.padded_halves`)."""
    if rows.dim() != 2 or rows.shape[1] % 2 or rows.shape[1] < 2 * hidden or not rows.is_contiguous():
        raise ValueError(f"the micro-step needs contiguous [h | t] rows of shape (B, {2 * hidden}), or "
                         f"padded_halves', got {tuple(rows.shape)}")
    return rows.shape[1] // 2


def _row_major(name: str, t: Tensor) -> int:
    if t.stride(-1) != 1:
        raise ValueError(f"the micro-step needs {name} with contiguous rows, got strides {t.stride()}")
    return t.stride(0)


def _state_bound(state: Tensor, weight: Tensor, hidden: int) -> int:
    """How far along its rows the product reads ``state``: ``H``, or, where the state's rows are at
    least as wide as the weight's padded rows, to that width (the columns past ``H`` meet the
    weight's zeros, so they must hold numbers: :func:`~.rhn_layout.padded_states` makes them zero). A bound that
    the compiler knows to be a multiple of 16 lets it load the state in vectors too."""
    width = weight.shape[1]
    return width if width > hidden and state.stride(0) >= width else hidden


def _grid(batch: int, hidden: int):
    return lambda meta: (triton.cdiv(batch, meta["BLOCK_B"]), triton.cdiv(hidden, meta["BLOCK_H"]))


def micro_step_forward(state: Tensor, mask: Tensor | None, weight: Tensor, add: Tensor,
                       ht: Tensor, out: Tensor) -> None:
    """Write ``[h | t]`` into ``ht`` ``(B, 2H)`` (or :func:`~.rhn_layout.padded_halves`' rows) and the new state
    into ``out`` ``(B, H)``.

    ``state`` ``(B, H)``, ``mask`` ``(B, H)`` or None, ``weight`` ``(2H, H)`` or, faster where ``H``
    is no multiple of 16, :func:`~.rhn_layout.padded_weight`'s ``(2H, W)`` (zeros past column ``H``): one dtype;
    ``add`` is the bias ``(2H,)`` or the bias plus the input projection ``(B, 2H)``. ``state`` and
    ``out`` may be views of wider rows (faster: :func:`~.rhn_layout.padded_states`); the rest are contiguous.
    """
    batch, hidden = state.shape
    stride_add = 0 if add.dim() == 1 else add.stride(0)
    strides = (_row_major("state", state), _state_bound(state, weight, hidden), _row_major("out", out),
               _weight_stride(weight, hidden), stride_add, _half_width(ht, hidden))
    _forward_kernel[_grid(batch, hidden)](state, mask if mask is not None else state, weight, add, ht, out,
                                          batch, hidden, *strides, HAS_MASK=mask is not None,
                                          PRECISION=_precision(weight.dtype))


class Previous(NamedTuple):
    """The micro-step before, whose gate's backward :func:`micro_step_backward` runs in its epilogue:
    its ``[h | t]`` ``(B, 2H)`` and input ``state`` ``(B, H)`` (rows contiguous), the layer's output gradient to add to
    its new state's (``extra``, at the last micro-layer of a time step, else None), and where to
    write its ``grad_z`` ``(B, 2H)`` and ``carried`` (the carry's share of its input's gradient)."""
    ht: Tensor
    state: Tensor
    extra: Tensor | None
    grad_z: Tensor
    carried: Tensor


def micro_step_backward(grad_z: Tensor, carried: Tensor, weight: Tensor, mask: Tensor | None,
                        out: Tensor | None = None, previous: Previous | None = None) -> None:
    """The gradient of a micro-step's input state, ``carried + (dz R) ⊙ m``, given ``dz = grad_z``
    ``(B, 2H)`` and the carry's share ``carried`` ``(B, H)``: written into ``out``, or, given the
    ``previous`` micro-step, taken straight on through that one's gate (see :class:`Previous`).
    ``grad_z`` may be :func:`~.rhn_layout.padded_halves`' rows instead (faster; zeros between the halves), and
    then so are the previous micro-step's ``ht`` and ``grad_z``.
    ``weight`` as for :func:`micro_step_forward`."""
    batch, hidden = carried.shape
    p = previous
    if (p is None) == (out is None):
        raise ValueError("micro_step_backward writes either out or the previous micro-step's gradients")
    stride_w = _weight_stride(weight, hidden)
    stride_s = _row_major("state", p.state) if p is not None else hidden
    half = _half_width(grad_z, hidden)
    if p is not None and not p.ht.shape == p.grad_z.shape == grad_z.shape:
        raise ValueError("the previous micro-step's [h | t] and grad_z need grad_z's layout")
    _backward_kernel[_grid(batch, hidden)](
        grad_z, carried, weight, carried if mask is None else mask, carried if out is None else out,
        *((p.ht, p.state, carried if p.extra is None else p.extra, p.grad_z, p.carried) if p is not None
          else (grad_z, carried, carried, grad_z, carried)),
        batch, hidden, stride_w, stride_s, half, HAS_MASK=mask is not None, PREVIOUS=p is not None,
        HAS_EXTRA=p is not None and p.extra is not None, PRECISION=_precision(weight.dtype))
