"""TensorBoard logs of a run (``TrainConfig(tensorboard=True)``): the epoch metrics, and how open
each highway gate is on the validation set, as a histogram per gate and epoch.

Watching the gates open during training is what a highway network adds to the usual curves: a
deep stack starts with its gates nearly shut (a negative gate bias) and learns which layers to use.
The histograms are made as the validation pass runs (each gate's values binned as they come, not
kept), on every process under torchrun and summed; rank 0 writes the event files, read by
``tensorboard --logdir RUN_DIR/tensorboard`` or TensorBoard's own reader.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import TracebackType

import torch
from torch import Tensor, nn

from ..analysis import _observing, gate_modules
from .distributed import all_reduce_sums

__all__ = ["GateHistograms", "TensorBoardLog"]

#: Histogram buckets of a gate's activity T in [0, 1].
BINS = 20


class GateHistograms:
    """While the ``with`` block runs, bin every gate's ``T`` of ``model`` (counts, sum, sum of squares,
    minimum and maximum per gate). Recording a gate takes its layer off a fused path for the block."""

    def __init__(self, model: nn.Module) -> None:
        self.gates = gate_modules(model)
        self.sums: dict[str, Tensor] = {}
        self._observing = contextlib.ExitStack()

    def __enter__(self) -> GateHistograms:
        # (the analysis tools' observers: what they receive is plain, under torch.func's transforms too)
        self._observing.enter_context(_observing(self.gates, self._add))
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._observing.close()

    def _add(self, name: str, t: Tensor, c: Tensor | None = None) -> None:
        t = t.detach().float().flatten()
        stats = torch.cat([torch.histc(t, bins=BINS, min=0.0, max=1.0),
                           torch.stack([t.sum(), t.square().sum(), t.min(), -t.max()])]).double()
        previous = self.sums.get(name)
        if previous is None:
            self.sums[name] = stats
        else:  # counts and sums add; the minimum and (negated) maximum take the smaller
            self.sums[name] = torch.cat([previous[:-2] + stats[:-2], torch.minimum(previous[-2:], stats[-2:])])

    def reduced(self) -> dict[str, Tensor]:
        """Each gate's statistics, summed over the processes under torchrun (min and max kept apart)."""
        sums = {k: v[:-2] for k, v in self.sums.items()}
        extremes = {k: v[-2:] for k, v in self.sums.items()}
        sums = all_reduce_sums(sums)  # (the extremes of rank 0's shard: enough to draw the histogram)
        return {k: torch.cat([sums[k].cpu(), extremes[k].cpu()]) for k in sums}


class TensorBoardLog:
    """The event files of one run folder (``torch.utils.tensorboard``; needs the ``tensorboard`` package)."""

    def __init__(self, folder: Path, purge_step: int | None = None) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as error:
            raise ImportError("TrainConfig(tensorboard=True) writes with TensorBoard, which is not installed: "
                              "pip install tensorboard (the tensorboard extra), or leave --tensorboard out") from error
        self.writer = SummaryWriter(str(folder), purge_step=purge_step)

    def epoch(self, metrics: dict[str, float]) -> None:
        """Each number of an epoch's metrics as a scalar at step ``epoch``."""
        step = int(metrics["epoch"])
        for key, value in metrics.items():
            if key != "epoch":
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def gates(self, stats: dict[str, Tensor], step: int) -> None:
        """One histogram per gate (``gates/<its name in the model>``) from :meth:`GateHistograms.reduced`."""
        limits = [(i + 1) / BINS for i in range(BINS)]
        for name, s in stats.items():
            counts, total, squares, low, high = s[:BINS], s[BINS], s[BINS + 1], s[BINS + 2], -s[BINS + 3]
            if counts.sum() == 0:
                continue
            self.writer.add_histogram_raw(f"gates/{name}", min=float(low), max=float(high), num=int(counts.sum()),
                                          sum=float(total), sum_squares=float(squares), bucket_limits=limits,
                                          bucket_counts=counts.tolist(), global_step=step)

    def close(self) -> None:
        self.writer.close()
