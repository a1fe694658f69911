r"""ELMo for downstream models: a learned scalar mix of the biLM's layers (bilm-tf's ``weight_layers``).

.. math::
    \mathrm{ELMo} = \gamma \sum_{k=0}^{L} s_k \, \mathrm{LN}(h_k), \qquad s = \operatorname{softmax}(w)

with ``w`` (zeros at first) and ``γ`` (1 at first) learned per output, and ``LN`` the optional layer
normalisation as bilm-tf's ``weight_layers(..., do_layer_norm=True)`` defines it: one mean and one
variance per layer over *all* the batch's valid entries (every token of every sentence, every
feature; sentence boundaries already removed), no learned scale or shift, epsilon ``1e-12``.
(AllenNLP's ``ScalarMix`` computes the same statistics, but before removing the boundaries.)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .._checks import (
    check_factory,
    check_flag,
    check_probability,
    check_same_device,
    check_size,
    check_tensor,
    describe,
)
from ..nn._signature import settings_repr
from .bilm import ELMoBiLM, _check_mask
from .chars import BOS, EOS

__all__ = ["ELMo", "ScalarMix", "remove_sentence_boundaries"]


def remove_sentence_boundaries(layer: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``layer`` ``(B, T, D)`` and ``mask`` ``(B, T)`` without each row's first and last valid positions
    (the ``<S>`` and ``</S>`` that :func:`~highwaynet.elmo.batch_to_ids` adds): ``(B, T - 2, D)`` and
    ``(B, T - 2)``, zeros where the new mask is False."""
    check_tensor("layer", layer)
    check_tensor("mask", mask, kind=None)
    if layer.dim() != 3 or mask.dtype != torch.bool or mask.shape != layer.shape[:2]:
        raise ValueError(f"remove_sentence_boundaries expects layer (B, T, D) and mask (B, T) bool, got "
                         f"{describe(layer)} and {describe(mask)}")
    if layer.shape[1] < 2:
        raise ValueError(f"remove_sentence_boundaries: rows need <S> and </S>, got {layer.shape[1]} positions")
    check_same_device("layer", layer, mask=mask)
    _check_mask(mask, "remove_sentence_boundaries: mask")
    kept = mask[:, 2:]  # position j of the result is position j + 1, valid while j + 2 < length
    # (zeros chosen, not multiplied in: padding of inf or NaN times 0 would be NaN)
    return torch.where(kept.unsqueeze(-1), layer[:, 1:-1], layer.new_zeros(())), kept


class ScalarMix(nn.Module):
    r"""A learned mix of ``num_layers`` tensors of one shape: :math:`\gamma \sum_k \operatorname{softmax}(w)_k
    \, \mathrm{LN}(h_k)`, ``LN`` the masked whole-batch normalisation of bilm-tf (see the module's text)
    where ``layer_norm``.

    Args:
        num_layers: how many tensors are mixed.
        layer_norm: normalise each tensor first. Default: False.
        trainable: learn ``w`` and ``γ`` (else they stay uniform and 1). Default: True.
        device, dtype: where and in what type the parameters are made.

    Shape:
        - Input: ``layers``, ``num_layers`` tensors ``(B, T, D)``; ``mask`` ``(B, T)`` bool (needed
          with ``layer_norm``).
        - Output: ``(B, T, D)``.

    Example::

        >>> mix = ScalarMix(3)
        >>> round(mix([torch.ones(2, 4, 8), torch.zeros(2, 4, 8), torch.zeros(2, 4, 8)])[0, 0, 0].item(), 4)
        0.3333
    """

    def __init__(self, num_layers: int, *, layer_norm: bool = False, trainable: bool = True,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        num_layers = check_size("num_layers", num_layers)
        layer_norm, trainable = check_flag("layer_norm", layer_norm), check_flag("trainable", trainable)
        factory = check_factory(device, dtype)
        self.num_layers, self.layer_norm, self.trainable = num_layers, layer_norm, trainable
        self.weights = nn.Parameter(torch.zeros(num_layers, **factory), requires_grad=trainable)
        self.gamma = nn.Parameter(torch.ones(1, **factory), requires_grad=trainable)

    def forward(self, layers: Sequence[Tensor], mask: Tensor | None = None) -> Tensor:
        if isinstance(layers, Tensor) or not isinstance(layers, Sequence):
            raise TypeError(f"ScalarMix expects layers to be a list of {self.num_layers} tensors, got "
                            f"{describe(layers)}")
        if len(layers) != self.num_layers:
            raise ValueError(f"ScalarMix expects {self.num_layers} tensors, got {len(layers)} layers")
        for i, layer in enumerate(layers):
            check_tensor(f"layers[{i}]", layer, owner="ScalarMix")
            if layer.shape != layers[0].shape:
                raise ValueError(f"ScalarMix expects layers of one shape, got {tuple(layers[0].shape)} (layers[0]) "
                                 f"and {tuple(layer.shape)} (layers[{i}])")
        if self.layer_norm and mask is None:
            raise ValueError("ScalarMix(layer_norm=True) needs the mask: its statistics are over the valid entries")
        if mask is not None:
            check_tensor("mask", mask, owner="ScalarMix", kind=None)
            if mask.dtype != torch.bool or mask.shape != layers[0].shape[:-1]:
                raise ValueError(f"ScalarMix expects mask a bool tensor of shape {tuple(layers[0].shape[:-1])}, got "
                                 f"{describe(mask)}")
        # (the layers, and the mask, where the mix's weights are: else torch's "Expected all tensors to be on the
        # same device" from inside the sum)
        check_same_device("ScalarMix", self.weights, **{f"layers[{i}]": layer for i, layer in enumerate(layers)},
                          mask=mask)
        shares = torch.softmax(self.weights, dim=0)
        total: Tensor | None = None
        for share, layer in zip(shares, layers, strict=True):
            piece = share * (self._normalise(layer, mask) if self.layer_norm and mask is not None else layer)
            total = piece if total is None else total + piece
        assert total is not None
        return self.gamma * total

    @staticmethod
    def _normalise(layer: Tensor, mask: Tensor) -> Tensor:
        keep = mask.unsqueeze(-1).to(layer.dtype)
        valid = keep.sum()
        count = (valid * layer.shape[-1]).clamp(min=1)  # (no valid entry: no 0 / 0)
        mean = (layer * keep).sum() / count
        variance = (((layer * keep - mean) * keep) ** 2).sum() / count
        # (no valid entry: zeros, not the padding scaled by 1e6 through a variance of 0)
        return (layer - mean) * torch.rsqrt(variance + 1e-12) * (valid > 0).to(layer.dtype)

    def extra_repr(self) -> str:
        return settings_repr(self)


class ELMo(nn.Module):
    r"""ELMo representations for a downstream model: the biLM's layers mixed by ``num_outputs`` learned
    :class:`ScalarMix` es, the sentence boundaries removed, then dropout (AllenNLP's ``Elmo``).

    Args:
        bilm: the :class:`ELMoBiLM` (:meth:`from_files` loads one).
        num_outputs: how many mixes (one per place the downstream model reads ELMo). Default: 1.
        dropout: dropout on each output. Default: 0.5.
        layer_norm: normalise each layer before mixing (bilm-tf's ``do_layer_norm``). Default: False.
        requires_grad: fine-tune the biLM too (else it stays frozen; the mixes always learn). Default: False.

    Shape:
        - Input: ``ids`` ``(B, T + 2, 50)`` from :func:`~highwaynet.elmo.batch_to_ids`.
        - Output: ``(outputs, mask)``: ``num_outputs`` tensors ``(B, T, 2 P)``, one row per token (no
          ``<S>``/``</S>``), zeros past each sentence's end; ``mask`` ``(B, T)`` bool.

    Example::

        >>> from highwaynet.elmo import batch_to_ids
        >>> bilm = ELMoBiLM(16, 32, 2, filters=((1, 8), (2, 8)), num_highway=1, char_dim=4)
        >>> elmo = ELMo(bilm, dropout=0.0)
        >>> (vectors,), mask = elmo(batch_to_ids([["Hello", "world"], ["Hi"]]))
        >>> vectors.shape, mask.tolist()
        (torch.Size([2, 2, 32]), [[True, True], [True, False]])
    """

    def __init__(self, bilm: ELMoBiLM, num_outputs: int = 1, *, dropout: float = 0.5, layer_norm: bool = False,
                 requires_grad: bool = False) -> None:
        super().__init__()
        if not isinstance(bilm, ELMoBiLM):
            raise TypeError(f"ELMo takes bilm, an ELMoBiLM (ELMo.from_files loads one), got {describe(bilm)}")
        num_outputs, dropout = check_size("num_outputs", num_outputs), check_probability("dropout", dropout)
        layer_norm, requires_grad = check_flag("layer_norm", layer_norm), check_flag("requires_grad", requires_grad)
        self.bilm, self.num_outputs = bilm, num_outputs
        self.dropout_p, self.layer_norm, self.requires_grad = dropout, layer_norm, requires_grad
        bilm.requires_grad_(requires_grad)
        parameter = next(bilm.parameters())
        self.mixes = nn.ModuleList(ScalarMix(bilm.num_layers + 1, layer_norm=layer_norm, device=parameter.device,
                                             dtype=parameter.dtype) for _ in range(num_outputs))
        self.dropout = nn.Dropout(dropout)
        self.output_size = bilm.output_size

    @classmethod
    def from_files(cls, options: str | Path | dict[str, Any], weights: str | Path, num_outputs: int = 1, *,
                   stateful: bool = True, device: torch.device | str | None = None, dtype: torch.dtype | None = None,
                   **kwargs: Any) -> ELMo:
        """ELMo on the biLM a bilm-tf ``options.json`` and ``weights.hdf5`` describe (see
        :meth:`ELMoBiLM.from_files`); ``kwargs``: ``dropout``, ``layer_norm``, ``requires_grad``."""
        return cls(ELMoBiLM.from_files(options, weights, stateful=stateful, device=device, dtype=dtype), num_outputs,
                   **kwargs)

    def forward(self, ids: Tensor) -> tuple[list[Tensor], Tensor]:
        layers, mask = self.bilm(ids)
        if ids.shape[1] < 2:
            raise ValueError(f"ELMo expects ids with each sentence's <S> and </S> rows (at least 2 positions, as "
                             f"highwaynet.elmo.batch_to_ids makes them), got {ids.shape[1]}")
        lengths = mask.sum(1)
        starts = ids[:, 0, 1]
        ends = ids[torch.arange(ids.shape[0], device=ids.device), (lengths - 1).clamp(min=0), 1]
        if bool(((lengths > 0) & ((lengths < 2) | (starts != BOS + 1) | (ends != EOS + 1))).any()):
            raise ValueError("ELMo: each sentence's ids must begin with <S> and end with </S>, as "
                             "highwaynet.elmo.batch_to_ids makes them")
        trimmed = [remove_sentence_boundaries(layer, mask) for layer in layers]
        kept = trimmed[0][1]
        outputs = [self.dropout(mix([t for t, _ in trimmed], kept)) for mix in self.mixes]
        return outputs, kept

    def extra_repr(self) -> str:
        return settings_repr(self, dropout=self.dropout_p)
