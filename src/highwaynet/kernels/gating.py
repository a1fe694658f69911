"""The highway gate's element-wise work, forward and backward, fused into one pass each.

Every highway layer ends in the same element-wise step after its projection
``z = [z_H | z_T]`` (rows of width ``2D``) of an input ``x`` (rows of width ``D``):

.. math::
    h = f(z_H), \\quad t = \\sigma(z_T), \\quad y = x + t \\odot (h - x)

and its backward, given ``dy``:

.. math::
    g_H = dy \\odot t \\odot f'(z_H), \\quad
    g_T = dy \\odot (h - x) \\odot t (1 - t), \\quad
    dx_{carry} = dy \\odot (1 - t)

(``[g_H | g_T]`` is the gradient of ``z``; the projection's own backward adds ``g W`` to
``dx_carry``). Written as PyTorch operations this is five to ten kernels, each a pass over memory;
here it is one pass forward (read ``z`` and ``x``, write ``y``) and one backward (read ``dy``,
``z``, ``x``; write ``g`` and ``dx_carry``, and the column sums of ``g``, the bias gradient, so
that nothing reads ``g`` again for it).

:func:`gate_forward` and :func:`gate_backward` run the Triton kernels on CUDA tensors when Triton
is installed, and otherwise the PyTorch reference (:func:`gate_forward_reference`,
:func:`gate_backward_reference`), which the kernels are tested against. Set the environment
variable ``HIGHWAYNET_TRITON=0`` before importing highwaynet to force the reference.

Only activations whose derivative the kernel knows are supported: see :data:`ACTIVATION_CODES`.
A caller saves ``z`` and ``x`` for the backward, which recomputes ``f(z_H)`` and ``t`` (arithmetic,
no memory traffic), or, with ``keep_activations``, has ``z`` overwritten by ``[f(z_H) | t]`` and
recomputes nothing (for recurrences, where the number of small operations is the cost).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from torch import Tensor

from .._versions import release
from ..functional import ACTIVATIONS

try:  # Triton is optional: without it (or without a GPU) the PyTorch reference runs.
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the installation
    triton = None

#: The installed Triton's (major, minor), or None without it.
TRITON_VERSION = release(triton.__version__) if triton is not None else None
if TRITON_VERSION is not None and TRITON_VERSION < (3, 0):  # pragma: no cover
    # The kernels are written in Triton 3's language (torch 2.3's Triton 2.3 rejects them): the
    # reference runs instead, as without Triton.
    triton = None

# Read once, at import: Triton itself reads TRITON_INTERPRET when its kernels are defined, and
# torch.compile in torch 2.3 cannot trace a read of os.environ inside a layer's forward.
_TRITON_OFF = os.environ.get("HIGHWAYNET_TRITON", "1") == "0"
INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"

__all__ = ["ACTIVATION_CODES", "activation_code", "gate_backward", "gate_backward_reference", "gate_forward",
           "gate_forward_reference", "triton_available"]

#: The activations the fused kernels know, by name, and the code the kernels use for each.
ACTIVATION_CODES = {"identity": 0, "relu": 1, "tanh": 2, "sigmoid": 3}
_BY_FUNCTION = {fn: ACTIVATION_CODES[name] for name, fn in ACTIVATIONS.items() if name in ACTIVATION_CODES}
_BY_FUNCTION[torch.relu] = ACTIVATION_CODES["relu"]


def activation_code(activation: str | Callable[[Tensor], Tensor]) -> int | None:
    """The kernels' code of ``activation`` (a name, or a function the package resolves a name to),
    or None when the fused kernels do not know it (then layers take their unfused path)."""
    if isinstance(activation, str):
        return ACTIVATION_CODES.get(activation.lower())
    return _BY_FUNCTION.get(activation)


def triton_available(t: Tensor) -> bool:
    """Whether the Triton kernels will run for tensors like ``t``: CUDA tensors, Triton installed,
    ``HIGHWAYNET_TRITON`` not ``0`` when highwaynet was imported. (Under ``TRITON_INTERPRET=1`` they
    run on CPU tensors too, slowly, which is how the kernels can be checked on a machine without a GPU.)"""
    if triton is None or _TRITON_OFF:
        return False
    return t.is_cuda or INTERPRETING


def first_order_only(layer: str) -> None:
    """Raise where a hand-written backward is asked to record a graph (``create_graph=True``).

    The fused layers' backwards compute their gradients without autograd, so gradients of those
    gradients would silently miss the layer's share; like cuDNN's ``nn.LSTM``, they refuse instead."""
    if torch.is_grad_enabled():
        raise RuntimeError(f"{layer}'s fused path computes gradients of first order only; for gradients "
                           f"of gradients (create_graph=True) build the layer with fused=False")


def transforms_active() -> bool:
    """Whether ``torch.func``'s transforms (``grad``, ``vmap``, ``jvp``, ``jacrev``, ...) or forward-mode
    AD (``torch.autograd.forward_ad``) are running. The fused layers' autograd functions have a
    hand-written backward and nothing else, so under these the layers take their reference paths,
    which are plain PyTorch operations and support them all. (Both checks are PyTorch's private
    ones, as its own ``autograd.Function.apply`` makes; tested on torch 2.3 and 2.13.)"""
    return torch._C._are_functorch_transforms_active() or torch.autograd.forward_ad._current_level >= 0


# -- the reference ------------------------------------------------------------------------------

_BY_CODE = {code: ACTIVATIONS[name] for name, code in ACTIVATION_CODES.items()}


def _activate(z: Tensor, code: int) -> Tensor:
    return _BY_CODE[code](z)


def _activation_grad(h: Tensor, code: int) -> Tensor:
    """``f'`` from ``h = f(z)`` alone: true of each activation the kernels know (relu: ``h > 0``)."""
    if code == 1:
        return (h > 0).to(h.dtype)
    if code == 2:
        return 1 - h * h
    if code == 3:
        return h * (1 - h)
    return torch.ones_like(h)


def gate_forward_reference(z: Tensor, x: Tensor, code: int, keep_activations: bool = False,
                           out: Tensor | None = None) -> Tensor:
    """:func:`gate_forward` with PyTorch operations."""
    zh, zt = z.chunk(2, dim=-1)
    if keep_activations:  # in place: z becomes [h | t]
        h = zh.relu_() if code == 1 else zh.tanh_() if code == 2 else zh.sigmoid_() if code == 3 else zh
        t = zt.sigmoid_()
    else:
        h, t = _activate(zh, code), torch.sigmoid(zt)
    if x.dtype == h.dtype:
        return torch.lerp(x, h, t, out=out)
    dtype = torch.promote_types(h.dtype, x.dtype)
    return torch.lerp(x.to(dtype), h.to(dtype), t.to(dtype), out=out)


def gate_backward_reference(dy: Tensor, z: Tensor, x: Tensor, code: int, grad_z: Tensor | None = None,
                            bias_grad: bool = False, activated: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
    """:func:`gate_backward` with PyTorch operations."""
    zh, zt = z.chunk(2, dim=-1)
    h, t = (zh, zt) if activated else (_activate(zh, code), torch.sigmoid(zt))
    dy_t = dy * t
    g = grad_z if grad_z is not None else z.new_empty(z.shape)
    d = zh.shape[-1]
    torch.mul(dy_t, _activation_grad(h, code), out=g[:, :d])
    torch.mul(dy_t * (h - x), 1 - t, out=g[:, d:])
    return g, dy - dy_t, (g.sum(0, dtype=torch.float32) if bias_grad else None)


# -- the kernels --------------------------------------------------------------------------------

if triton is not None:

    @triton.jit
    def _activate_tl(z, CODE: tl.constexpr):
        if CODE == 1:
            return tl.maximum(z, 0.0)
        elif CODE == 2:
            e = tl.exp(-2.0 * tl.abs(z))  # tanh without overflow: sign(z) (1 - e) / (1 + e)
            r = (1.0 - e) / (1.0 + e)
            return tl.where(z < 0, -r, r)
        elif CODE == 3:
            return tl.sigmoid(z)
        else:
            return z

    @triton.jit
    def _activation_grad_tl(h, CODE: tl.constexpr):
        if CODE == 1:
            return tl.where(h > 0, 1.0, 0.0)
        elif CODE == 2:
            return 1.0 - h * h
        elif CODE == 3:
            return h * (1.0 - h)
        else:
            return tl.full(h.shape, 1.0, tl.float32)

    @triton.jit
    def _gate_grads_tl(dy, h, t, x, CODE: tl.constexpr):
        """The gate's backward from its activations ``h = f(z_H)``, ``t``: ``(g_H, g_T, dx_carry)``."""
        dy_t = dy * t
        return dy_t * _activation_grad_tl(h, CODE), dy_t * (h - x) * (1.0 - t), dy - dy_t

    @triton.jit
    def _gate_forward_kernel(z_ptr, x_ptr, y_ptr, M, D, stride_z, stride_x, stride_y,
                             CODE: tl.constexpr, KEEP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
        cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)[None, :]
        mask = (rows < M) & (cols < D)
        rows = rows.to(tl.int64)
        zh = tl.load(z_ptr + rows * stride_z + cols, mask=mask).to(tl.float32)
        zt = tl.load(z_ptr + rows * stride_z + D + cols, mask=mask).to(tl.float32)
        x = tl.load(x_ptr + rows * stride_x + cols, mask=mask).to(tl.float32)
        h = _activate_tl(zh, CODE)
        t = tl.sigmoid(zt)
        y = x + t * (h - x)
        if KEEP:
            tl.store(z_ptr + rows * stride_z + cols, h.to(z_ptr.dtype.element_ty), mask=mask)
            tl.store(z_ptr + rows * stride_z + D + cols, t.to(z_ptr.dtype.element_ty), mask=mask)
        tl.store(y_ptr + rows * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _gate_backward_kernel(dy_ptr, z_ptr, x_ptr, g_ptr, dx_ptr, bias_ptr, M, D,
                              stride_dy, stride_z, stride_x, stride_g, stride_dx,
                              CODE: tl.constexpr, ACTIVATED: tl.constexpr, BIAS: tl.constexpr, ROWS: tl.constexpr,
                              BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
        # A program walks ROWS rows of one column block, so that the bias gradient's partial sums
        # are few: one row of them per program row.
        pid_m = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)[None, :]
        sum_h = tl.zeros((BLOCK_D,), tl.float32)
        sum_t = tl.zeros((BLOCK_D,), tl.float32)
        for start in range(0, ROWS, BLOCK_M):
            rows = pid_m * ROWS + start + tl.arange(0, BLOCK_M)[:, None]
            mask = (rows < M) & (cols < D)
            rows = rows.to(tl.int64)
            dy = tl.load(dy_ptr + rows * stride_dy + cols, mask=mask, other=0.0).to(tl.float32)
            zh = tl.load(z_ptr + rows * stride_z + cols, mask=mask, other=0.0).to(tl.float32)
            zt = tl.load(z_ptr + rows * stride_z + D + cols, mask=mask, other=0.0).to(tl.float32)
            x = tl.load(x_ptr + rows * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
            if ACTIVATED:
                h = zh
                t = zt
            else:
                h = _activate_tl(zh, CODE)
                t = tl.sigmoid(zt)
            gh, gt, carried = _gate_grads_tl(dy, h, t, x, CODE)
            tl.store(g_ptr + rows * stride_g + cols, gh.to(g_ptr.dtype.element_ty), mask=mask)
            tl.store(g_ptr + rows * stride_g + D + cols, gt.to(g_ptr.dtype.element_ty), mask=mask)
            tl.store(dx_ptr + rows * stride_dx + cols, carried.to(dx_ptr.dtype.element_ty), mask=mask)
            if BIAS:
                sum_h += tl.sum(gh, axis=0)
                sum_t += tl.sum(gt, axis=0)
        if BIAS:
            out = bias_ptr + pid_m * 2 * D + tl.arange(0, BLOCK_D) + tl.program_id(1) * BLOCK_D
            in_range = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D) < D
            tl.store(out, sum_h, mask=in_range)
            tl.store(out + D, sum_t, mask=in_range)


def _blocks(d: int) -> tuple[int, int, int]:
    block_d = min(128, triton.next_power_of_2(d))
    return block_d, max(1, 2048 // block_d), 4  # BLOCK_D, BLOCK_M (about 2048 elements a tile), warps


def _check(z: Tensor, x: Tensor) -> int:
    if z.dim() != 2 or x.dim() != 2 or z.shape[0] != x.shape[0] or z.shape[1] != 2 * x.shape[1]:
        raise ValueError(f"the gate needs z of shape (M, 2D) and x of shape (M, D), "
                         f"got {tuple(z.shape)} and {tuple(x.shape)}")
    return x.shape[1]


def _rows_contiguous(t: Tensor) -> Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def gate_forward(z: Tensor, x: Tensor, code: int, keep_activations: bool = False, out: Tensor | None = None) -> Tensor:
    """``y = x + sigmoid(z_T) * (f(z_H) - x)``, ``z`` ``(M, 2D)``, ``x`` ``(M, D)`` → ``(M, D)``.

    ``y`` has the promoted dtype of ``z`` and ``x``; the arithmetic is float32 in the kernel. With
    ``keep_activations``, ``z`` is overwritten in place with ``[f(z_H) | sigmoid(z_T)]``, for a
    backward called with ``activated=True`` that then recomputes nothing (worth it where
    operations are small and their count is the cost, as in a recurrence). ``out``: where to
    write ``y`` (contiguous rows, not overlapping the inputs), saving a copy where ``y`` belongs
    in a larger buffer.
    """
    d = _check(z, x)
    if out is not None and (out.shape != x.shape or out.stride(-1) != 1):
        raise ValueError(f"out must have x's shape {tuple(x.shape)} and contiguous rows")
    if not triton_available(x):
        return gate_forward_reference(z, x, code, keep_activations, out)
    if keep_activations and z.stride(-1) != 1:
        raise ValueError("keep_activations writes into z: it needs z with contiguous rows")
    z, x = _rows_contiguous(z), _rows_contiguous(x)
    y = out if out is not None else x.new_empty(x.shape, dtype=torch.promote_types(z.dtype, x.dtype))
    block_d, block_m, warps = _blocks(d)
    grid = (triton.cdiv(x.shape[0], block_m), triton.cdiv(d, block_d))
    _gate_forward_kernel[grid](z, x, y, x.shape[0], d, z.stride(0), x.stride(0), y.stride(0),
                               CODE=code, KEEP=keep_activations, BLOCK_M=block_m, BLOCK_D=block_d, num_warps=warps)
    return y


def gate_backward(dy: Tensor, z: Tensor, x: Tensor, code: int, grad_z: Tensor | None = None,
                  bias_grad: bool = False, activated: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
    """The gradient of :func:`gate_forward`: ``(g, dx_carry, bias gradient or None)``.

    ``g`` ``(M, 2D)`` is the gradient of ``z`` (written into ``grad_z`` when given, in ``z``'s dtype
    otherwise), ``dx_carry`` ``(M, D)`` the part of ``x``'s gradient that flows through the carry
    (``dy``'s dtype), and with ``bias_grad`` the column sums of ``g`` in float32. ``activated``:
    ``z`` holds ``[f(z_H) | sigmoid(z_T)]`` (see :func:`gate_forward`'s ``keep_activations``).
    """
    d = _check(z, x)
    if dy.shape != x.shape:
        raise ValueError(f"the gate's backward needs dy of x's shape {tuple(x.shape)}, got {tuple(dy.shape)}")
    if not triton_available(x):
        return gate_backward_reference(dy, z, x, code, grad_z, bias_grad, activated)
    dy, z, x = _rows_contiguous(dy), _rows_contiguous(z), _rows_contiguous(x)
    m = x.shape[0]
    g = grad_z if grad_z is not None else z.new_empty(z.shape)
    dx = torch.empty_like(dy)
    block_d, block_m, warps = _blocks(d)
    rows = block_m * max(1, min(16, m // (block_m * 256)))  # enough programs to fill the GPU
    grid = (triton.cdiv(m, rows), triton.cdiv(d, block_d))
    partial = torch.empty(grid[0], 2 * d, device=x.device, dtype=torch.float32) if bias_grad else g
    _gate_backward_kernel[grid](dy, z, x, g, dx, partial, m, d, dy.stride(0), z.stride(0), x.stride(0),
                                g.stride(0), dx.stride(0), CODE=code, ACTIVATED=activated, BIAS=bias_grad, ROWS=rows,
                                BLOCK_M=block_m, BLOCK_D=block_d, num_warps=warps)
    return g, dx, (partial.sum(0) if bias_grad else None)
