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

import enum

import torch
from torch import Tensor

from .._checks import autocast_dtype, check_same_device, check_tensor
from .activations import check_code
from .dispatch import Choice
from .gating import (
    Activation,
    first_order_only,
    fused_gate_backward,
    fused_gate_forward,
    kernel_dtypes_refusal,
    transforms_active,
    triton_available,
)

__all__ = ["DensePath", "choose_path", "highway_layer"]


class DensePath(str, enum.Enum):
    """The ways a :class:`~highwaynet.nn.Highway` stack runs; :func:`choose_path` picks one per call."""

    #: ``nn.Linear``, the activation and :class:`~highwaynet.nn.TransformGate` under autograd.
    UNFUSED = "unfused"
    #: :func:`highway_layer` a layer: the Triton gate kernels around the products, hand-written backward.
    FUSED = "fused gate kernels"


def choose_path(x: Tensor, *, fused: bool, activation: Activation | None, carry: str, dropout_in_training: bool,
                gates_plain: bool, weight: Tensor | None = None) -> Choice[DensePath]:
    """The :class:`DensePath` of a :class:`~highwaynet.nn.Highway` stack for input ``x``, and why.

    The fused path applies on CUDA with Triton, with the coupled carry, an activation the kernels know
    (:class:`~highwaynet.kernels.gating.Activation`), dtypes the kernels compute exactly (not float64:
    :data:`~highwaynet.kernels.gating.KERNEL_DTYPES`), no dropout in training, gates neither recorded nor
    lesioned, not under ``torch.compile`` (which fuses the unfused layers itself) nor ``torch.func``'s
    transforms or forward-mode AD (which need more than a backward). On the CPU the unfused layers
    are the faster and always run.
    """
    if not fused:
        return Choice(DensePath.UNFUSED, "fused=False")
    if torch.compiler.is_compiling():
        return Choice(DensePath.UNFUSED, "torch.compile fuses the unfused layers itself")
    if not triton_available(x):
        return Choice(DensePath.UNFUSED, "no Triton for this tensor (the CPU, or Triton not installed)")
    refusal = kernel_dtypes_refusal(x, weight)
    if refusal is not None:
        return Choice(DensePath.UNFUSED, refusal)
    if activation is None:
        return Choice(DensePath.UNFUSED, "an activation the fused kernels do not know (they know "
                                         + ", ".join(a.name.lower() for a in Activation) + ")")
    if carry != "coupled":
        return Choice(DensePath.UNFUSED, f"the fused kernels are written for the coupled carry, not carry={carry!r}")
    if dropout_in_training:
        return Choice(DensePath.UNFUSED, "dropout in training")
    if not gates_plain:
        return Choice(DensePath.UNFUSED, "its gates are being recorded or are lesioned (highwaynet.analysis)")
    if transforms_active():
        return Choice(DensePath.UNFUSED, "torch.func transforms or forward-mode AD need more than the fused backward")
    return Choice(DensePath.FUSED, "a CUDA tensor with Triton, and nothing that needs the unfused layers")


class _HighwayLayer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, code: Activation) -> Tensor:
        shape, d = x.shape, x.shape[-1]
        x2 = x.reshape(-1, d)
        dtype = autocast_dtype(x.device.type) or torch.promote_types(x.dtype, weight.dtype)
        xc, w, b = x2.to(dtype), weight.to(dtype), bias.to(dtype)
        with torch.autocast(x.device.type, enabled=False):
            z = torch.addmm(b, xc, w.t())
        y = fused_gate_forward(z, x2, code)
        ctx.save_for_backward(x2, xc, z, w)
        ctx.code, ctx.shape = code, shape
        ctx.dtypes = (weight.dtype, bias.dtype)
        return y.view(*shape[:-1], d)

    @staticmethod
    def backward(ctx, dy: Tensor):
        first_order_only("Highway")
        x2, xc, z, w = ctx.saved_tensors
        g, dx, db = fused_gate_backward(dy.reshape(-1, x2.shape[-1]), z, x2, ctx.code, bias_grad=True)
        assert db is not None  # (bias_grad=True)
        if dx.dtype == g.dtype:
            dx.addmm_(g, w)          # the carry's share and the projection's, in one product
        else:
            dx += g @ w
        dw = (g.t() @ xc).to(ctx.dtypes[0])
        return dx.to(x2.dtype).view(ctx.shape), dw, db.to(ctx.dtypes[1]), None


def highway_layer(x: Tensor, weight: Tensor, bias: Tensor, code: Activation) -> Tensor:
    """One coupled-carry dense highway layer: ``y = x + σ(z_T) (f(z_H) − x)``, ``[z_H | z_T] = x Wᵀ + b``.

    Args:
        x: ``(*, D)``.
        weight: ``(2D, D)``, rows ``[H | T]``; bias ``(2D,)``.
        code: the activation ``f``, an :class:`~highwaynet.kernels.gating.Activation`.

    The products run in the promoted dtype of ``x`` and ``weight`` (under autocast, the autocast dtype).

    Raises:
        TypeError: ``x``, ``weight`` or ``bias`` not a floating-point tensor, ``code`` not an
            :class:`~highwaynet.kernels.gating.Activation`.
        ValueError: ``x`` without a feature (0 dimensions, or ``D = 0``), ``weight`` or ``bias`` not of
            the shapes above, tensors on different devices.
    """
    x, weight, bias = check_tensor("x", x), check_tensor("weight", weight), check_tensor("bias", bias)
    if x.dim() == 0 or x.shape[-1] == 0:
        raise ValueError(f"x must be (*, D) with D >= 1 features, got shape {tuple(x.shape)}")
    d = x.shape[-1]
    if weight.shape != (2 * d, d):
        raise ValueError(f"weight must be (2D, D) = ({2 * d}, {d}) for x of shape {tuple(x.shape)}, "
                         f"got {tuple(weight.shape)}")
    if bias.shape != (2 * d,):
        raise ValueError(f"bias must be (2D,) = ({2 * d},), got {tuple(bias.shape)}")
    check_same_device("x", x, weight=weight, bias=bias)
    return _HighwayLayer.apply(x, weight, bias, check_code(code))
