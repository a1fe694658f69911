"""A causal Transformer language model whose residual connections are a setting.

A GPT-2-style decoder (token and position embeddings, blocks of causal self-attention and an MLP,
a decoder tied to the token embedding) in which each sublayer sits inside a
:class:`~highwaynet.nn.GatedResidual` of a chosen kind (plain residual, highway, GTrXL, ReZero), and
the LayerNorm's place is a setting too:

- ``"pre"``: ``x ⊕ F(LN(x))``, a final LN before the decoder (GPT-2's placement);
- ``"post"``: ``LN(x ⊕ F(x))`` (the original Transformer's);
- ``"none"``: ``x ⊕ F(x)``, no LayerNorm at all (ReZero's setting).

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

from .._checks import check_choice, check_flag, check_gate_bias, check_ids, check_probability, check_size
from ..nn._signature import settings_repr
from ..nn.residual import RESIDUAL_KINDS, GatedResidual

__all__ = ["NORM_PLACEMENTS", "CausalSelfAttention", "CausalTransformer", "TransformerBlock"]

#: Where a block's LayerNorms go.
NORM_PLACEMENTS = ("pre", "post", "none")


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention over ``(B, T, dim)``, as one fused kernel where the device has it."""

    def __init__(self, dim: int, heads: int, *, dropout: float = 0.0) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} must be a multiple of heads {heads}")
        self.dim, self.heads, self.dropout = dim, heads, dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.out_dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(x).split(d, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.out_dropout(self.proj(y.transpose(1, 2).reshape(b, t, d)))

    def extra_repr(self) -> str:
        return settings_repr(self)


class _MLP(nn.Sequential):
    def __init__(self, dim: int, ratio: int, dropout: float) -> None:
        super().__init__(nn.Linear(dim, ratio * dim), nn.GELU(), nn.Linear(ratio * dim, dim), nn.Dropout(dropout))


class TransformerBlock(nn.Module):
    """Attention, then an MLP, each inside a :class:`~highwaynet.nn.GatedResidual` of kind ``residual``,
    with the LayerNorms placed by ``norm`` (``"pre"``, ``"post"``, ``"none"``).

    Shape:
        ``x``: ``(B, T, dim)``; the output has its shape.
    """

    def __init__(self, dim: int, heads: int, *, residual: str = "residual", norm: str = "pre", mlp_ratio: int = 4,
                 dropout: float = 0.0, gate_bias: float | None = None) -> None:
        super().__init__()
        if norm not in NORM_PLACEMENTS:
            raise ValueError(f"norm must be one of {', '.join(NORM_PLACEMENTS)}, got {norm!r}")
        self.dim, self.heads, self.residual, self.norm, self.mlp_ratio = dim, heads, residual, norm, mlp_ratio
        self.dropout, self.gate_bias = dropout, gate_bias

        def sublayer(inner: nn.Module) -> nn.Module:
            return nn.Sequential(nn.LayerNorm(dim), inner) if norm == "pre" else inner

        bias = gate_bias if residual in ("highway", "gtrxl") else None
        self.attn = GatedResidual(sublayer(CausalSelfAttention(dim, heads, dropout=dropout)), dim, kind=residual,
                                  gate_bias=bias)
        self.mlp = GatedResidual(sublayer(_MLP(dim, mlp_ratio, dropout)), dim, kind=residual, gate_bias=bias)
        self.norm_attn = nn.LayerNorm(dim) if norm == "post" else nn.Identity()
        self.norm_mlp = nn.LayerNorm(dim) if norm == "post" else nn.Identity()

    def output_projections(self) -> list[Tensor]:
        """The weights that write each sublayer's output into the residual stream (GPT-2 scales their
        initialisation with the depth): the attention's projection, the MLP's second layer."""
        def branch(connection: GatedResidual) -> nn.Module:
            inner = connection.sublayer  # (with norm="pre", behind its LayerNorm)
            return inner[1] if isinstance(inner, nn.Sequential) and isinstance(inner[0], nn.LayerNorm) else inner
        return [cast(CausalSelfAttention, branch(self.attn)).proj.weight,
                cast(nn.Linear, cast(_MLP, branch(self.mlp))[2]).weight]

    def forward(self, x: Tensor) -> Tensor:
        return self.norm_mlp(self.mlp(self.norm_attn(self.attn(x))))

    def extra_repr(self) -> str:
        return settings_repr(self)


class CausalTransformer(nn.Module):
    r"""A causal Transformer language model with the residual connections and LayerNorms of your choice.

    Args:
        vocab_size: tokens in the vocabulary.
        dim: the residual stream's width.
        num_layers: blocks (each: attention and an MLP).
        heads: attention heads (``dim`` must be a multiple of it).
        context: the most tokens a position attends to (the position embeddings' count).
        residual: each sublayer's connection, one of :data:`~highwaynet.nn.RESIDUAL_KINDS`
            (``"residual"``, ``"highway"``, ``"gtrxl"``, ``"rezero"``).
        norm: the LayerNorms' place, ``"pre"``, ``"post"`` or ``"none"``.
        mlp_ratio: the MLP's hidden width, in multiples of ``dim``.
        dropout: on the attention weights and each sublayer's output.
        embed_dropout: on the embeddings (default: ``dropout``, as GPT-2 and nanoGPT have one).
        tie_weights: the decoder shares the token embedding's weights.
        gate_bias: the gates' initial bias (highway and gtrxl; default −2).

    Initialised as GPT-2 and nanoGPT are: every weight from :math:`\mathcal{N}(0, 0.02)`, each
    sublayer's output projection from :math:`\mathcal{N}(0, 0.02 / \sqrt{2L})`, biases at 0.

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
                 residual: str = "residual", norm: str = "pre", mlp_ratio: int = 4, dropout: float = 0.0,
                 embed_dropout: float | None = None, tie_weights: bool = True, gate_bias: float | None = None) -> None:
        super().__init__()
        check_choice("residual", residual, RESIDUAL_KINDS)
        for name, size in (("vocab_size", vocab_size), ("dim", dim), ("num_layers", num_layers), ("heads", heads),
                           ("context", context), ("mlp_ratio", mlp_ratio)):
            check_size(name, size)
        check_choice("norm", norm, NORM_PLACEMENTS)
        check_probability("dropout", dropout)
        if embed_dropout is not None:
            check_probability("embed_dropout", embed_dropout)
        if gate_bias is not None:
            check_gate_bias(gate_bias)
        check_flag("tie_weights", tie_weights)
        self.vocab_size, self.dim, self.num_layers, self.heads, self.context = vocab_size, dim, num_layers, heads, \
            context
        self.residual, self.norm, self.mlp_ratio, self.dropout_p = residual, norm, mlp_ratio, dropout
        self.embed_dropout, self.tie_weights, self.gate_bias = embed_dropout, tie_weights, gate_bias
        self.embed = nn.Embedding(vocab_size, dim)
        self.position = nn.Embedding(context, dim)
        self.dropout = nn.Dropout(dropout if embed_dropout is None else embed_dropout)
        self.blocks = nn.ModuleList(TransformerBlock(dim, heads, residual=residual, norm=norm, mlp_ratio=mlp_ratio,
                                                     dropout=dropout, gate_bias=gate_bias) for _ in range(num_layers))
        self.final_norm = nn.LayerNorm(dim) if norm == "pre" else nn.Identity()
        self.decoder = nn.Linear(dim, vocab_size, bias=False)
        if tie_weights:
            self.decoder.weight = self.embed.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2's initialisation (see the class's description); the gates start as they are built to."""
        blocks = cast("list[TransformerBlock]", list(self.blocks))
        scaled = {id(weight) for block in blocks for weight in block.output_projections()}
        with torch.no_grad():
            for name, p in self.named_parameters():  # (in module order, one draw each: a seed gives one model)
                if name.endswith("bias"):
                    p.zero_()
                elif p.dim() >= 2:
                    p.normal_(0.0, 0.02 / math.sqrt(2 * self.num_layers) if id(p) in scaled else 0.02)
            for block in blocks:
                for connection in (block.attn, block.mlp):
                    connection.reset_gate_parameters()

    def forward(self, tokens: Tensor, state: Tensor | None = None) -> tuple[Tensor, Tensor]:
        tokens = check_ids("CausalTransformer", "tokens", tokens, self.vocab_size)
        if tokens.dim() != 2 or tokens.shape[0] == 0:
            raise ValueError(f"CausalTransformer expects tokens of shape (T, B) with T >= 1, got {tuple(tokens.shape)}")
        if state is not None:
            state = check_ids("CausalTransformer", "state", state, self.vocab_size)
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
        return settings_repr(self, dropout=self.dropout_p)
