"""Whole training steps replayed as CUDA graphs: one launch instead of hundreds.

A small deep network is launch-bound on a GPU: the paper's 50-layer highway MLP at batch 100
makes about a thousand small kernel launches per SGD step (forward, backward, optimiser), each
costing more to launch than to run. Captured once as a CUDA graph (forward, backward, gradient
clipping and the optimiser's update together), the step is replayed with one launch.

What keeps this correct:

- **Warm-up.** The first steps run eagerly on a side stream, as PyTorch's whole-network capture
  recipe asks, so that the optimiser's state (momentum buffers, Adam's moments) exists, libraries
  have made their handles and Triton has compiled its kernels before anything is captured. They are
  real training steps, on real batches.
- **Static memory.** A graph replays on the same addresses: each batch is copied into the captured
  input tensors, and the statistics it returns are copied out before the next replay.
- **One graph per batch shape.** A smaller last batch (or any new shape) runs eagerly once, then is
  captured as a graph of its own, up to ``max_graphs``; beyond that, steps run eagerly. Every path
  computes the same step.
- **Learning rate.** The optimisers bake a float learning rate into the captured kernels, so a
  change of learning rate (the Trainer's schedule steps once per epoch) drops the graphs and the
  next step captures anew.
- **Randomness.** Dropout draws fresh numbers on every replay (PyTorch registers its CUDA generator
  with each graph).

Adam and AdamW need ``capturable=True`` (their step counter then lives on the GPU); the Trainer sets
it. A step that copies to the host, or that keeps state across batches in new tensors rather than
in place (truncated BPTT must write its carried state into a fixed buffer), cannot be captured: the
Trainer asks a task for ``graph_safe = True`` before using graphs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .devices import pick_device
from .distributed import launched_world_size

__all__ = ["GraphedStep", "use_cuda_graphs"]


def use_cuda_graphs(choice: bool | None, device: str) -> bool:
    """A recipe's ``cuda_graph`` option: ``None`` means graphs exactly when ``device`` resolves to CUDA
    and the run is one process (a graphed step does not synchronise DDP's processes: not under torchrun)."""
    if choice is not None:
        return choice
    # (the type the setting names: whether the machine has it is the Trainer's check)
    kind = pick_device(device).type if device == "auto" else torch.device(device).type
    return kind == "cuda" and launched_world_size() == 1


def _signature(batch: Any) -> Any:
    if isinstance(batch, Tensor):
        return (tuple(batch.shape), batch.dtype)
    if isinstance(batch, (tuple, list)):
        return tuple(_signature(b) for b in batch)
    if isinstance(batch, dict):
        return tuple((k, _signature(v)) for k, v in sorted(batch.items()))
    return batch


def _copy_into(static: Any, batch: Any) -> None:
    if isinstance(static, Tensor):
        static.copy_(batch, non_blocking=True)
    elif isinstance(static, (tuple, list)):
        for s, b in zip(static, batch, strict=True):
            _copy_into(s, b)
    elif isinstance(static, dict):
        for k in static:
            _copy_into(static[k], batch[k])


def _clone(batch: Any) -> Any:
    if isinstance(batch, Tensor):
        return batch.clone()
    if isinstance(batch, (tuple, list)):
        return type(batch)(_clone(b) for b in batch)
    if isinstance(batch, dict):
        return {k: _clone(v) for k, v in batch.items()}
    return batch


class GraphedStep:
    """Runs ``step(batch) -> stats`` (which must do the whole update) as replayed CUDA graphs.

    Args:
        step: one training step on a batch already on the GPU: forward, ``zero_grad(set_to_none=True)``,
            backward, optional clipping, ``optimizer.step()``; returns a dict of statistic tensors.
        optimizer: the optimiser ``step`` updates (its learning rates key the graphs).
        warmup: eager steps before the first capture.
        max_graphs: the most batch shapes kept as graphs at once.

    Calling it returns ``step``'s statistics for the batch (fresh tensors, safe to keep).
    """

    def __init__(self, step: Callable[[Any], dict[str, Tensor]], optimizer: torch.optim.Optimizer,
                 warmup: int = 3, max_graphs: int = 4) -> None:
        self.step, self.optimizer = step, optimizer
        self.warmup, self.max_graphs = warmup, max_graphs
        self._graphs: dict[Any, tuple[Any, torch.cuda.CUDAGraph, dict[str, Tensor]]] = {}
        self._lrs: tuple[float, ...] | None = None
        self._pool: Any = None  # (the graphs' memory pool, once captured)
        self.eager_steps = self.captures = self.replays = 0

    def __call__(self, batch: Any) -> dict[str, Tensor]:
        if self.eager_steps < self.warmup:
            return self._side_stream(batch)
        lrs = tuple(float(g["lr"]) for g in self.optimizer.param_groups)
        if lrs != self._lrs:  # the old graphs hold the old rate: drop them and their memory pool
            self._graphs.clear()
            self._pool = None
            self._lrs = lrs
        key = _signature(batch)
        entry = self._graphs.get(key)
        if entry is None:
            # A new shape (or rate) runs eagerly first: whatever it initialises lazily (a Triton
            # kernel compiled for these sizes, a cuBLAS plan) must not happen during capture. Then
            # it is captured, for the next batch of its shape.
            stats = self._side_stream(batch)
            if len(self._graphs) < self.max_graphs:
                self._graphs[key] = self._capture(batch)
            return stats
        static_batch, graph, stats = entry
        _copy_into(static_batch, batch)
        graph.replay()
        self.replays += 1
        return {k: v.clone() for k, v in stats.items()}

    def _side_stream(self, batch: Any) -> dict[str, Tensor]:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            stats = self.step(batch)
        torch.cuda.current_stream().wait_stream(stream)
        self.eager_steps += 1
        return stats

    def _capture(self, batch: Any) -> tuple[Any, torch.cuda.CUDAGraph, dict[str, Tensor]]:
        static_batch = _clone(batch)
        graph = torch.cuda.CUDAGraph()
        self.optimizer.zero_grad(set_to_none=True)  # the graph's backward allocates the gradients
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, pool=self._pool):
            stats = self.step(static_batch)
        self._pool = graph.pool()
        self.captures += 1
        return static_batch, graph, stats
