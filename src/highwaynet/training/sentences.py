"""``SentenceTask``: variable-length sentences, bucketed by length and padded per batch."""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_finite, check_size
from .adversarial import adversarial_loss
from .classification import ClassificationTask

__all__ = ["SentenceTask", "pad_batch"]


def pad_batch(sentences: list[Tensor], min_length: int = 1) -> tuple[Tensor, Tensor]:
    """``(tokens (B, T), lengths (B,))``: right-padded with id 0 to the longest (at least ``min_length``)."""
    lengths = torch.tensor([len(s) for s in sentences])
    tokens = torch.zeros(len(sentences), max(int(lengths.max()), min_length), dtype=torch.long)
    for i, s in enumerate(sentences):
        tokens[i, :len(s)] = s
    return tokens, lengths


class SentenceTask(ClassificationTask):
    """Sentence classification batches ``(tokens, lengths, labels)``; loss and metrics as :class:`ClassificationTask`.

    Training batches are bucketed: the epoch's shuffled order (from ``(seed, epoch)``) is cut into
    pools of 50 batches, each pool sorted by length and cut into batches, and the batches shuffled,
    so that little padding is computed. ``min_length`` pads short batches (a CNN's widest filter).

    ``adversarial`` > 0 trains on each batch twice, as it is and with its word vectors moved that far
    against the model (:mod:`highwaynet.training.adversarial`; the model needs one ``nn.Embedding``):
    the loss minimised is the sum of the two, at about twice the time a step; the reported ``loss`` stays the
    clean one, so curves compare with and without.
    """

    #: Not as a CUDA graph: the (Bi)LSTM encoders pack each batch by its lengths, read on the host
    #: (``pack_padded_sequence``), and each batch has a length of its own, a graph shape of its own.
    graph_safe = False

    def __init__(self, splits, batch_size: int = 50, seed: int = 0, eval_batch_size: int = 500,
                 min_length: int = 1, adversarial: float = 0.0) -> None:
        super().__init__(splits, batch_size, seed, eval_batch_size)
        if check_finite("adversarial", adversarial) < 0:
            raise ValueError(f"adversarial is a step length >= 0 (0: off), got {adversarial}")
        self.min_length = check_size("min_length", min_length)
        self.adversarial = adversarial

    def step(self, model: nn.Module, batch: tuple[Tensor, ...]) -> tuple[Tensor, dict[str, Tensor]]:
        if not (model.training and self.adversarial):
            return super().step(model, batch)
        tokens, lengths, y = batch
        logits, loss, adversarial = adversarial_loss(model, (tokens, lengths), lambda z: F.cross_entropy(z.float(), y),
                                                     self.adversarial, valid=tokens != 0)
        return loss + adversarial, self.batch_stats(logits.float(), loss, y)

    def batches(self, split: str, epoch: int) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
        sentences, labels = self.splits[split]
        lengths = torch.tensor([len(s) for s in sentences])
        if split == "train":
            generator = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
            order = torch.randperm(len(labels), generator=generator)
            pool = self.batch_size * 50
            chunks = []
            for i in range(0, len(order), pool):
                part = order[i:i + pool]
                part = part[torch.argsort(lengths[part], stable=True)]
                chunks += list(part.split(self.batch_size))
            batches = [chunks[i] for i in torch.randperm(len(chunks), generator=generator).tolist()]
        else:
            batches = torch.argsort(lengths, stable=True).split(self.eval_batch_size)
        for index in batches:
            tokens, lens = pad_batch([sentences[i] for i in index.tolist()], self.min_length)
            yield tokens, lens, labels[index]
