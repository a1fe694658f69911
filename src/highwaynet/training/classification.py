"""``ClassificationTask``: batches of in-memory tensors and the cross-entropy loss."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_int, check_size, describe

__all__ = ["ClassificationTask"]


class ClassificationTask:
    """A :class:`~highwaynet.training.Task` over ``(inputs, labels)`` tensors held in memory.

    Args:
        splits: ``{"train": (x, y), "val": (x, y), "test": (x, y)}``; any object with
            ``train``/``val``/``test`` attributes of that form (an ``ImageData``) also works.
        batch_size: training batch size; the last, smaller batch is kept.
        seed: the training order of epoch ``e`` is a permutation drawn from ``(seed, e)``.
        eval_batch_size: batch size for evaluation.
        augment: applied to each training batch of inputs (on the device), e.g. random crops.

    Metrics: ``loss`` (mean cross-entropy) and ``acc`` (accuracy).
    """

    #: A step depends on its batch alone and never waits for the host: it can run as a CUDA graph.
    graph_safe = True

    def __init__(self, splits, batch_size: int = 100, seed: int = 0, eval_batch_size: int = 1000,
                 augment: Callable[[Tensor], Tensor] | None = None) -> None:
        if not isinstance(splits, dict):
            if not all(hasattr(splits, k) for k in ("train", "val", "test")):
                raise TypeError(f"splits must be a dict of (inputs, labels) by split, or an object with train, val "
                                f"and test attributes (an ImageData), got {describe(splits)}")
            splits = {k: getattr(splits, k) for k in ("train", "val", "test")}
        if augment is not None and not callable(augment):
            raise TypeError(f"augment must be a function of a batch of inputs (or None), got {describe(augment)}")
        self.splits = splits
        self.batch_size = check_size("batch_size", batch_size)
        self.eval_batch_size = check_size("eval_batch_size", eval_batch_size)
        self.seed = check_int("seed", seed)
        self.augment = augment

    def to(self, device: torch.device) -> ClassificationTask:
        """Keep the data on ``device`` (the Trainer calls this): batches are then gathered there,
        without a copy from the host per step."""
        self.splits = {k: tuple(t.to(device) for t in v) if all(isinstance(t, Tensor) for t in v) else v
                       for k, v in self.splits.items()}
        return self

    def batches(self, split: str, epoch: int) -> Iterator[tuple[Tensor, ...]]:
        if split not in self.splits:
            raise ValueError(f"no split {split!r}; this task has {list(self.splits)}")
        x, y = self.splits[split]
        if split == "train":
            generator = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
            order, size = torch.randperm(len(y), generator=generator), self.batch_size
        else:
            order, size = torch.arange(len(y)), self.eval_batch_size
        for i in range(0, len(y), size):
            index = order[i:i + size]
            index = index.to(y.device)
            yield x[index], y[index]

    def step(self, model: nn.Module, batch: tuple[Tensor, ...]) -> tuple[Tensor, dict[str, Tensor]]:
        # A batch is (inputs..., labels): the model gets every input (e.g. tokens and lengths).
        *inputs, y = batch
        if model.training and self.augment is not None:
            inputs[0] = self.augment(inputs[0])
        logits = model(*inputs).float()
        loss = F.cross_entropy(logits, y)
        return loss, self.batch_stats(logits, loss, y)

    @staticmethod
    def batch_stats(logits: Tensor, loss: Tensor, y: Tensor) -> dict[str, Tensor]:
        """The sums :meth:`summarize` reads, for a batch's logits, mean loss and labels."""
        n = torch.full((), float(len(y)), device=y.device)  # no host copy: the step can be a CUDA graph
        return {"loss": loss.detach() * n, "correct": (logits.argmax(-1) == y).sum(), "n": n}

    #: What :meth:`summarize` returns (a monitored metric must be one of them).
    metric_names = ("loss", "acc")

    def summarize(self, sums: dict[str, float]) -> dict[str, float]:
        return {"loss": sums["loss"] / sums["n"], "acc": sums["correct"] / sums["n"]}
