"""Residual connections as parts: a sublayer, and a way to combine its output with the stream.

A Transformer's block adds each sublayer's output to its input, ``x + F(x)``. The highway paper's
gate, and the gates and scales that followed it on residual connections, change only how ``F(x)``
joins the stream ``x``. :class:`Residual` is that composition, ``y = combine(F(x), x)``, and each
way of combining is a small module of its own (``x`` the stream, ``f = F(x)`` the branch):

- :class:`Sum`: ``x + f``, the plain residual connection;
- :class:`FixedGate`: ``t f + (1 - t) x`` with ``t = σ(b)`` fixed, no parameters: a highway gate
  frozen at its initial bias, the control for a learned one;
- :class:`ReZero`: ``x + α f``, one learned scalar starting at 0, the identity (ReZero's,
  Bachlechner et al. 2020, and SkipInit's, De & Smith 2020);
- :class:`LayerScale`: ``x + γ ⊙ f``, a learned scale per channel starting small (Touvron et al.
  2021);
- :class:`DeepNormSum`: ``α x + f`` with ``α`` fixed, the sum inside DeepNorm's ``LN(α x + f)``
  (Wang et al. 2022), the LayerNorm being the block's;
- :class:`HighwayGate`: ``T ⊙ f + (1 − T) ⊙ x`` with ``T = σ(W_T x + b_T)`` (Srivastava et al.
  2015), starting near ``σ(b_T)``;
- :class:`GRUGate`: GTrXL's GRU-type gate (Parisotto et al. 2019), starting near the identity.

Each combiner ends in a :class:`~highwaynet.nn.gate.Gate`, so :func:`~highwaynet.analysis.record_gates`
records what it lets in (``T``, ``z``, ``α``, ``γ``, ``t``; 1 for a plain sum) and
:func:`~highwaynet.analysis.lesion` shuts it: the connection then returns the stream (for
:class:`DeepNormSum`, ``α x``). :class:`GatedResidual`, the one-class form of 0.3, is deprecated.
:class:`GatedResidualNetwork` is the Temporal Fusion Transformer's gated residual block (Lim et
al., 2021).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import (
    check_broadcast,
    check_choice,
    check_factory,
    check_finite,
    check_flag,
    check_gate_bias,
    check_input,
    check_module,
    check_probability,
    check_size,
    describe,
    first_parameter,
)
from ._signature import settings_repr
from .gate import BranchGate, TransformGate

__all__ = ["RESIDUAL_KINDS", "DeepNormSum", "FixedGate", "GRUGate", "GatedResidual", "GatedResidualNetwork",
           "HighwayGate", "LayerScale", "ReZero", "Residual", "Sum", "deepnorm_alpha", "deepnorm_beta",
           "layerscale_init"]

#: The connections :class:`GatedResidual` (deprecated) makes.
RESIDUAL_KINDS = ("residual", "highway", "gtrxl", "rezero")


def layerscale_init(num_layers: int) -> float:
    """LayerScale's initial value by depth, as Touvron et al. (2021) set it: 0.1 up to 18 blocks,
    1e-5 up to 24, 1e-6 deeper."""
    num_layers = check_size("num_layers", num_layers)
    return 0.1 if num_layers <= 18 else 1e-5 if num_layers <= 24 else 1e-6


def deepnorm_alpha(num_layers: int) -> float:
    """DeepNorm's up-weighting of the stream for a decoder of ``num_layers`` blocks, :math:`(2N)^{1/4}`
    (Wang et al., 2022)."""
    return (2 * check_size("num_layers", num_layers)) ** 0.25


def deepnorm_beta(num_layers: int) -> float:
    """DeepNorm's down-scaling of the initial value, FFN and output projection weights of a decoder
    of ``num_layers`` blocks, :math:`(8N)^{-1/4}` (Wang et al., 2022)."""
    return (8 * check_size("num_layers", num_layers)) ** -0.25


class _Combine(nn.Module):
    """A way to join a branch ``f`` to the stream ``x``: ``forward(f, x)``; its gate is ``self.gate``."""

    gate: BranchGate | TransformGate

    def reset_parameters(self) -> None:
        """Start as the class's description says (no parameters: nothing to do)."""

    def forward(self, branch: Tensor, x: Tensor) -> Tensor:  # pragma: no cover (each combiner has its own)
        raise NotImplementedError

    def _check(self, branch: object, x: object) -> tuple[Tensor, Tensor]:
        """``branch`` and ``x``: floating-point tensors (on the device and of the dtype of the combiner's
        matrices, where it has some), of one shape ``(..., dim)`` for a combiner of width ``dim``, else
        of shapes that broadcast."""
        owner, like = type(self).__name__, first_parameter(self, matrices=True)
        branch, x = check_input(owner, "branch", branch, like), check_input(owner, "x", x, like)
        dim = getattr(self, "dim", None)
        if dim is None:
            check_broadcast(owner, branch=branch, x=x)
        elif branch.shape != x.shape or x.shape[-1:] != (dim,):
            raise ValueError(f"{owner} expects branch and x of one shape (..., {dim}), got {tuple(branch.shape)} and "
                             f"{tuple(x.shape)}")
        return branch, x

    def extra_repr(self) -> str:
        return settings_repr(self)


class Sum(_Combine):
    r"""The plain residual connection: :math:`y = x + f`. Its :class:`~highwaynet.nn.BranchGate`
    records 1 and, lesioned, leaves the branch out (:math:`y = x`).

    Shape:
        ``combine(f, x)``: the branch's output ``f`` and the stream ``x``, floating-point tensors of
        shapes that broadcast; the output has their broadcast shape.

    Example::

        >>> Sum()(torch.ones(3), torch.zeros(3))
        tensor([1., 1., 1.])
    """

    def __init__(self) -> None:
        super().__init__()
        self.gate = BranchGate()

    def forward(self, branch: Tensor, x: Tensor) -> Tensor:
        branch, x = self._check(branch, x)
        return self.gate(branch, x)


class FixedGate(_Combine):
    r"""A highway gate frozen at its bias, no parameters: :math:`y = t f + (1 - t) x`,
    :math:`t = \sigma(b)` (the control for a learned gate: what its initial down-weighting alone does).

    Args:
        bias: :math:`b`. Default −2 (:math:`t = 0.12`).

    Shape:
        ``combine(f, x)``: the branch's output ``f`` and the stream ``x``, floating-point tensors of
        shapes that broadcast; the output has their broadcast shape.

    Example::

        >>> FixedGate(bias=0.0)(torch.ones(2), torch.zeros(2))     # t = σ(0) = 0.5
        tensor([0.5000, 0.5000])
    """

    def __init__(self, *, bias: float = -2.0) -> None:
        super().__init__()
        self.bias = check_gate_bias(bias, name="bias")
        self.gate = TransformGate()

    def forward(self, branch: Tensor, x: Tensor) -> Tensor:
        branch, x = self._check(branch, x)
        return self.gate(branch, branch.new_full((), self.bias), x)


class ReZero(_Combine):
    r"""A learned scalar on the branch: :math:`y = x + \alpha f`, :math:`\alpha` starting at ``init``
    (0: the identity). ReZero's (Bachlechner et al., 2020), which removes the LayerNorms, and
    SkipInit's (De & Smith, 2020); with pre-LN branches it is CaiT's "LN + learnable scalar" (Touvron
    et al., 2021, Fig. 2c). The gate records :math:`\alpha`.

    Args:
        init: :math:`\alpha`'s initial value. Default 0.

    Shape:
        ``combine(f, x)``: the branch's output ``f`` and the stream ``x``, floating-point tensors of
        shapes that broadcast; the output has their broadcast shape.

    Example::

        >>> combine = ReZero()
        >>> combine(torch.ones(3), torch.zeros(3))          # α = 0: the stream alone
        tensor([0., 0., 0.], grad_fn=<AddBackward0>)
    """

    def __init__(self, *, init: float = 0.0, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.init = check_finite("init", init)
        self.alpha = nn.Parameter(torch.empty((), **check_factory(device, dtype)))
        self.gate = BranchGate()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.alpha.fill_(self.init)

    def forward(self, branch: Tensor, x: Tensor) -> Tensor:
        branch, x = self._check(branch, x)
        return self.gate(branch, x, self.alpha)


class LayerScale(_Combine):
    r"""A learned scale per channel on the branch (Touvron et al., 2021):
    :math:`y = x + \gamma \odot f`, every :math:`\gamma_i` starting at ``init``. The gate records
    :math:`\gamma`.

    Args:
        dim: the stream's width (channels are its last dimension).
        init: :math:`\varepsilon`, the initial value. Default 1e-5; the paper's by depth is
            :func:`layerscale_init`.

    Shape:
        ``combine(f, x)``: the branch's output ``f`` and the stream ``x``, both ``(..., dim)``; the
        output has their shape.

    Example::

        >>> LayerScale(4, init=0.1)(torch.ones(2, 4), torch.zeros(2, 4))
        tensor([[0.1000, 0.1000, 0.1000, 0.1000],
                [0.1000, 0.1000, 0.1000, 0.1000]], grad_fn=<AddBackward0>)
    """

    def __init__(self, dim: int, *, init: float = 1e-5, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.dim = check_size("dim", dim)
        self.init = check_finite("init", init)
        self.gamma = nn.Parameter(torch.empty(self.dim, **check_factory(device, dtype)))
        self.gate = BranchGate()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.gamma.fill_(self.init)

    def forward(self, branch: Tensor, x: Tensor) -> Tensor:
        branch, x = self._check(branch, x)
        return self.gate(branch, x, self.gamma)


class DeepNormSum(_Combine):
    r"""DeepNorm's sum (Wang et al., 2022): the stream up-weighted, :math:`y = \alpha x + f`, with
    :math:`\alpha` fixed. DeepNorm is :math:`\mathrm{LN}(\alpha x + f)`: put a LayerNorm after the
    connection (``norm="post"`` in :class:`~highwaynet.models.CausalTransformer`) and scale the
    branch's initial weights by :func:`deepnorm_beta`. The gate records the branch's weight, 1; a
    lesion leaves the branch out (:math:`y = \alpha x`, which the LayerNorm after it maps to
    :math:`\mathrm{LN}(x)`).

    Args:
        alpha: :math:`\alpha` (:func:`deepnorm_alpha` of the depth, for a decoder).

    Shape:
        ``combine(f, x)``: the branch's output ``f`` and the stream ``x``, floating-point tensors of
        shapes that broadcast; the output has their broadcast shape.

    Example::

        >>> DeepNormSum(alpha=2.0)(torch.ones(2), torch.ones(2))
        tensor([3., 3.])
    """

    def __init__(self, *, alpha: float) -> None:
        super().__init__()
        self.alpha = check_finite("alpha", alpha)
        self.gate = BranchGate()

    def forward(self, branch: Tensor, x: Tensor) -> Tensor:
        branch, x = self._check(branch, x)
        return self.gate(branch, self.alpha * x)


class HighwayGate(_Combine):
    r"""The highway gate on a residual branch: :math:`y = T \odot f + (1 - T) \odot x` with
    :math:`T = \sigma(W_T x + b_T)` (Srivastava et al., 2015), or with ``reads="both"``
    :math:`T = \sigma(W_T [x; f] + b_T)`. The gate records :math:`T`.

    Args:
        dim: the stream's width.
        bias: :math:`b_T`'s initial value. Default −2 (:math:`\sigma(-2) = 0.12`: near the identity).
        reads: what the gate reads, ``"stream"`` or ``"both"``.
        device, dtype: where and in what type the parameters are made.

    Initialised as ``nn.Linear`` is (:math:`W_T \sim U(\pm 1/\sqrt{\text{fan-in}})`), :math:`b_T =`
    ``bias``.

    Shape:
        ``combine(f, x)``: the branch's output ``f`` and the stream ``x``, both ``(..., dim)``; the
        output has their shape.

    Example::

        >>> gate = HighwayGate(8, bias=-2.0)
        >>> gate(torch.randn(4, 8), torch.randn(4, 8)).shape
        torch.Size([4, 8])
    """

    def __init__(self, dim: int, *, bias: float = -2.0, reads: str = "stream",
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.dim = check_size("dim", dim)
        self.bias = check_gate_bias(bias, dtype, name="bias")
        self.reads = check_choice("reads", reads, ("stream", "both"))
        self.proj = nn.Linear(self.dim * (2 if reads == "both" else 1), self.dim, **check_factory(device, dtype))
        self.gate = TransformGate()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.proj.reset_parameters()
        with torch.no_grad():
            self.proj.bias.fill_(self.bias)

    def forward(self, branch: Tensor, x: Tensor) -> Tensor:
        branch, x = self._check(branch, x)
        reads = x if self.reads == "stream" else torch.cat([x, branch], dim=-1)
        return self.gate(branch, self.proj(reads), x)


class GRUGate(_Combine):
    r"""GTrXL's GRU-type gate (Parisotto et al., 2019), with :math:`y = \mathrm{ReLU}(f)` (the paper's
    form) or :math:`y = f` (``relu=False``):

    .. math::
        r &= \sigma(W_r y + U_r x), \quad z = \sigma(W_z y + U_z x + b_z), \\
        \hat h &= \tanh(W_g y + U_g (r \odot x)), \quad \text{output } (1 - z) \odot x + z \odot \hat h

    :math:`b_z` is the paper's :math:`-b_g`; starting negative, the connection starts near the
    identity. The gate records :math:`z`. Six ``dim × dim`` matrices and ``dim`` biases.

    Args:
        dim: the stream's width.
        bias: :math:`b_z`'s initial value. Default −2 (the paper's :math:`b_g = 2`).
        relu: apply the paper's ReLU to the branch before the gate.
        device, dtype: where and in what type the parameters are made.

    Initialised as ``nn.Linear`` is (:math:`U(\pm 1/\sqrt{\text{dim}})`), :math:`b_z =` ``bias``.

    Shape:
        ``combine(f, x)``: the branch's output ``f`` and the stream ``x``, both ``(..., dim)``; the
        output has their shape.

    Example::

        >>> gate = GRUGate(8)
        >>> gate(torch.randn(4, 8), torch.randn(4, 8)).shape
        torch.Size([4, 8])
    """

    def __init__(self, dim: int, *, bias: float = -2.0, relu: bool = True, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.dim = check_size("dim", dim)
        self.bias = check_gate_bias(bias, dtype, name="bias")
        self.relu = check_flag("relu", relu)
        factory = check_factory(device, dtype)
        self.from_branch = nn.Linear(self.dim, 3 * self.dim, bias=False, **factory)  # [W_r; W_z; W_g] y
        self.from_stream = nn.Linear(self.dim, 2 * self.dim, bias=False, **factory)  # [U_r; U_z] x
        self.candidate = nn.Linear(self.dim, self.dim, bias=False, **factory)        # U_g (r ⊙ x)
        self.z_bias = nn.Parameter(torch.empty(self.dim, **factory))                 # b_z
        self.gate = TransformGate()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for layer in (self.from_branch, self.from_stream, self.candidate):
            layer.reset_parameters()
        with torch.no_grad():
            self.z_bias.fill_(self.bias)

    def forward(self, branch: Tensor, x: Tensor) -> Tensor:
        branch, x = self._check(branch, x)
        y = F.relu(branch) if self.relu else branch
        r_y, z_y, g_y = self.from_branch(y).chunk(3, dim=-1)
        r_x, z_x = self.from_stream(x).chunk(2, dim=-1)
        r = torch.sigmoid(r_y + r_x)
        candidate = torch.tanh(g_y + self.candidate(r * x))
        return self.gate(candidate, z_y + z_x + self.z_bias, x)  # (1 − z) ⊙ x + z ⊙ ĥ


#: Parameter names of 0.3's GatedResidual, and where a Residual keeps them (see _load_from_state_dict).
_RENAMED = {"gate_proj.weight": "combine.proj.weight", "gate_proj.bias": "combine.proj.bias",
            "from_branch.weight": "combine.from_branch.weight", "from_stream.weight": "combine.from_stream.weight",
            "candidate.weight": "combine.candidate.weight", "alpha": "combine.alpha"}


class Residual(nn.Module):
    r"""A residual connection: a sublayer ``F`` and a way to join its output to the stream,
    ``y = combine(F(x), x)``.

    Args:
        sublayer: any module mapping ``(..., dim)`` to the same shape; extra arguments of the call go
            to it. For a pre-LN connection, make it ``nn.Sequential(nn.LayerNorm(dim), block)``; for
            post-LN, put the LayerNorm after the connection.
        combine: the combiner (:class:`Sum`, :class:`FixedGate`, :class:`ReZero`,
            :class:`LayerScale`, :class:`DeepNormSum`, :class:`HighwayGate`, :class:`GRUGate`).

    Shape:
        ``x``: ``(..., dim)``; the output has its shape.

    Example::

        >>> block = nn.Sequential(nn.LayerNorm(64), nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
        >>> layer = Residual(block, HighwayGate(64, bias=-2.0))
        >>> layer(torch.randn(8, 10, 64)).shape
        torch.Size([8, 10, 64])
    """

    def __init__(self, sublayer: nn.Module, combine: nn.Module) -> None:
        super().__init__()
        check_module("sublayer", sublayer)
        if not isinstance(combine, _Combine):
            raise TypeError(f"combine must be one of highwaynet.nn's combiners (Sum, FixedGate, ReZero, LayerScale, "
                            f"DeepNormSum, HighwayGate, GRUGate), got {describe(combine)}")
        self.sublayer, self.combine = sublayer, combine

    def forward(self, x: Tensor, *args: object, **kwargs: object) -> Tensor:
        dim = getattr(self.combine, "dim", None)
        check_input(type(self).__name__, "x", x, first_parameter(self))
        if dim is not None and x.shape[-1:] != (dim,):
            raise ValueError(f"{type(self).__name__} expects inputs of shape (..., {dim}), got {tuple(x.shape)}")
        y = self.sublayer(x, *args, **kwargs)
        if not isinstance(y, Tensor) or y.shape != x.shape:
            shape = tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__
            raise ValueError(f"{type(self).__name__}'s sublayer must return its input's shape {tuple(x.shape)}, "
                             f"got {shape}")
        return self.combine(y, x)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        # A state dict of 0.3's GatedResidual (a CausalTransformer's run folder of 0.3): its gates'
        # parameters sat on the connection itself. GTrXL's r-gate bias (0.3 had one, GRUGate has none)
        # is dropped: exact only while it is still 0, its initial value; otherwise say so.
        for old, new in _RENAMED.items():
            if prefix + old in state_dict and prefix + new not in state_dict:
                state_dict[prefix + new] = state_dict.pop(prefix + old)
        old_bias = state_dict.pop(prefix + "from_stream.bias", None)
        if old_bias is not None and prefix + "combine.z_bias" not in state_dict:
            half = old_bias.shape[0] // 2
            if bool(old_bias[:half].ne(0).any()):
                warnings.warn(f"{prefix}from_stream.bias: 0.3's GTrXL gate has a reset-gate bias b_r that is not 0, "
                              f"and GRUGate has none: it is dropped, so this connection's outputs differ from 0.3's",
                              UserWarning, stacklevel=3)
            state_dict[prefix + "combine.z_bias"] = old_bias[half:]
        super()._load_from_state_dict(state_dict, prefix, *args)


class GatedResidual(Residual):
    r"""Deprecated since highwaynet 0.4.0 (removed in 0.5.0): :class:`Residual` with a combiner.

    ``GatedResidual(sublayer, dim, kind=...)`` is ``Residual(sublayer, combine)`` with ``combine``
    :class:`Sum` (``kind="residual"``), :class:`HighwayGate` (``"highway"``, ``gate_bias``,
    ``gate_reads``), :class:`GRUGate` with ``relu=False`` (``"gtrxl"``: 0.3's form, without the
    paper's ReLU) or :class:`ReZero` (``"rezero"``).
    """

    def __init__(self, sublayer: nn.Module, dim: int, *, kind: str = "highway", gate_bias: float | None = None,
                 gate_reads: str = "stream", device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        check_module("sublayer", sublayer)
        check_choice("kind", kind, RESIDUAL_KINDS)
        check_choice("gate_reads", gate_reads, ("stream", "both"))
        if gate_bias is not None:
            check_gate_bias(gate_bias, dtype)
        if gate_bias is not None and kind not in ("highway", "gtrxl"):
            raise ValueError(f"kind {kind!r} has no gate bias: only highway and gtrxl gates have one")
        if gate_reads != "stream" and kind != "highway":
            raise ValueError(f"gate_reads is the highway gate's setting, not kind {kind!r}'s")
        replacement = {"residual": "Sum()", "highway": "HighwayGate(dim, bias=..., reads=...)",
                       "gtrxl": "GRUGate(dim, bias=..., relu=False)", "rezero": "ReZero()"}[kind]
        warnings.warn(f"GatedResidual is deprecated since highwaynet 0.4.0 and goes in 0.5.0: use "
                      f"Residual(sublayer, {replacement}) from highwaynet.nn", DeprecationWarning, stacklevel=2)
        dim = check_size("dim", dim)
        factory = check_factory(device, dtype)
        bias = -2.0 if gate_bias is None else gate_bias
        combine: _Combine = {"residual": lambda: Sum(), "rezero": lambda: ReZero(**factory),
                             "highway": lambda: HighwayGate(dim, bias=bias, reads=gate_reads, **factory),
                             "gtrxl": lambda: GRUGate(dim, bias=bias, relu=False, **factory)}[kind]()
        super().__init__(sublayer, combine)
        self.dim, self.kind, self.gate_bias, self.gate_reads = dim, kind, gate_bias, gate_reads

    def extra_repr(self) -> str:
        return settings_repr(self)


class GatedResidualNetwork(nn.Module):
    r"""The Temporal Fusion Transformer's gated residual network (Lim et al., 2021).

    .. math::
        \eta_2 &= \mathrm{ELU}(W_2 a + W_3 c + b_2), \quad \eta_1 = W_1 \eta_2 + b_1, \\
        \mathrm{GRN}(a, c) &= \mathrm{LayerNorm}\big(\mathrm{skip}(a) + \sigma(W_4 \eta_1 + b_4)
        \odot (W_5 \eta_1 + b_5)\big)

    where :math:`\mathrm{skip}(a) = a`, or a linear projection where the output's width differs,
    and dropout applies to :math:`\eta_1`. The GLU's gate :math:`\sigma(W_4 \eta_1 + b_4)` is a
    :class:`~highwaynet.nn.gate.BranchGate`'s scale: recorded, and lesioned to 0 (the block is then
    :math:`\mathrm{LayerNorm}(\mathrm{skip}(a))`).

    Args:
        input_size: the width of ``a``.
        hidden_size: the width of :math:`\eta_1, \eta_2`.
        output_size: the output's width (default: ``input_size``).
        context_size: the width of an optional context ``c`` (default: no context).
        dropout: dropout on :math:`\eta_1`.
        device, dtype: where and in what type the parameters are made.

    Shape:
        ``a``: ``(..., input_size)``; ``context``: ``(..., context_size)``, broadcasting against
        ``a``'s leading dimensions; output ``(..., output_size)``.

    Example::

        >>> grn = GatedResidualNetwork(16, 32, context_size=4)
        >>> grn(torch.randn(8, 16), torch.randn(8, 4)).shape
        torch.Size([8, 16])
    """

    def __init__(self, input_size: int, hidden_size: int, output_size: int | None = None, *,
                 context_size: int | None = None, dropout: float = 0.0, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        input_size, hidden_size = check_size("input_size", input_size), check_size("hidden_size", hidden_size)
        output_size = input_size if output_size is None else check_size("output_size", output_size)
        context_size = None if context_size is None else check_size("context_size", context_size)
        check_probability("dropout", dropout)
        factory = check_factory(device, dtype)
        self.input_size, self.hidden_size, self.output_size = input_size, hidden_size, output_size
        self.context_size = context_size
        self.input = nn.Linear(input_size, hidden_size, **factory)                       # W_2, b_2
        self.context = nn.Linear(context_size, hidden_size, bias=False, **factory) if context_size else None  # W_3
        self.hidden = nn.Linear(hidden_size, hidden_size, **factory)                     # W_1, b_1
        self.glu = nn.Linear(hidden_size, 2 * output_size, **factory)                   # [W_4 | W_5]
        self.skip = nn.Linear(input_size, output_size, **factory) if input_size != output_size else None
        self.dropout = nn.Dropout(dropout)
        self.gate = BranchGate()
        self.norm = nn.LayerNorm(output_size, **factory)

    def reset_parameters(self) -> None:
        """Each ``nn.Linear``'s and the LayerNorm's own initialisation: what construction does, for a
        block made on the meta device and then ``to_empty``."""
        for layer in (self.input, self.context, self.hidden, self.glu, self.skip, self.norm):
            if layer is not None:
                layer.reset_parameters()

    def forward(self, a: Tensor, context: Tensor | None = None) -> Tensor:
        check_input("GatedResidualNetwork", "a", a, self.input.weight)
        if a.shape[-1:] != (self.input_size,):
            raise ValueError(f"GatedResidualNetwork expects a of shape (..., {self.input_size}), got {tuple(a.shape)}")
        if (context is None) != (self.context is None):
            raise ValueError("GatedResidualNetwork(context_size=...) takes a context, and one without takes none"
                             if context is None else "this GatedResidualNetwork was built without context_size: "
                             "it takes no context")
        if context is not None:
            check_input("GatedResidualNetwork", "context", context, self.input.weight)
            if context.shape[-1:] != (self.context_size,):
                raise ValueError(f"GatedResidualNetwork expects context of shape (..., {self.context_size}), "
                                 f"got {tuple(context.shape)}")
            try:
                torch.broadcast_shapes(a.shape[:-1], context.shape[:-1])
            except RuntimeError:
                raise ValueError(f"GatedResidualNetwork expects context's leading dimensions to broadcast against "
                                 f"a's, got a {tuple(a.shape)} and context {tuple(context.shape)}") from None
        eta2 = self.input(a)
        if self.context is not None and context is not None:
            eta2 = eta2 + self.context(context)
        eta1 = self.dropout(self.hidden(F.elu(eta2)))
        gate_logits, value = self.glu(eta1).chunk(2, dim=-1)
        skip = a if self.skip is None else self.skip(a)
        return self.norm(self.gate(value, skip, torch.sigmoid(gate_logits)))

    def extra_repr(self) -> str:
        return settings_repr(self, dropout=self.dropout.p,
                             output_size=None if self.output_size == self.input_size else self.output_size)
