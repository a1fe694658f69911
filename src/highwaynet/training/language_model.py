"""``LanguageModelTask``: contiguous batches, truncated BPTT, and perplexity or bits per character."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_flag, check_int, check_size
from ..data.corpora import Corpus
from .cuda_graph import _copy_into

__all__ = ["LanguageModelTask", "batchify"]


def batchify(ids: Tensor, batch_size: int) -> Tensor:
    """Cut a 1-D stream of ids into ``batch_size`` contiguous streams: ``(N // batch_size, batch_size)``."""
    n = len(ids) // batch_size
    if n < 2:
        raise ValueError(f"{len(ids)} tokens are too few for batches of {batch_size} streams")
    return ids[: n * batch_size].view(batch_size, n).t().contiguous()


#: Each split's file in a corpus folder, and the setting (and option) that sets its streams.
_SPLITS = {"train": ("train", "train.txt", "batch_size", "--batch-size"),
           "val": ("valid", "valid.txt", "eval_batch_size", "--eval-batch-size"),
           "test": ("test", "test.txt", "eval_batch_size", "--eval-batch-size")}


def _streams_of(corpus: Corpus, split: str, width: int) -> Tensor:
    """:func:`batchify` of a split, with a message that names the split's file and the setting to change
    where it is too short for ``width`` streams."""
    attribute, file, setting, option = _SPLITS[split]
    ids = getattr(corpus, attribute)
    if len(ids) // width < 2:
        smaller = f", or make {setting} smaller ({option} {len(ids) // 2} or less)" if len(ids) >= 2 else ""
        tokens = f"{len(ids)} token" + ("" if len(ids) == 1 else "s")
        raise ValueError(f"the {attribute} split of corpus {corpus.name!r} ({file} in a corpus folder) holds "
                         f"{tokens}, too few for {width} streams of 2 tokens or more: give it more text{smaller}")
    return batchify(ids, width)


def _map(fn, state: Any) -> Any:
    """``fn`` on each tensor of a recurrent state: a tensor (RHN) or a tuple of them (LSTM's ``(h, c)``)."""
    return fn(state) if isinstance(state, Tensor) else tuple(_map(fn, s) for s in state)


class LanguageModelTask:
    """A :class:`~highwaynet.training.Task` for next-token prediction on a :class:`Corpus`.

    The training split is cut into ``batch_size`` contiguous streams and read in windows of
    ``bptt`` tokens; the recurrent state is carried from one window to the next (and detached),
    and reset at the start of each pass. Each epoch starts at an offset drawn from
    ``(seed, epoch)``; with ``steps_per_epoch`` an epoch is that many windows from a random start
    (for time-boxed training on large corpora).

    Metrics: ``loss`` (nats per token) and ``ppl`` (perplexity, word level) or ``bpc`` (bits per
    character, char level).

    With ``eval_windows`` a validation reads only the first that many windows of the split (the same
    ones each time: a cheaper estimate, for studies of many short runs); the test split is always
    read whole. With ``carry_state=False``
    each window is read alone (a Transformer's, which attends within its
    window; the state it returns is not carried to the next).

    The carried state lives in one buffer per batch width, written in place after each window and
    zeroed in place at the start of a pass (a zero state is what the models start from anyway):
    its address never changes, so a training step can be replayed as a CUDA graph that reads the
    previous window's state and writes the next.
    """

    #: A step reads and writes only tensors of fixed address (the batch, the state buffer).
    graph_safe = True
    #: Windows are ``(T, B)``: data-parallel processes each take some of the B streams, whole.
    batch_dim = 1

    def __init__(self, corpus: Corpus, batch_size: int = 32, bptt: int = 50, seed: int = 0,
                 eval_batch_size: int = 16, steps_per_epoch: int | None = None, carry_state: bool = True,
                 eval_windows: int | None = None) -> None:
        batch_size, bptt, eval_batch_size = (check_size("batch_size", batch_size), check_size("bptt", bptt),
                                             check_size("eval_batch_size", eval_batch_size))
        seed, carry_state = check_int("seed", seed), check_flag("carry_state", carry_state)
        steps_per_epoch = None if steps_per_epoch is None else check_size("steps_per_epoch", steps_per_epoch)
        eval_windows = None if eval_windows is None else check_size("eval_windows", eval_windows)
        self.corpus = corpus
        self.carry_state, self.eval_windows = carry_state, eval_windows
        self.batch_size, self.bptt, self.seed = batch_size, bptt, seed
        self.eval_batch_size = eval_batch_size
        self.steps_per_epoch = steps_per_epoch
        self._streams = {split: _streams_of(corpus, split, width) for split, width in
                         (("train", batch_size), ("val", eval_batch_size), ("test", eval_batch_size))}
        self._states: dict[int, Any] = {}  # batch width -> the state carried to the next window

    def to(self, device: torch.device) -> LanguageModelTask:
        """Keep the token streams on ``device`` (the Trainer calls this): windows are then views there."""
        self._streams = {k: v.to(device) for k, v in self._streams.items()}
        self._states = {}
        return self

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
        elif split == "val" and self.eval_windows:  # (the same first windows at every validation)
            stop = min(stop, self.eval_windows * self.bptt)
        with torch.no_grad():
            for state in self._states.values():
                _map(Tensor.zero_, state)
        for i in range(start, stop, self.bptt):
            n = min(self.bptt, stop - i)
            yield data[i:i + n], data[i + 1:i + 1 + n]

    def step(self, model: nn.Module, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        x, y = batch
        if not self.carry_state:  # (a model that reads each window alone: a Transformer)
            logits, _ = model(x, None)
            return self._loss(logits, y)
        carried = self._states.get(x.shape[1])
        # The model gets a copy: the buffer is overwritten below, before the backward that may need
        # the initial state.
        logits, state = model(x, None if carried is None else _map(Tensor.clone, carried))
        with torch.no_grad():
            if carried is None:
                self._states[x.shape[1]] = _map(Tensor.clone, _map(Tensor.detach, state))
            else:
                _copy_into(carried, state)
        return self._loss(logits, y)

    @staticmethod
    def _loss(logits: Tensor, y: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        n = torch.full((), float(y.numel()), device=y.device)
        return loss, {"loss": loss.detach() * n, "n": n}

    @property
    def metric_names(self) -> tuple[str, ...]:
        """What :meth:`summarize` returns (a monitored metric must be one of them)."""
        return ("loss", "bpc") if self.corpus.level == "char" else ("loss", "ppl")

    def summarize(self, sums: dict[str, float]) -> dict[str, float]:
        loss = sums["loss"] / sums["n"]
        if self.corpus.level == "char":
            return {"loss": loss, "bpc": loss / math.log(2)}
        return {"loss": loss, "ppl": math.exp(min(loss, 50.0))}
