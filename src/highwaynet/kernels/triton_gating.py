"""The highway gate's Triton kernels, forward and backward: what :mod:`.gating` runs on a GPU.

Imported only where a kernel is about to run (a CUDA tensor, or the CPU under
``TRITON_INTERPRET=1``), so that ``import highwaynet`` never loads Triton. The maths and the
PyTorch reference they are tested against are in :mod:`.gating`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .activations import Activation

__all__ = ["gate_backward", "gate_forward"]

# The activation codes as Triton constants (a kernel reads only globals declared constexpr).
IDENTITY: tl.constexpr = tl.constexpr(int(Activation.IDENTITY))
RELU: tl.constexpr = tl.constexpr(int(Activation.RELU))
TANH: tl.constexpr = tl.constexpr(int(Activation.TANH))
SIGMOID: tl.constexpr = tl.constexpr(int(Activation.SIGMOID))


@triton.jit
def _activate_tl(z, CODE: tl.constexpr):
    if CODE == RELU:
        return tl.maximum(z, 0.0)
    elif CODE == TANH:
        e = tl.exp(-2.0 * tl.abs(z))  # tanh without overflow: sign(z) (1 - e) / (1 + e)
        r = (1.0 - e) / (1.0 + e)
        return tl.where(z < 0, -r, r)
    elif CODE == SIGMOID:
        return tl.sigmoid(z)
    else:
        return z


@triton.jit
def _activation_grad_tl(h, CODE: tl.constexpr):
    if CODE == RELU:
        return tl.where(h > 0, 1.0, 0.0)
    elif CODE == TANH:
        return 1.0 - h * h
    elif CODE == SIGMOID:
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


def _rows_contiguous(t: Tensor) -> Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def gate_forward(z: Tensor, x: Tensor, code: int, keep_activations: bool, out: Tensor | None) -> Tensor:
    """:func:`.gating.gate_forward` on the GPU (its arguments checked there)."""
    if keep_activations and z.stride(-1) != 1:
        raise ValueError("keep_activations writes into z: it needs z with contiguous rows")
    d = x.shape[1]
    z, x = _rows_contiguous(z), _rows_contiguous(x)
    y = out if out is not None else x.new_empty(x.shape, dtype=torch.promote_types(z.dtype, x.dtype))
    block_d, block_m, warps = _blocks(d)
    grid = (triton.cdiv(x.shape[0], block_m), triton.cdiv(d, block_d))
    _gate_forward_kernel[grid](z, x, y, x.shape[0], d, z.stride(0), x.stride(0), y.stride(0),
                               CODE=int(code), KEEP=keep_activations, BLOCK_M=block_m, BLOCK_D=block_d,
                               num_warps=warps)
    return y


def gate_backward(dy: Tensor, z: Tensor, x: Tensor, code: int, grad_z: Tensor | None, bias_grad: bool,
                  activated: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """:func:`.gating.gate_backward` on the GPU (its arguments checked there)."""
    d = x.shape[1]
    dy, z, x = _rows_contiguous(dy), _rows_contiguous(z), _rows_contiguous(x)
    m = x.shape[0]
    g = grad_z if grad_z is not None else z.new_empty(z.shape)
    dx = torch.empty_like(dy)
    block_d, block_m, warps = _blocks(d)
    rows = block_m * max(1, min(16, m // (block_m * 256)))  # enough programs to fill the GPU
    grid = (triton.cdiv(m, rows), triton.cdiv(d, block_d))
    partial = torch.empty(grid[0], 2 * d, device=x.device, dtype=torch.float32) if bias_grad else g
    _gate_backward_kernel[grid](dy, z, x, g, dx, partial, m, d, dy.stride(0), z.stride(0), x.stride(0),
                                g.stride(0), dx.stride(0), CODE=int(code), ACTIVATED=activated, BIAS=bias_grad,
                                ROWS=rows, BLOCK_M=block_m, BLOCK_D=block_d, num_warps=warps)
    return g, dx, (partial.sum(0) if bias_grad else None)
