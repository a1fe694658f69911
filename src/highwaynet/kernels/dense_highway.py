"""One dense highway layer with a hand-written backward around the fused gate kernels.

Reference: ``Highway``'s unfused forward (``nn.Linear``, ``chunk``, activation, ``TransformGate``)
under autograd. The values and gradients are the same (tested in float64 on the CPU, and against
the Triton kernels on the GPU); the memory traffic differs. Per layer, for ``M`` rows of width
``D``, autograd's graph makes about seven element-wise passes each way; this layer makes one:

- forward: ``z = x Wᵀ + b`` (one matrix product), then :func:`~highwaynet.kernels.gating.gate_forward`
  reads ``z`` and ``x`` once and writes ``y``. Only ``z`` is saved (autograd saves ``h``, ``t``,
  their product terms and more);
- backward: :func:`~highwaynet.kernels.gating.gate_backward` reads ``dy``, ``z``, ``x`` once and
  writes ``g = dL/dz``, the carry's share of ``dx`` and the bias gradient (the column sums of
  ``g``, so that nothing reads ``g`` again for them); then ``dx += g W`` is one matrix product
  accumulating in place and ``dW = gᵀ x`` another.

Under autocast the products run in the autocast dtype, as ``nn.Linear`` would, and ``y`` takes the
promoted dtype of ``z`` and ``x``, as :func:`highwaynet.functional.highway_combine` does.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .gating import first_order_only, gate_backward, gate_forward

__all__ = ["highway_layer"]


def _autocast_dtype(device_type: str) -> torch.dtype | None:
    try:
        if torch.is_autocast_enabled(device_type):
            return torch.get_autocast_dtype(device_type)
    except TypeError:  # torch < 2.4 takes no device type here: leave the dtypes as they are
        pass
    return None


class _HighwayLayer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, code: int) -> Tensor:
        shape, d = x.shape, x.shape[-1]
        x2 = x.reshape(-1, d)
        dtype = _autocast_dtype(x.device.type) or torch.promote_types(x.dtype, weight.dtype)
        xc, w, b = x2.to(dtype), weight.to(dtype), bias.to(dtype)
        with torch.autocast(x.device.type, enabled=False):
            z = torch.addmm(b, xc, w.t())
        y = gate_forward(z, x2, code)
        ctx.save_for_backward(x2, xc, z, w)
        ctx.code, ctx.shape = code, shape
        ctx.dtypes = (weight.dtype, bias.dtype)
        return y.view(*shape[:-1], d)

    @staticmethod
    def backward(ctx, dy: Tensor):
        first_order_only("Highway")
        x2, xc, z, w = ctx.saved_tensors
        g, dx, db = gate_backward(dy.reshape(-1, x2.shape[-1]), z, x2, ctx.code, bias_grad=True)
        assert db is not None  # (bias_grad=True)
        if dx.dtype == g.dtype:
            dx.addmm_(g, w)          # the carry's share and the projection's, in one product
        else:
            dx += g @ w
        dw = (g.t() @ xc).to(ctx.dtypes[0])
        return dx.to(x2.dtype).view(ctx.shape), dw, db.to(ctx.dtypes[1]), None


def highway_layer(x: Tensor, weight: Tensor, bias: Tensor, code: int) -> Tensor:
    """One coupled-carry dense highway layer: ``y = x + σ(z_T) (f(z_H) − x)``, ``[z_H | z_T] = x Wᵀ + b``.

    Args:
        x: ``(*, D)``.
        weight: ``(2D, D)``, rows ``[H | T]``; bias ``(2D,)``.
        code: the activation ``f`` as a :data:`~highwaynet.kernels.gating.ACTIVATION_CODES` code.
    """
    return _HighwayLayer.apply(x, weight, bias, code)
