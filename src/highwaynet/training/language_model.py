"""``LanguageModelTask``: contiguous batches, truncated BPTT, and perplexity or bits per character."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.corpora import Corpus

__all__ = ["LanguageModelTask", "batchify"]


def batchify(ids: Tensor, batch_size: int) -> Tensor:
    """Cut a 1-D stream of ids into ``batch_size`` contiguous streams: ``(N // batch_size, batch_size)``."""
    n = len(ids) // batch_size
    if n < 2:
        raise ValueError(f"{len(ids)} tokens are too few for batches of {batch_size} streams")
    return ids[: n * batch_size].view(batch_size, n).t().contiguous()


def _detach(state: Any) -> Any:
    if isinstance(state, Tensor):
        return state.detach()
    return tuple(_detach(s) for s in state) if state is not None else None


class LanguageModelTask:
    """A :class:`~highwaynet.training.Task` for next-token prediction on a :class:`Corpus`.

    The training split is cut into ``batch_size`` contiguous streams and read in windows of
    ``bptt`` tokens; the recurrent state is carried from one window to the next (and detached),
    and reset at the start of each pass. Each epoch starts at an offset drawn from
    ``(seed, epoch)``; with ``steps_per_epoch`` an epoch is that many windows from a random start
    (for time-boxed training on large corpora).

    Metrics: ``loss`` (nats per token) and ``ppl`` (perplexity, word level) or ``bpc`` (bits per
    character, char level).
    """

    def __init__(self, corpus: Corpus, batch_size: int = 32, bptt: int = 50, seed: int = 0,
                 eval_batch_size: int = 16, steps_per_epoch: int | None = None) -> None:
        self.corpus = corpus
        self.batch_size, self.bptt, self.seed = batch_size, bptt, seed
        self.eval_batch_size = eval_batch_size
        self.steps_per_epoch = steps_per_epoch
        self._streams = {"train": batchify(corpus.train, batch_size),
                         "val": batchify(corpus.valid, eval_batch_size),
                         "test": batchify(corpus.test, eval_batch_size)}
        self._state: Any = None

    def batches(self, split: str, epoch: int) -> Iterator[tuple[Tensor, Tensor]]:
        data = self._streams[split]
        start, stop = 0, len(data) - 1
        if split == "train":
            generator = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
            if self.steps_per_epoch:
                span = min(stop, self.steps_per_epoch * self.bptt)
                start = int(torch.randint(0, stop - span + 1, (1,), generator=generator))
                stop = start + span
            else:
                start = int(torch.randint(0, self.bptt, (1,), generator=generator))
        self._state = None
        for i in range(start, stop, self.bptt):
            n = min(self.bptt, stop - i)
            yield data[i:i + n], data[i + 1:i + 1 + n]

    def step(self, model: nn.Module, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        x, y = batch
        logits, state = model(x, self._state)
        self._state = _detach(state)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.reshape(-1))
        n = torch.tensor(float(y.numel()), device=y.device)
        return loss, {"loss": loss.detach() * n, "n": n}

    def summarize(self, sums: dict[str, float]) -> dict[str, float]:
        loss = sums["loss"] / sums["n"]
        if self.corpus.level == "char":
            return {"loss": loss, "bpc": loss / math.log(2)}
        return {"loss": loss, "ppl": math.exp(min(loss, 50.0))}
