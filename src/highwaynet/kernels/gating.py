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

:func:`gate_forward` and :func:`gate_backward` run the Triton kernels (:mod:`.triton_gating`,
imported on first use) on CUDA tensors when Triton is installed, and otherwise the PyTorch
reference (:func:`gate_forward_reference`, :func:`gate_backward_reference`), which the kernels are
tested against. Set the environment variable ``HIGHWAYNET_TRITON=0`` before importing highwaynet
to force the reference.

Only activations whose derivative the kernel knows are supported: see :class:`Activation`.
A caller saves ``z`` and ``x`` for the backward, which recomputes ``f(z_H)`` and ``t`` (arithmetic,
no memory traffic), or, with ``keep_activations``, has ``z`` overwritten by ``[f(z_H) | t]`` and
recomputes nothing (for recurrences, where the number of small operations is the cost).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from types import ModuleType

import torch
from torch import Tensor

from .._checks import check_flag, check_same_device, check_tensor
from .._versions import release
from ..functional import ACTIVATIONS
from .activations import ACTIVATION_CODES, Activation, activation_code, check_code

# Read once, at import: Triton itself reads TRITON_INTERPRET when its kernels are defined, and
# torch.compile in torch 2.3 cannot trace a read of os.environ inside a layer's forward.
_TRITON_OFF = os.environ.get("HIGHWAYNET_TRITON", "1") == "0"
INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"

__all__ = ["ACTIVATION_CODES", "KERNEL_DTYPES", "Activation", "activation_code", "fused_gate_backward",
           "fused_gate_forward", "gate_backward", "gate_backward_reference", "gate_forward", "gate_forward_reference",
           "kernel_dtypes_refusal", "triton_available", "triton_version"]

#: The dtypes the Triton kernels compute exactly: they load these and do their arithmetic in float32
#: (as precise as the reference for float32, more so for the half types). Anything else, float64 first,
#: runs the PyTorch reference, which computes in the tensors' own dtype.
KERNEL_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})


def _constant_when_compiled(fn: Callable) -> Callable:
    """Mark ``fn`` as ``torch.compiler.assume_constant_result`` does: ``torch.compile`` calls it once,
    while tracing, and keeps the result. (That function imports the whole compiler, a second on a small
    CPU, to set this one attribute; ``import highwaynet`` must stay cheap. ``tests/test_compile.py``
    checks that compiling still works through the functions marked so.)"""
    fn._dynamo_marked_constant = True  # type: ignore[attr-defined]
    return fn


@_constant_when_compiled
@functools.cache
def _triton() -> ModuleType | None:
    """Triton, imported on first use; None where it is missing or older than 3.0 (whose language the
    kernels are not written in: torch 2.3's Triton 2.3 rejects them), so that the reference runs."""
    try:
        import triton
    except ImportError:  # pragma: no cover - depends on the installation
        return None
    return triton if release(triton.__version__) >= (3, 0) else None


def triton_version() -> tuple[int, int] | None:
    """The installed Triton's ``(major, minor)``, or None without it (importing it if need be)."""
    triton = _triton()
    return None if triton is None else release(triton.__version__)


def triton_available(t: Tensor) -> bool:
    """Whether the Triton kernels will run for tensors like ``t``: CUDA tensors, Triton installed,
    ``HIGHWAYNET_TRITON`` not ``0`` when highwaynet was imported. (Under ``TRITON_INTERPRET=1`` they
    run on CPU tensors too, slowly, which is how the kernels can be checked on a machine without a GPU.)
    Triton is imported here, the first time a tensor could use it, never for a CPU-only program."""
    if _TRITON_OFF or not (t.is_cuda or INTERPRETING):
        return False
    return _triton() is not None


def kernel_dtypes_refusal(*tensors: Tensor | None) -> str | None:
    """Why the Triton kernels must not take these tensors (a dtype they would compute in float32 only,
    such as float64), in words for :func:`~highwaynet.kernels.explain`; None where they compute them exactly."""
    others = sorted({str(t.dtype).removeprefix("torch.") for t in tensors
                     if t is not None and t.dtype not in KERNEL_DTYPES})
    if not others:
        return None
    return (f"{', '.join(others)}: the Triton kernels compute float32, float16 and bfloat16 (in float32), so "
            f"the PyTorch path keeps {others[0]}")


def first_order_only(layer: str) -> None:
    """Raise where a hand-written backward is asked to record a graph (``create_graph=True``).

    The fused layers' backwards compute their gradients without autograd, so gradients of those
    gradients would silently miss the layer's share; like cuDNN's ``nn.LSTM``, they refuse instead."""
    if torch.is_grad_enabled():
        raise RuntimeError(f"{layer}'s fused path computes gradients of first order only; for gradients "
                           f"of gradients (create_graph=True) build the layer with fused=False")


@_constant_when_compiled  # (decided when compiling, as the path's other choices)
def onnx_exporting() -> bool:
    """Whether ``torch.onnx.export`` is tracing the caller: asked of ``torch.onnx`` only where it is
    imported, as it is before any export runs. (Under torch 2.4 its first import loads onnx and
    onnxruntime where they are installed: seconds more at a layer's first forward.)"""
    onnx = sys.modules.get("torch.onnx")
    return onnx is not None and bool(onnx.is_in_onnx_export())


@_constant_when_compiled  # (decided when compiling, as newer compilers do themselves; 2.3's and 2.4's cannot trace it)
def transforms_active() -> bool:
    """Whether ``torch.func``'s transforms (``grad``, ``vmap``, ``jvp``, ``jacrev``, ...) or forward-mode
    AD (``torch.autograd.forward_ad``) are running. The fused layers' autograd functions have a
    hand-written backward and nothing else, so under these the layers take their reference paths,
    which are plain PyTorch operations and support them all. (Both checks are PyTorch's private
    ones, as its own ``autograd.Function.apply`` makes; tested on torch 2.3.1 to 2.15.)"""
    return torch._C._are_functorch_transforms_active() or torch.autograd.forward_ad._current_level >= 0


# -- the reference ------------------------------------------------------------------------------

_BY_CODE = {code: ACTIVATIONS[name] for name, code in ACTIVATION_CODES.items()}


def _activate(z: Tensor, code: Activation) -> Tensor:
    return _BY_CODE[code](z)


def _activate_in_place(z: Tensor, code: Activation) -> Tensor:
    if code == Activation.RELU:
        return z.relu_()
    if code == Activation.TANH:
        return z.tanh_()
    if code == Activation.SIGMOID:
        return z.sigmoid_()
    return z


def _activation_grad(h: Tensor, code: Activation) -> Tensor:
    """``f'`` from ``h = f(z)`` alone: true of each activation the kernels know (relu: ``h > 0``)."""
    if code == Activation.RELU:
        return (h > 0).to(h.dtype)
    if code == Activation.TANH:
        return 1 - h * h
    if code == Activation.SIGMOID:
        return h * (1 - h)
    return torch.ones_like(h)


def gate_forward_reference(z: Tensor, x: Tensor, code: Activation, keep_activations: bool = False,
                           out: Tensor | None = None) -> Tensor:
    """:func:`gate_forward` with PyTorch operations."""
    zh, zt = z.chunk(2, dim=-1)
    if keep_activations:  # in place: z becomes [h | t]
        h, t = _activate_in_place(zh, code), zt.sigmoid_()
    else:
        h, t = _activate(zh, code), torch.sigmoid(zt)
    if x.dtype == h.dtype:
        return torch.lerp(x, h, t, out=out)
    dtype = torch.promote_types(h.dtype, x.dtype)
    return torch.lerp(x.to(dtype), h.to(dtype), t.to(dtype), out=out)


def gate_backward_reference(dy: Tensor, z: Tensor, x: Tensor, code: Activation, grad_z: Tensor | None = None,
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


# -- dispatch -------------------------------------------------------------------------------------

def _check(z: object, x: object) -> tuple[Tensor, Tensor]:
    """``z`` ``(M, 2D)`` and ``x`` ``(M, D)``, floating-point tensors on one device (metadata only)."""
    z, x = check_tensor("z", z), check_tensor("x", x)
    if z.dim() != 2 or x.dim() != 2 or z.shape[0] != x.shape[0] or z.shape[1] != 2 * x.shape[1]:
        raise ValueError(f"the gate needs z of shape (M, 2D) and x of shape (M, D), "
                         f"got {tuple(z.shape)} and {tuple(x.shape)}")
    check_same_device("z", z, x=x)
    return z, x


def _check_buffer(name: str, value: object, shape: torch.Size, z: Tensor, dtype: torch.dtype | None) -> None:
    """A tensor the gate writes into: ``shape``, on ``z``'s device, of ``dtype`` (None: any floating-point
    one), its rows contiguous (the kernels store rows by their stride)."""
    buffer = check_tensor(name, value)
    if buffer.shape != shape or buffer.stride(-1) != 1:
        raise ValueError(f"{name} must have the shape {tuple(shape)} and contiguous rows, got shape "
                         f"{tuple(buffer.shape)} and strides {buffer.stride()}")
    check_same_device("z", z, **{name: buffer})
    if dtype is not None and buffer.dtype != dtype:
        raise TypeError(f"{name} must have the output's dtype {dtype} (z's and x's promoted), got {buffer.dtype}")


def gate_forward(z: Tensor, x: Tensor, code: Activation, keep_activations: bool = False,
                 out: Tensor | None = None) -> Tensor:
    """``y = x + sigmoid(z_T) * (f(z_H) - x)``, ``z`` ``(M, 2D)``, ``x`` ``(M, D)`` → ``(M, D)``.

    ``y`` has the promoted dtype of ``z`` and ``x``; the arithmetic is float32 in the kernel, which takes
    the dtypes of :data:`KERNEL_DTYPES` (others, float64 first, run the reference). With
    ``keep_activations``, ``z`` is overwritten in place with ``[f(z_H) | sigmoid(z_T)]``, for a
    backward called with ``activated=True`` that then recomputes nothing (worth it where
    operations are small and their count is the cost, as in a recurrence). ``out``: where to
    write ``y`` (contiguous rows, not overlapping the inputs), saving a copy where ``y`` belongs
    in a larger buffer.

    Raises:
        TypeError: ``z``, ``x`` or ``out`` not a floating-point tensor, ``out`` not of ``y``'s dtype,
            ``code`` not an :class:`Activation` (a name such as ``"tanh"``: see :func:`activation_code`),
            ``keep_activations`` not a bool.
        ValueError: shapes other than the above, tensors on different devices, ``out`` without
            contiguous rows.
    """
    z, x = _check(z, x)
    code = check_code(code)
    check_flag("keep_activations", keep_activations)
    if out is not None:
        _check_buffer("out", out, x.shape, z, torch.promote_types(z.dtype, x.dtype))
    return fused_gate_forward(z, x, code, keep_activations, out)


def fused_gate_forward(z: Tensor, x: Tensor, code: Activation, keep_activations: bool = False,
                       out: Tensor | None = None) -> Tensor:
    """:func:`gate_forward` without its argument checks, for the fused layers' own calls on tensors
    they made (a recurrence's micro-steps, where the count of small operations is the cost)."""
    if not triton_available(x) or kernel_dtypes_refusal(z, x, out) is not None:
        return gate_forward_reference(z, x, code, keep_activations, out)
    from . import triton_gating

    return triton_gating.gate_forward(z, x, code, keep_activations, out)


def gate_backward(dy: Tensor, z: Tensor, x: Tensor, code: Activation, grad_z: Tensor | None = None,
                  bias_grad: bool = False, activated: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
    """The gradient of :func:`gate_forward`: ``(g, dx_carry, bias gradient or None)``.

    ``g`` ``(M, 2D)`` is the gradient of ``z`` (written into ``grad_z`` when given, in ``z``'s dtype
    otherwise), ``dx_carry`` ``(M, D)`` the part of ``x``'s gradient that flows through the carry
    (``dy``'s dtype), and with ``bias_grad`` the column sums of ``g`` in float32. ``activated``:
    ``z`` holds ``[f(z_H) | sigmoid(z_T)]`` (see :func:`gate_forward`'s ``keep_activations``).

    Raises:
        TypeError: ``dy``, ``z``, ``x`` or ``grad_z`` not a floating-point tensor, ``code`` not an
            :class:`Activation`, ``bias_grad`` or ``activated`` not a bool.
        ValueError: ``dy`` not of ``x``'s shape, ``grad_z`` not of ``z``'s or without contiguous rows,
            shapes other than :func:`gate_forward`'s, tensors on different devices.
    """
    z, x = _check(z, x)
    dy = check_tensor("dy", dy)
    if dy.shape != x.shape:
        raise ValueError(f"the gate's backward needs dy of x's shape {tuple(x.shape)}, got {tuple(dy.shape)}")
    check_same_device("z", z, dy=dy)
    code = check_code(code)
    check_flag("bias_grad", bias_grad)
    check_flag("activated", activated)
    if grad_z is not None:
        _check_buffer("grad_z", grad_z, z.shape, z, None)
    return fused_gate_backward(dy, z, x, code, grad_z, bias_grad, activated)


def fused_gate_backward(dy: Tensor, z: Tensor, x: Tensor, code: Activation, grad_z: Tensor | None = None,
                        bias_grad: bool = False, activated: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
    """:func:`gate_backward` without its argument checks (see :func:`fused_gate_forward`)."""
    if not triton_available(x) or kernel_dtypes_refusal(dy, z, x, grad_z) is not None:
        return gate_backward_reference(dy, z, x, code, grad_z, bias_grad, activated)
    from . import triton_gating

    return triton_gating.gate_backward(dy, z, x, code, grad_z, bias_grad, activated)
