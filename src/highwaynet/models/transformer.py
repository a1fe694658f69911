"""A causal Transformer language model whose residual connections and LayerNorms are settings.

A GPT-2-style decoder (token and position embeddings, blocks of causal self-attention and an MLP,
a decoder tied to the token embedding) in which each sublayer sits inside a
:class:`~highwaynet.nn.Residual` whose combiner is a setting (:data:`CONNECTIONS`: a plain sum,
a fixed gate, ReZero's scalar, LayerScale, DeepNorm's sum, a highway gate, GTrXL's gate), and the
LayerNorm's place is a setting too:

- ``"pre"``: ``x ⊕ F(LN(x))`` (GPT-2's placement);
- ``"post"``: ``LN(x ⊕ F(x))`` (the original Transformer's; DeepNorm's);
- ``"none"``: ``x ⊕ F(x)``, no LayerNorm in the blocks (ReZero's setting);

and a final LayerNorm before the decoder wherever the blocks have LayerNorms (``final_norm``
overrides it: ReZero with one, say).

Attention is :func:`torch.nn.functional.scaled_dot_product_attention` (fused kernels where the
device has them). Its interface is the recurrent language models' (``model(tokens, state)`` →
``(logits, state)``, ``(T, B)`` tokens), so the Trainer's language-model task trains it and
``highwaynet generate`` samples from it; its state is the context it may still attend to (the last
``context - 1`` tokens), which sampling carries and training does not.
"""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import (
    check_choice,
    check_flag,
    check_gate_bias,
    check_ids,
    check_input,
    check_probability,
    check_same_device,
    check_size,
)
from ..nn._signature import settings_repr
from ..nn.residual import (
    DeepNormSum,
    FixedGate,
    GRUGate,
    HighwayGate,
    LayerScale,
    Residual,
    ReZero,
    Sum,
    _Combine,
    deepnorm_alpha,
    deepnorm_beta,
    layerscale_init,
)

__all__ = ["CONNECTIONS", "NORM_PLACEMENTS", "CausalSelfAttention", "CausalTransformer", "TransformerBlock",
           "make_combine"]

#: Where a block's LayerNorms go.
NORM_PLACEMENTS = ("pre", "post", "none")

#: The residual connections :class:`CausalTransformer` makes, by name (see :func:`make_combine`).
CONNECTIONS = ("residual", "fixed", "rezero", "layerscale", "deepnorm", "highway", "gtrxl")

#: The connections whose gate has a bias (``gate_bias``).
GATED = ("fixed", "highway", "gtrxl")


def make_combine(kind: str, dim: int, num_layers: int, *, gate_bias: float | None = None) -> _Combine:
    """The combiner of connection ``kind`` in a stack of ``num_layers`` blocks of width ``dim``:
    ``"residual"`` :class:`~highwaynet.nn.Sum`; ``"fixed"`` :class:`~highwaynet.nn.FixedGate`;
    ``"rezero"`` :class:`~highwaynet.nn.ReZero` (α = 0); ``"layerscale"``
    :class:`~highwaynet.nn.LayerScale` starting at :func:`~highwaynet.nn.layerscale_init` of the
    depth; ``"deepnorm"`` :class:`~highwaynet.nn.DeepNormSum` with :func:`~highwaynet.nn.deepnorm_alpha`
    of the depth; ``"highway"`` :class:`~highwaynet.nn.HighwayGate`; ``"gtrxl"``
    :class:`~highwaynet.nn.GRUGate` in the paper's form (ReLU included). The gates' bias is
    ``gate_bias`` (default −2)."""
    if kind not in CONNECTIONS:
        raise ValueError(f"residual must be one of {', '.join(CONNECTIONS)}, got {kind!r}")
    bias = -2.0 if gate_bias is None else gate_bias
    if kind == "fixed":
        return FixedGate(bias=bias)
    if kind == "rezero":
        return ReZero()
    if kind == "layerscale":
        return LayerScale(dim, init=layerscale_init(num_layers))
    if kind == "deepnorm":
        return DeepNormSum(alpha=deepnorm_alpha(num_layers))
    if kind == "highway":
        return HighwayGate(dim, bias=bias)
    if kind == "gtrxl":
        return GRUGate(dim, bias=bias)
    return Sum()


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention over ``(B, T, dim)``, as one fused kernel where the device has it."""

    def __init__(self, dim: int, heads: int, *, dropout: float = 0.0) -> None:
        super().__init__()
        dim, heads, dropout = check_size("dim", dim), check_size("heads", heads), check_probability("dropout", dropout)
        if dim % heads:
            raise ValueError(f"dim {dim} must be a multiple of heads {heads}")
        self.dim, self.heads, self.dropout = dim, heads, dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.out_dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        check_input("CausalSelfAttention", "x", x, self.qkv.weight)
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"CausalSelfAttention expects x of shape (B, T, {self.dim}), got {tuple(x.shape)}")
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(x).split(d, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.out_dropout(self.proj(y.transpose(1, 2).reshape(b, t, d)))

    def extra_repr(self) -> str:
        return settings_repr(self)


class _MLP(nn.Sequential):
    def __init__(self, dim: int, hidden: int, dropout: float) -> None:
        super().__init__(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim), nn.Dropout(dropout))


class TransformerBlock(nn.Module):
    """Attention, then an MLP, each inside a :class:`~highwaynet.nn.Residual` whose combiner is
    ``residual``'s (:func:`make_combine`), with the LayerNorms placed by ``norm``: inside each branch
    before its sublayer (``"pre"``), after each connection (``"post"``) or nowhere (``"none"``).

    ``num_layers`` is the depth of the stack the block sits in (the depth-dependent combiners'
    settings follow it); ``mlp_hidden`` the MLP's hidden width (default ``4 * dim``).

    Shape:
        ``x``: ``(B, T, dim)``; the output has its shape.
    """

    def __init__(self, dim: int, heads: int, *, residual: str = "residual", norm: str = "pre",
                 mlp_hidden: int | None = None, dropout: float = 0.0, gate_bias: float | None = None,
                 num_layers: int = 1) -> None:
        super().__init__()
        dim, num_layers = check_size("dim", dim), check_size("num_layers", num_layers)
        check_choice("residual", residual, CONNECTIONS)
        check_choice("norm", norm, NORM_PLACEMENTS)
        if gate_bias is not None:
            check_gate_bias(gate_bias)
        if residual == "deepnorm" and norm != "post":
            raise ValueError(f"residual 'deepnorm' is LN(αx + F(x)): it needs norm='post', got norm={norm!r}")
        self.dim, self.heads, self.residual, self.norm = dim, heads, residual, norm
        self.mlp_hidden = 4 * dim if mlp_hidden is None else check_size("mlp_hidden", mlp_hidden)
        self.dropout, self.gate_bias, self.num_layers = dropout, gate_bias, num_layers

        def branch(inner: nn.Module) -> nn.Module:
            return nn.Sequential(nn.LayerNorm(dim), inner) if norm == "pre" else inner

        def combine() -> nn.Module:
            return make_combine(residual, dim, num_layers, gate_bias=gate_bias)

        self.attn = Residual(branch(CausalSelfAttention(dim, heads, dropout=dropout)), combine())
        self.mlp = Residual(branch(_MLP(dim, self.mlp_hidden, dropout)), combine())
        self.norm_attn = nn.LayerNorm(dim) if norm == "post" else nn.Identity()
        self.norm_mlp = nn.LayerNorm(dim) if norm == "post" else nn.Identity()

    def sublayers(self) -> tuple[CausalSelfAttention, _MLP]:
        """The attention and the MLP (inside their connections; with ``norm="pre"``, behind their LayerNorm)."""
        def inner(connection: Residual) -> nn.Module:
            module = connection.sublayer
            return module[1] if isinstance(module, nn.Sequential) and isinstance(module[0], nn.LayerNorm) else module
        return cast(CausalSelfAttention, inner(self.attn)), cast(_MLP, inner(self.mlp))

    def output_projections(self) -> list[Tensor]:
        """The weights that write each sublayer's output into the residual stream (GPT-2 scales their
        initialisation with the depth): the attention's projection, the MLP's second layer."""
        attention, mlp = self.sublayers()
        return [attention.proj.weight, cast(nn.Linear, mlp[2]).weight]

    def forward(self, x: Tensor) -> Tensor:
        return self.norm_mlp(self.mlp(self.norm_attn(self.attn(x))))

    def extra_repr(self) -> str:
        return settings_repr(self, mlp_hidden=None if self.mlp_hidden == 4 * self.dim else self.mlp_hidden)


class CausalTransformer(nn.Module):
    r"""A causal Transformer language model with the residual connections and LayerNorms of your choice.

    Args:
        vocab_size: tokens in the vocabulary.
        dim: the residual stream's width.
        num_layers: blocks (each: attention and an MLP).
        heads: attention heads (``dim`` must be a multiple of it).
        context: the most tokens a position attends to (the position embeddings' count).
        residual: each sublayer's connection, one of :data:`CONNECTIONS` (``"residual"``, ``"fixed"``,
            ``"rezero"``, ``"layerscale"``, ``"deepnorm"``, ``"highway"``, ``"gtrxl"``; see
            :func:`make_combine`).
        norm: the blocks' LayerNorms, ``"pre"``, ``"post"`` or ``"none"`` (``"deepnorm"`` needs ``"post"``).
        final_norm: a LayerNorm before the decoder (default: where the blocks have LayerNorms).
        mlp_ratio: the MLP's hidden width, in multiples of ``dim``.
        mlp_hidden: the MLP's hidden width (instead of ``mlp_ratio``: a wider MLP to match another
            model's parameters, say).
        dropout: on the attention weights and each sublayer's output.
        embed_dropout: on the embeddings (default: ``dropout``, as GPT-2 and nanoGPT have one).
        tie_weights: the decoder shares the token embedding's weights.
        gate_bias: the gates' initial bias (``"fixed"``, ``"highway"``, ``"gtrxl"``; default −2).

    Initialised as GPT-2 and nanoGPT are: every weight matrix, the gates' included, from
    :math:`\mathcal{N}(0, 0.02)`; each sublayer's output projection from
    :math:`\mathcal{N}(0, 0.02 / \sqrt{2L})` (not the gates'); biases at 0, but the gates' at
    ``gate_bias``; LayerNorms at the identity; ReZero's α at 0 and LayerScale's γ at its start.
    With ``residual="deepnorm"``, DeepNorm's instead of GPT-2's scaling: the attention's value and
    output projections and both MLP layers from :math:`\mathcal{N}(0, 0.02 \beta)`,
    :math:`\beta = (8L)^{-1/4}` (Wang et al., 2022, scaled the way their code scales its own
    initialisation).

    Shape:
        ``tokens``: ``(T, B)`` ids (``T`` at most ``context``); ``state``: ``(S, B)`` ids it may attend
        to before them (or None). Returns ``(logits (T, B, vocab_size), state)``, the state being the
        last ``context - 1`` tokens seen.

    Example::

        >>> model = CausalTransformer(65, 64, 4, heads=4, context=128, residual="highway")
        >>> logits, state = model(torch.randint(0, 65, (32, 8)))
        >>> logits.shape, state.shape
        (torch.Size([32, 8, 65]), torch.Size([32, 8]))
    """

    def __init__(self, vocab_size: int, dim: int, num_layers: int, *, heads: int = 4, context: int = 256,
                 residual: str = "residual", norm: str = "pre", final_norm: bool | None = None, mlp_ratio: int = 4,
                 mlp_hidden: int | None = None, dropout: float = 0.0, embed_dropout: float | None = None,
                 tie_weights: bool = True, gate_bias: float | None = None) -> None:
        super().__init__()
        for name, size in (("vocab_size", vocab_size), ("dim", dim), ("num_layers", num_layers), ("heads", heads),
                           ("context", context), ("mlp_ratio", mlp_ratio)):
            check_size(name, size)
        check_choice("residual", residual, CONNECTIONS)
        check_choice("norm", norm, NORM_PLACEMENTS)
        if final_norm is not None:
            check_flag("final_norm", final_norm)
        check_probability("dropout", dropout)
        if embed_dropout is not None:
            check_probability("embed_dropout", embed_dropout)
        if gate_bias is not None:
            check_gate_bias(gate_bias)
        if gate_bias is not None and residual not in GATED:
            raise ValueError(f"residual {residual!r} has no gate bias: only {', '.join(GATED)} have one")
        check_flag("tie_weights", tie_weights)
        self.vocab_size, self.dim, self.num_layers, self.heads, self.context = vocab_size, dim, num_layers, heads, \
            context
        self.residual, self.norm, self.mlp_ratio, self.dropout_p = residual, norm, mlp_ratio, dropout
        self.final_norm_setting = final_norm
        self.mlp_hidden = mlp_ratio * dim if mlp_hidden is None else check_size("mlp_hidden", mlp_hidden)
        self.embed_dropout, self.tie_weights, self.gate_bias = embed_dropout, tie_weights, gate_bias
        self.embed = nn.Embedding(vocab_size, dim)
        self.position = nn.Embedding(context, dim)
        self.dropout = nn.Dropout(dropout if embed_dropout is None else embed_dropout)
        self.blocks = nn.ModuleList(TransformerBlock(dim, heads, residual=residual, norm=norm,
                                                     mlp_hidden=self.mlp_hidden, dropout=dropout, gate_bias=gate_bias,
                                                     num_layers=num_layers) for _ in range(num_layers))
        has_final = norm != "none" if final_norm is None else final_norm
        self.final_norm = nn.LayerNorm(dim) if has_final else nn.Identity()
        self.decoder = nn.Linear(dim, vocab_size, bias=False)
        if tie_weights:
            self.decoder.weight = self.embed.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The initialisation the class's description gives."""
        blocks = cast("list[TransformerBlock]", list(self.blocks))
        combiners = [m for m in self.modules() if isinstance(m, _Combine)]
        for combine in combiners:  # (their biases, α and γ as each starts; their matrices are drawn below)
            combine.reset_parameters()
        kept = {id(p) for combine in combiners for p in combine.parameters() if p.dim() < 2}
        kept |= {id(m.weight) for m in self.modules() if isinstance(m, nn.LayerNorm)}  # (at 1: the identity)
        if self.residual == "deepnorm":
            beta, scaled = deepnorm_beta(self.num_layers), set()
            for block in blocks:
                attention, mlp = block.sublayers()
                scaled |= {id(attention.proj.weight), id(mlp[0].weight), id(mlp[2].weight)}
        else:
            beta = 1 / math.sqrt(2 * self.num_layers)
            scaled = {id(weight) for block in blocks for weight in block.output_projections()}
        with torch.no_grad():
            for p in self.parameters():  # (in module order, one draw each: a seed gives one model)
                if id(p) in kept:
                    continue
                if p.dim() >= 2:
                    p.normal_(0.0, 0.02 * beta if id(p) in scaled else 0.02)
                else:
                    p.zero_()
            if self.residual == "deepnorm":
                for block in blocks:  # the attention's value projection: the last third of [q; k; v]
                    attention = block.sublayers()[0]
                    attention.qkv.weight[2 * self.dim:].mul_(beta)

    def forward(self, tokens: Tensor, state: Tensor | None = None) -> tuple[Tensor, Tensor]:
        tokens = check_ids("CausalTransformer", "tokens", tokens, self.vocab_size, self.embed.weight)
        if tokens.dim() != 2 or tokens.shape[0] == 0:
            raise ValueError(f"CausalTransformer expects tokens of shape (T, B) with T >= 1, got {tuple(tokens.shape)}")
        if state is not None:
            state = check_ids("CausalTransformer", "state", state, self.vocab_size)
            check_same_device("tokens", tokens, state=state)
            if state.dim() != 2 or state.shape[1] != tokens.shape[1]:
                raise ValueError(f"CausalTransformer expects state of shape (S, B), token ids with the batch of "
                                 f"tokens ({tokens.shape[1]}), got {tuple(state.shape)}")
        if tokens.shape[0] > self.context:  # (a long prompt: in pieces, each attending to the one before)
            pieces = []
            for piece in tokens.split(max(1, self.context // 2)):
                logits, state = self(piece, state)
                pieces.append(logits)
            return torch.cat(pieces), cast(Tensor, state)
        seen = tokens if state is None else torch.cat([state, tokens])[-self.context:]
        x = seen.t()  # (B, T): the blocks work batch-first
        positions = torch.arange(x.shape[1], device=x.device)
        h = self.dropout(self.embed(x) + self.position(positions))
        for block in self.blocks:
            h = block(h)
        logits = self.decoder(self.final_norm(h[:, -tokens.shape[0]:])).transpose(0, 1)
        return logits, seen[-(self.context - 1):] if self.context > 1 else seen[:0]

    def extra_repr(self) -> str:
        return settings_repr(self, dropout=self.dropout_p, final_norm=self.final_norm_setting,
                             mlp_hidden=None if self.mlp_hidden == self.mlp_ratio * self.dim else self.mlp_hidden)
