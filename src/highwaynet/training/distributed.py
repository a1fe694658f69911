"""Data-parallel training under ``torchrun``: set-up, sharding batches, and summing statistics.

``torchrun --nproc_per_node=N -m highwaynet train ...`` starts N processes with ``RANK``,
``WORLD_SIZE`` and ``LOCAL_RANK`` set. The Trainer then wraps the model in
``DistributedDataParallel``, gives each process an equal slice of every global batch, sums the
statistics of all processes, and lets only rank 0 write metrics, checkpoints and logs. A global
batch is what one process would take alone, so N processes follow the same trajectory as one.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["all_reduce_sums", "init_distributed", "is_main_process", "shard_batch", "world"]


def init_distributed() -> tuple[int, int]:
    """Join the process group when started by ``torchrun`` (``WORLD_SIZE`` > 1); returns ``(rank, world size)``.

    The backend is NCCL when CUDA is available, else gloo (CPU).
    """
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and dist.is_available() and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend)
    return world()


def world() -> tuple[int, int]:
    """``(rank, world size)``: ``(0, 1)`` outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main_process() -> bool:
    return world()[0] == 0


def shard_batch(batch: Any, rank: int, size: int, dim: int = 0) -> Any:
    """This process's slice of a batch: every tensor is cut into ``size`` near-equal parts along ``dim``."""
    if isinstance(batch, Tensor):
        return batch.tensor_split(size, dim=dim)[rank]
    if isinstance(batch, (tuple, list)):
        return type(batch)(shard_batch(b, rank, size, dim) for b in batch)
    return batch


def all_reduce_sums(sums: dict[str, Tensor]) -> dict[str, Tensor]:
    """Sum each statistic over all processes (in one collective)."""
    if world()[1] == 1 or not sums:
        return sums
    keys = sorted(sums)
    stacked = torch.stack([sums[k].double() for k in keys])
    dist.all_reduce(stacked)
    return dict(zip(keys, stacked, strict=True))
