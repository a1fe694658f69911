r"""The persistent recurrence kernels in Triton: a whole window a launch (design and limits: :mod:`.persistent`).

- :func:`rhn_forward`: every micro-step of an RHN layer's window (coupled or independent carry):

  .. math::
      z = (s \odot m) R_d^\top + b_d + [d = 0]\, x_t, \quad h = \tanh z_H, \quad t = \sigma(z_T),
      \quad s' = s + t (h - s) \ \text{(coupled)}, \quad s' = h t + s\, \sigma(z_C) \ \text{(independent)}

  writing every state and each micro-step's activations ``[h | t (| c)]`` for the backward;
- :func:`rhn_backward`: the walk back over the same micro-steps, given the states' gradient,
  writing each micro-step's ``dz`` (from which the weights' gradients are one product per
  micro-layer afterwards, :func:`rhn_gradients`) and the initial state's gradient;
- :func:`lstmp_forward`: an LSTM with projection and clipping (TensorFlow's ``LSTMCell`` with
  ``num_proj``, as ELMo's biLM; the maths in :mod:`.lstmp`), over a padded batch too (per-row
  lengths: a row past its own holds its state and outputs 0, as ``dynamic_rnn``'s).

Each program owns a fixed set of tiles (``BLOCK_B`` rows by ``BLOCK_N`` units); a grid-wide barrier
separates the phases that read what other programs wrote (see :mod:`.persistent`). Those reads
bypass the SM's L1 cache (``.cg``), which other SMs' writes do not update. All arithmetic is
float32; the products accumulate in float32, their operands in the tensors' dtype (float32
products exact unless TF32 is allowed, as for ``torch.mm``). Under ``TRITON_INTERPRET=1`` the
operands are widened to float32 first (the interpreter multiplies bfloat16 values as the integers
that hold them), which gives the same products: a bfloat16 product is exact in float32.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from .gating import INTERPRETING
from .persistent import Tiles, default_tiles, programs_for
from .triton_gating import TANH, _activate_tl

__all__ = ["lstmp_forward", "rhn_backward", "rhn_forward", "rhn_gradients"]


@triton.jit
def _grid_barrier(counter_ptr, target):
    """Wait until the counter reaches ``target``: every program adds one at each barrier, so the
    ``n``-th barrier of a grid of ``P`` programs waits for ``n · P``. The block's own threads first
    finish their stores (``debug_barrier``); the counter's release and acquire order them before
    the other programs' loads."""
    tl.debug_barrier()
    arrived = tl.atomic_add(counter_ptr, 1, sem="acq_rel", scope="gpu") + 1
    while arrived < target:
        arrived = tl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()


@triton.jit
def _tile(tile, n_cols, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr):
    """Tile number ``tile``'s rows ``(BLOCK_B, 1)`` and columns ``(1, BLOCK_N)``, row tiles outer."""
    rows = (tile // n_cols) * BLOCK_B + tl.arange(0, BLOCK_B)[:, None]
    cols = (tile % n_cols) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    return rows, cols


@triton.jit
def _dot(a, b, acc, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    if UPCAST:  # (the interpreter: see the module's docstring)
        a, b = a.to(tl.float32), b.to(tl.float32)
    return tl.dot(a, b, acc, input_precision=PRECISION)


@triton.jit
def _rhn_forward_kernel(x_ptr, w_ptr, b_ptr, mask_ptr, states_ptr, z_ptr, counter_ptr, T, B, H, DEPTH,
                        PARTS: tl.constexpr, HAS_MASK: tl.constexpr, PRECISION: tl.constexpr,
                        UPCAST: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr):
    pid, programs = tl.program_id(0), tl.num_programs(0)
    n_cols = tl.cdiv(H, BLOCK_N)
    tiles = tl.cdiv(B, BLOCK_B) * n_cols
    width = PARTS * H  # a row of x_proj and of z; R_d has as many rows
    ks = tl.arange(0, BLOCK_K)
    for k in range(0, T * DEPTH):
        t = k // DEPTH
        d = k - t * DEPTH
        s_in = states_ptr + tl.cast(k, tl.int64) * B * H
        s_out = s_in + B * H
        z_k = z_ptr + tl.cast(k, tl.int64) * B * width
        w_d = w_ptr + d * width * H
        for tile in range(pid, tiles, programs):
            rows, cols = _tile(tile, n_cols, BLOCK_B, BLOCK_N)
            acc_h = tl.zeros((BLOCK_B, BLOCK_N), tl.float32)
            acc_t = tl.zeros((BLOCK_B, BLOCK_N), tl.float32)
            acc_c = tl.zeros((BLOCK_B, BLOCK_N), tl.float32)
            for k0 in range(0, H, BLOCK_K):
                kc, kr = k0 + ks[None, :], k0 + ks[:, None]
                # the whole previous state, which other programs wrote: past L1
                a = tl.load(s_in + rows * H + kc, mask=(rows < B) & (kc < H), other=0.0, cache_modifier=".cg")
                if HAS_MASK:  # (s ⊙ m rounded to the state's dtype, as PyTorch's product; in float32 first,
                    # which the interpreter needs: it multiplies bfloat16 values as integers)
                    m = tl.load(mask_ptr + rows * H + kc, mask=(rows < B) & (kc < H), other=0.0)
                    a = (a.to(tl.float32) * m.to(tl.float32)).to(a.dtype)
                # R_d[n, k] read as the (k, n) tile of R_dᵀ: this tile's rows of each part
                in_w = (kr < H) & (cols < H)
                acc_h = _dot(a, tl.load(w_d + cols * H + kr, mask=in_w, other=0.0), acc_h, PRECISION, UPCAST)
                acc_t = _dot(a, tl.load(w_d + (H + cols) * H + kr, mask=in_w, other=0.0), acc_t, PRECISION, UPCAST)
                if PARTS == 3:
                    acc_c = _dot(a, tl.load(w_d + (2 * H + cols) * H + kr, mask=in_w, other=0.0), acc_c,
                                 PRECISION, UPCAST)
            inside = (rows < B) & (cols < H)
            b_d = b_ptr + d * width + cols
            z_h = acc_h + tl.load(b_d, mask=cols < H, other=0.0).to(tl.float32)
            z_t = acc_t + tl.load(b_d + H, mask=cols < H, other=0.0).to(tl.float32)
            z_c = acc_c
            if PARTS == 3:
                z_c += tl.load(b_d + 2 * H, mask=cols < H, other=0.0).to(tl.float32)
            if d == 0:  # the step's input projection, hoisted out of the window (one product)
                x_t = x_ptr + tl.cast(t, tl.int64) * B * width + rows * width + cols
                z_h += tl.load(x_t, mask=inside, other=0.0).to(tl.float32)
                z_t += tl.load(x_t + H, mask=inside, other=0.0).to(tl.float32)
                if PARTS == 3:
                    z_c += tl.load(x_t + 2 * H, mask=inside, other=0.0).to(tl.float32)
            h = _activate_tl(z_h, TANH)
            gate = tl.sigmoid(z_t)
            s = tl.load(s_in + rows * H + cols, mask=inside, other=0.0, cache_modifier=".cg").to(tl.float32)
            kind = z_ptr.dtype.element_ty
            tl.store(z_k + rows * width + cols, h.to(kind), mask=inside)
            tl.store(z_k + rows * width + H + cols, gate.to(kind), mask=inside)
            if PARTS == 3:
                carry = tl.sigmoid(z_c)
                tl.store(z_k + rows * width + 2 * H + cols, carry.to(kind), mask=inside)
                new = h * gate + s * carry
            else:
                new = s + gate * (h - s)
            tl.store(s_out + rows * H + cols, new.to(states_ptr.dtype.element_ty), mask=inside)
        if k < T * DEPTH - 1:
            _grid_barrier(counter_ptr, (k + 1) * programs)


@triton.jit
def _rhn_backward_kernel(grad_ptr, z_ptr, states_ptr, w_ptr, mask_ptr, dz_ptr, g_ptr, carried_ptr, counter_ptr,
                         T, B, H, DEPTH, PARTS: tl.constexpr, HAS_MASK: tl.constexpr, PRECISION: tl.constexpr,
                         UPCAST: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr):
    pid, programs = tl.program_id(0), tl.num_programs(0)
    n_cols = tl.cdiv(H, BLOCK_N)
    tiles = tl.cdiv(B, BLOCK_B) * n_cols
    width = PARTS * H
    ks = tl.arange(0, BLOCK_K)
    for i in range(0, T * DEPTH):
        k = T * DEPTH - 1 - i
        t = k // DEPTH
        d = k - t * DEPTH
        z_k = z_ptr + tl.cast(k, tl.int64) * B * width
        dz_k = dz_ptr + tl.cast(k, tl.int64) * B * width
        s_k = states_ptr + tl.cast(k, tl.int64) * B * H
        # 1. The gate's backward on this program's columns: g (the gradient of the micro-step's new
        # state, kept in float32) gives dz and what the carry passes on.
        for tile in range(pid, tiles, programs):
            rows, cols = _tile(tile, n_cols, BLOCK_B, BLOCK_N)
            inside = (rows < B) & (cols < H)
            g = tl.load(g_ptr + rows * H + cols, mask=inside, other=0.0)
            if d == DEPTH - 1:  # a time step's last micro-step: its state is the layer's output
                g += tl.load(grad_ptr + tl.cast(t, tl.int64) * B * H + rows * H + cols, mask=inside,
                             other=0.0).to(tl.float32)
            h = tl.load(z_k + rows * width + cols, mask=inside, other=0.0).to(tl.float32)
            gate = tl.load(z_k + rows * width + H + cols, mask=inside, other=0.0).to(tl.float32)
            g_gate = g * gate
            dz_h = g_gate * (1.0 - h * h)
            kind = dz_ptr.dtype.element_ty
            if PARTS == 3:
                carry = tl.load(z_k + rows * width + 2 * H + cols, mask=inside, other=0.0).to(tl.float32)
                s = tl.load(s_k + rows * H + cols, mask=inside, other=0.0).to(tl.float32)
                dz_t = g_gate * h * (1.0 - gate)
                tl.store(dz_k + rows * width + 2 * H + cols, (g * s * carry * (1.0 - carry)).to(kind), mask=inside)
                carried = g * carry
            else:
                s = tl.load(s_k + rows * H + cols, mask=inside, other=0.0).to(tl.float32)
                dz_t = g_gate * (h - s) * (1.0 - gate)
                carried = g - g_gate
            tl.store(dz_k + rows * width + cols, dz_h.to(kind), mask=inside)
            tl.store(dz_k + rows * width + H + cols, dz_t.to(kind), mask=inside)
            tl.store(carried_ptr + rows * H + cols, carried, mask=inside)
        _grid_barrier(counter_ptr, (i + 1) * programs)
        # 2. The gradient of the micro-step's input state on this program's columns:
        # carried + (dz R_d) ⊙ m, which reads every column of dz.
        w_d = w_ptr + d * width * H
        for tile in range(pid, tiles, programs):
            rows, cols = _tile(tile, n_cols, BLOCK_B, BLOCK_N)
            acc = tl.zeros((BLOCK_B, BLOCK_N), tl.float32)
            for j0 in range(0, H, BLOCK_K):
                jc, jr = j0 + ks[None, :], j0 + ks[:, None]
                in_dz, in_w = (rows < B) & (jc < H), (jr < H) & (cols < H)
                for p in tl.static_range(PARTS):
                    dz = tl.load(dz_k + rows * width + p * H + jc, mask=in_dz, other=0.0, cache_modifier=".cg")
                    w = tl.load(w_d + (p * H + jr) * H + cols, mask=in_w, other=0.0)
                    acc = _dot(dz, w, acc, PRECISION, UPCAST)
            inside = (rows < B) & (cols < H)
            if HAS_MASK:
                acc *= tl.load(mask_ptr + rows * H + cols, mask=inside, other=0.0).to(tl.float32)
            g = tl.load(carried_ptr + rows * H + cols, mask=inside, other=0.0) + acc
            tl.store(g_ptr + rows * H + cols, g, mask=inside)
        # (the next micro-step's step 1 reads g and writes `carried` on this program's tiles, maybe
        # through other threads of the block: its stores must be done first)
        tl.debug_barrier()


@triton.jit
def _lstmp_forward_kernel(x_ptr, wh_ptr, wp_ptr, out_ptr, h_ptr, c_ptr, m_ptr, len_ptr, counter_ptr, T, B, C, P,
                          forget_bias, cell_clip, proj_clip, CELL_CLIP: tl.constexpr, PROJ_CLIP: tl.constexpr,
                          HAS_LENGTHS: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                          BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid, programs = tl.program_id(0), tl.num_programs(0)
    n_b = tl.cdiv(B, BLOCK_B)
    n_cells, n_proj = tl.cdiv(C, BLOCK_N), tl.cdiv(P, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    for t in range(0, T):
        x_t = x_ptr + tl.cast(t, tl.int64) * B * 4 * C
        # 1. The gates i, j, f, o (TensorFlow's order) and the cell on this program's cell units.
        for tile in range(pid, n_b * n_cells, programs):
            rows, cols = _tile(tile, n_cells, BLOCK_B, BLOCK_N)
            acc_i = tl.zeros((BLOCK_B, BLOCK_N), tl.float32)
            acc_j = tl.zeros((BLOCK_B, BLOCK_N), tl.float32)
            acc_f = tl.zeros((BLOCK_B, BLOCK_N), tl.float32)
            acc_o = tl.zeros((BLOCK_B, BLOCK_N), tl.float32)
            for k0 in range(0, P, BLOCK_K):
                kc, kr = k0 + ks[None, :], k0 + ks[:, None]
                # the whole previous output, which other programs wrote: past L1
                a = tl.load(h_ptr + rows * P + kc, mask=(rows < B) & (kc < P), other=0.0, cache_modifier=".cg")
                in_w = (kr < P) & (cols < C)
                acc_i = _dot(a, tl.load(wh_ptr + cols * P + kr, mask=in_w, other=0.0), acc_i, PRECISION, UPCAST)
                acc_j = _dot(a, tl.load(wh_ptr + (C + cols) * P + kr, mask=in_w, other=0.0), acc_j, PRECISION, UPCAST)
                acc_f = _dot(a, tl.load(wh_ptr + (2 * C + cols) * P + kr, mask=in_w, other=0.0), acc_f,
                             PRECISION, UPCAST)
                acc_o = _dot(a, tl.load(wh_ptr + (3 * C + cols) * P + kr, mask=in_w, other=0.0), acc_o,
                             PRECISION, UPCAST)
            inside = (rows < B) & (cols < C)
            x_row = x_t + rows * 4 * C + cols  # the step's input products and bias, hoisted
            i = acc_i + tl.load(x_row, mask=inside, other=0.0).to(tl.float32)
            j = acc_j + tl.load(x_row + C, mask=inside, other=0.0).to(tl.float32)
            f = acc_f + tl.load(x_row + 2 * C, mask=inside, other=0.0).to(tl.float32)
            o = acc_o + tl.load(x_row + 3 * C, mask=inside, other=0.0).to(tl.float32)
            c = tl.load(c_ptr + rows * C + cols, mask=inside, other=0.0)  # float32, this program's own
            c_new = tl.sigmoid(f + forget_bias) * c + tl.sigmoid(i) * _activate_tl(j, TANH)
            if CELL_CLIP:
                c_new = tl.minimum(tl.maximum(c_new, -cell_clip), cell_clip)
            m = tl.sigmoid(o) * _activate_tl(c_new, TANH)  # (a row past its length: unused, its output is 0)
            if HAS_LENGTHS:  # a row past its length holds its cell
                c_new = tl.where(t < tl.load(len_ptr + rows, mask=rows < B, other=0), c_new, c)
            tl.store(c_ptr + rows * C + cols, c_new, mask=inside)
            tl.store(m_ptr + rows * C + cols, m.to(m_ptr.dtype.element_ty), mask=inside)
        _grid_barrier(counter_ptr, (2 * t + 1) * programs)
        # 2. The projection h = m W_Pᵀ on this program's output units, which reads every cell's m.
        for tile in range(pid, n_b * n_proj, programs):
            rows, cols = _tile(tile, n_proj, BLOCK_B, BLOCK_N)
            acc = tl.zeros((BLOCK_B, BLOCK_N), tl.float32)
            for k0 in range(0, C, BLOCK_K):
                kc, kr = k0 + ks[None, :], k0 + ks[:, None]
                a = tl.load(m_ptr + rows * C + kc, mask=(rows < B) & (kc < C), other=0.0, cache_modifier=".cg")
                w = tl.load(wp_ptr + cols * C + kr, mask=(kr < C) & (cols < P), other=0.0)
                acc = _dot(a, w, acc, PRECISION, UPCAST)
            if PROJ_CLIP:
                acc = tl.minimum(tl.maximum(acc, -proj_clip), proj_clip)
            inside = (rows < B) & (cols < P)
            h_new = acc.to(h_ptr.dtype.element_ty)
            out = h_new
            if HAS_LENGTHS:  # a row past its length keeps its state h and outputs 0
                running = t < tl.load(len_ptr + rows, mask=rows < B, other=0)
                held = tl.load(h_ptr + rows * P + cols, mask=inside, other=0.0, cache_modifier=".cg")
                h_new = tl.where(running, h_new, held)
                out = tl.where(running, out, 0.0)
            # (every program read all of h in phase 1, before the barrier: this program's tiles may change)
            tl.store(h_ptr + rows * P + cols, h_new, mask=inside)
            tl.store(out_ptr + tl.cast(t, tl.int64) * B * P + rows * P + cols, out.to(out_ptr.dtype.element_ty),
                     mask=inside)
        if t < T - 1:
            _grid_barrier(counter_ptr, (2 * t + 2) * programs)


@functools.cache
def _cooperative() -> dict[str, Any]:
    """The launch option that makes CUDA refuse a grid whose programs cannot all be resident at once
    (an error, where the barrier would wait for ever: under MPS with a share of the SMs, say), where
    this Triton has it (``launch_cooperative_grid``, Triton 3.2 on); else nothing: then the grid's
    size, at most one program per SM, is the only guarantee."""
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
    except ImportError:  # pragma: no cover - depends on the installation
        return {}
    return {"launch_cooperative_grid": True} if "launch_cooperative_grid" in CUDAOptions.__dataclass_fields__ else {}


def _precision(dtype: torch.dtype) -> str:
    return "tf32" if dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32 else "ieee"


def _launch_shape(batch: int, units: int, device: torch.device, tiles: Tiles | None,
                  programs: int | None) -> tuple[Tiles, int]:
    tiles = (tiles or default_tiles(batch)).check()
    count = triton.cdiv(batch, tiles.block_b) * triton.cdiv(units, tiles.block_n)
    return tiles, programs_for(count, device, programs)


def _stacked(tensors: list[Tensor], dtype: torch.dtype) -> Tensor:
    return torch.stack([t.to(dtype) for t in tensors])


def rhn_forward(x_proj: Tensor, s0: Tensor, mask: Tensor | None, weights: list[Tensor], biases: list[Tensor], *,
                tiles: Tiles | None = None, programs: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """An RHN layer's window in one launch: all states ``(T, B, H)``, then for :func:`rhn_backward` each
    micro-step's ``[h | t (| c)]`` ``(T·L, B, P·H)`` and its input states ``(T·L + 1, B, H)``.

    ``x_proj`` ``(T, B, P·H)`` (``P = 2``: the coupled carry; ``3``: independent), ``s0`` ``(B, H)``,
    ``mask`` ``(B, H)`` or None, micro-layer ``d``'s ``R_d`` ``(P·H, H)`` and ``b_d`` ``(P·H,)``.
    ``tiles`` and ``programs``: see :class:`~.persistent.Tiles` and :func:`~.persistent.programs_for`."""
    steps, batch, width = x_proj.shape
    hidden, depth = s0.shape[1], len(weights)
    tiles, grid = _launch_shape(batch, hidden, x_proj.device, tiles, programs)
    states = x_proj.new_empty(steps * depth + 1, batch, hidden)
    states[0] = s0
    z = x_proj.new_empty(steps * depth, batch, width)
    counter = torch.zeros(1, dtype=torch.int32, device=x_proj.device)
    _rhn_forward_kernel[(grid,)](
        x_proj.contiguous(), _stacked(weights, x_proj.dtype), _stacked(biases, x_proj.dtype),
        mask.contiguous() if mask is not None else s0, states, z, counter, steps, batch, hidden, depth,
        PARTS=width // hidden, HAS_MASK=mask is not None, PRECISION=_precision(x_proj.dtype), UPCAST=INTERPRETING,
        BLOCK_B=tiles.block_b, BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k, num_warps=tiles.warps, **_cooperative())
    return states[depth::depth].clone(), z, states


def rhn_backward(grad_out: Tensor, z: Tensor, states: Tensor, mask: Tensor | None, weights: list[Tensor], *,
                 tiles: Tiles | None = None, programs: int | None = None) -> tuple[Tensor, Tensor]:
    """The walk back over :func:`rhn_forward`'s window in one launch: each micro-step's ``dz``
    ``(T·L, B, P·H)`` (in ``z``'s dtype) and the initial state's gradient ``(B, H)``, from the states'
    gradient ``grad_out`` ``(T, B, H)``."""
    steps, batch, hidden = grad_out.shape
    depth, width = len(weights), z.shape[-1]
    tiles, grid = _launch_shape(batch, hidden, z.device, tiles, programs)
    dz = torch.empty_like(z)
    g = torch.zeros(batch, hidden, dtype=torch.float32, device=z.device)  # the state's gradient, in float32
    carried = torch.empty_like(g)
    counter = torch.zeros(1, dtype=torch.int32, device=z.device)
    _rhn_backward_kernel[(grid,)](
        grad_out.contiguous(), z, states, _stacked(weights, z.dtype), mask.contiguous() if mask is not None else g,
        dz, g, carried, counter, steps, batch, hidden, depth, PARTS=width // hidden, HAS_MASK=mask is not None,
        PRECISION=_precision(z.dtype), UPCAST=INTERPRETING, BLOCK_B=tiles.block_b, BLOCK_N=tiles.block_n,
        BLOCK_K=tiles.block_k, num_warps=tiles.warps, **_cooperative())
    return dz, g.to(z.dtype)


def rhn_gradients(dz: Tensor, states: Tensor, mask: Tensor | None, depth: int) -> list[Tensor]:
    """The gradients ``[x_proj, *weights, *biases]`` from :func:`rhn_backward`'s ``dz`` and the input
    states: one product over all ``T·B`` rows per micro-layer."""
    micro_steps, batch, width = dz.shape
    steps, hidden = micro_steps // depth, states.shape[-1]
    by_layer = dz.view(steps, depth, batch, width)
    inputs = states[:-1].view(steps, depth, batch, hidden)
    grad_w, grad_b = [], []
    for d in range(depth):
        u = inputs[:, d] if mask is None else inputs[:, d] * mask
        rows = by_layer[:, d].reshape(steps * batch, width)
        grad_w.append(rows.t() @ u.reshape(steps * batch, hidden))
        grad_b.append(rows.sum(0))
    return [by_layer[:, 0], *grad_w, *grad_b]


def lstmp_forward(x_proj: Tensor, h0: Tensor, c0: Tensor, w_h: Tensor, w_p: Tensor, forget_bias: float,
                  cell_clip: float | None, proj_clip: float | None, lengths: Tensor | None = None, *,
                  tiles: Tiles | None = None, programs: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """An LSTM-with-projection window in one launch: the outputs ``(T, B, P)``, the final output (the
    recurrent state) ``(B, P)`` and the final cell ``(B, C)``. ``x_proj`` ``(T, B, 4C)`` is each step's
    input term (gates i, j, f, o), ``w_h`` ``(4C, P)`` and ``w_p`` ``(P, C)`` the recurrent and
    projection weights; ``forget_bias`` is added to ``f`` (0 where the caller folded it into ``x_proj``,
    as :func:`.lstmp.lstmp_recurrence` does, which checks the arguments). ``lengths`` ``(B,)``: the
    steps each row runs, in ``0..T`` (past them a row holds its state and outputs 0, as TensorFlow's
    ``dynamic_rnn`` with ``sequence_length``; the final state is each row's at its own end), or None:
    every row all ``T``."""
    steps, batch, _ = x_proj.shape
    cells, proj = c0.shape[1], h0.shape[1]
    tiles, grid = _launch_shape(batch, max(cells, proj), x_proj.device, tiles, programs)
    out = x_proj.new_empty(steps, batch, proj)
    h = h0.to(x_proj.dtype, copy=True).contiguous()  # the recurrent state, in the outputs' dtype
    c = c0.to(torch.float32, copy=True).contiguous()
    m = x_proj.new_empty(batch, cells)
    counter = torch.zeros(1, dtype=torch.int32, device=x_proj.device)
    _lstmp_forward_kernel[(grid,)](
        x_proj.contiguous(), w_h.to(x_proj.dtype).contiguous(), w_p.to(x_proj.dtype).contiguous(), out, h, c, m,
        lengths.to(torch.int32).contiguous() if lengths is not None else counter, counter, steps, batch, cells,
        proj, float(forget_bias), float(cell_clip or 0.0), float(proj_clip or 0.0), CELL_CLIP=cell_clip is not None,
        PROJ_CLIP=proj_clip is not None, HAS_LENGTHS=lengths is not None, PRECISION=_precision(x_proj.dtype),
        UPCAST=INTERPRETING, BLOCK_B=tiles.block_b, BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k,
        num_warps=tiles.warps, **_cooperative())
    return out, h, c.to(c0.dtype)
