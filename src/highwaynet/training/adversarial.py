r"""Adversarial training on word vectors (Miyato, Dai & Goodfellow, 2017).

Each training step adds, to the clean loss, the loss on the same batch with every sentence's word
vectors ``e`` moved a small step in the direction that raises the loss most:

.. math::
    g = \nabla_e \mathcal{L}(e), \qquad
    r = \epsilon \cdot \mathrm{rms}(e) \cdot g / \lVert g \rVert_2, \qquad
    \mathcal{L}_\mathrm{total} = \mathcal{L}(e) + \mathcal{L}(e + r)

per sentence: ``‖g‖`` is the norm over all of the sentence's word vectors, and ``rms(e)`` the root
mean square of its real words' coordinates, so that ``epsilon`` is in units of the word vectors'
own scale (Miyato et al. normalise the vectors to unit variance and perturb those; scaling the step
instead leaves the model as it is, and a model cannot escape the step by growing its vectors). ``r``
is a constant of the step: no gradient flows through it. Each sentence's step depends on it alone,
so processes that split a batch under torchrun perturb it as one process does.

The perturbation is added to the output of the model's one :class:`torch.nn.Embedding` by a forward
hook that lives for the step, so the model needs no change (and may be wrapped in
DistributedDataParallel: the hook is on the wrapped model's own embedding). The clean loss is
differentiated twice, to the word vectors and then with the adversarial loss to the weights, which
``torch.compile``'s graphs do not allow: a compiled model is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

__all__ = ["adversarial_loss", "word_embedding"]


def word_embedding(model: nn.Module) -> nn.Embedding:
    """The one :class:`~torch.nn.Embedding` in ``model`` (found through wrappers), whose output is perturbed."""
    found = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    if len(found) != 1:
        raise ValueError(f"adversarial training perturbs the word vectors of a model with one nn.Embedding; "
                         f"{type(model).__name__} has {len(found)}")
    return found[0]


@contextmanager
def _hooked(embedding: nn.Embedding, hook: Callable[[Tensor], Tensor | None]) -> Iterator[None]:
    handle = embedding.register_forward_hook(lambda module, inputs, output: hook(output))
    try:
        yield
    finally:
        handle.remove()


def adversarial_loss(model: nn.Module, inputs: tuple[Tensor, ...], loss_fn: Callable[[Tensor], Tensor],
                     epsilon: float, valid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    r"""``(clean logits, clean loss, adversarial loss)`` for one batch; train on their two losses' sum.

    Args:
        model: takes ``*inputs`` and returns logits; it has one ``nn.Embedding`` (the word vectors).
        inputs: the model's inputs, token ids ``(B, T)`` first.
        loss_fn: logits -> the batch's mean loss.
        epsilon: the step's length in units of each sentence's word-vector scale (see the module).
        valid: ``(B, T)``, True at real words (not padding): the scale is measured over these.
    """
    if hasattr(model, "_orig_mod"):  # torch.compile's module
        raise ValueError("adversarial training does not combine with torch.compile: it differentiates the clean "
                         "loss twice, which compiled graphs do not allow (their buffers are freed after one "
                         "backward); train the model uncompiled")
    words: list[Tensor] = []
    with _hooked(word_embedding(model), words.append):
        logits = model(*inputs)
    loss = loss_fn(logits)
    if len(words) != 1:
        raise RuntimeError(f"the model's nn.Embedding ran {len(words)} times in one forward; adversarial "
                           f"training expects it once")
    e = words[0]
    (g,) = torch.autograd.grad(loss, e, retain_graph=True)
    with torch.no_grad():
        g = g.float()
        mask = valid.to(e.device).unsqueeze(-1)
        scale = (e.float().square() * mask).sum((1, 2)) / (mask.sum((1, 2)) * e.shape[-1]).clamp(min=1)
        norm = g.flatten(1).norm(dim=1).clamp(min=1e-12)
        r = (g * (epsilon * scale.sqrt() / norm)[:, None, None]).to(e.dtype)
    with _hooked(word_embedding(model), lambda output: output + r):
        adversarial = loss_fn(model(*inputs))
    return logits, loss, adversarial
