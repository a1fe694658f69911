"""Data-parallel training under ``torchrun``: set-up, sharding batches, and summing statistics.

``torchrun --nproc_per_node=N -m highwaynet train ...`` starts N processes with ``RANK``,
``WORLD_SIZE`` and ``LOCAL_RANK`` set. The Trainer then wraps the model in
``DistributedDataParallel``, gives each process an equal slice of every global batch, sums the
statistics of all processes, and lets only rank 0 write metrics, checkpoints and logs. A global
batch is what one process would take alone, so N processes follow the same trajectory as one.
"""

from __future__ import annotations

import gc
import os
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from .devices import pick_device

__all__ = ["all_reduce_sums", "barrier", "batch_length", "check_backend", "init_distributed", "is_main_process",
           "launched_world_size", "leave_distributed", "rank_zero_decides", "shard_batch", "shard_weight", "world"]


def launched_world_size() -> int:
    """How many processes ``torchrun`` started (``WORLD_SIZE``; 1 without it), known before any joins the group."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def init_distributed(device: str | torch.device | None = None) -> tuple[int, int]:
    """Join the process group when started by ``torchrun`` (``WORLD_SIZE`` > 1); returns ``(rank, world size)``.

    ``device`` is the run's device setting (None: ``"auto"``), resolved by
    :func:`~highwaynet.training.devices.pick_device`: the backend is NCCL for a CUDA device (after
    making it this process's current device), gloo otherwise. A device the machine cannot give every
    process raises :class:`~highwaynet.training.devices.DeviceUnavailable` on every process alike,
    before any joins, so that none waits for the others. Once joined, later calls return at once.
    """
    if launched_world_size() > 1 and dist.is_available() and not dist.is_initialized():
        resolved = pick_device(device if device is not None else "auto")
        if resolved.type == "cuda":
            torch.cuda.set_device(resolved)
        dist.init_process_group("nccl" if resolved.type == "cuda" else "gloo")
    return world()


def check_backend(device: torch.device) -> None:
    """Refuse a CPU run in a process group joined with NCCL, which moves CUDA tensors only (the group
    was joined before the run's device was known: join it with the device first)."""
    if device.type != "cuda" and dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl":
        raise ValueError(f"this process joined torchrun's group with NCCL (for CUDA) before its run, whose device is "
                         f"{device}, began: call highwaynet.training.distributed.init_distributed({str(device)!r}) "
                         f"first, or train on CUDA")


def leave_distributed() -> None:
    """Leave the process group, if joined: a process that exits still in it can abort (gloo's threads).

    A ``DistributedDataParallel`` wrapper holds the process group, and one caught in a reference
    cycle (the Trainer's scheduler once held the Trainer's own bound method; a user's code may
    make others) lives until the collector runs. Left to the interpreter's exit, gloo's group was
    then torn down during finalization, and a process now and then aborted there ("terminate
    called without an active exception": once in 90 two-process sentence runs on a loaded 2-core
    machine, and once in a test run). Collecting first frees the group here.
    """
    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def world() -> tuple[int, int]:
    """``(rank, world size)``: ``(0, 1)`` outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main_process() -> bool:
    """Rank 0, or the only process: the one that writes files. Under torchrun it is known from
    ``RANK`` before the process group is joined (a recipe prepares its folder before its Trainer joins)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    return int(os.environ.get("RANK", "0")) == 0


def barrier() -> None:
    """Wait until every process gets here (a no-op in one process).

    Where processes read files that rank 0 alone writes: each reads only after rank 0 has written
    them, and all read the same state before rank 0 changes it (or they part ways, and hang).
    """
    if init_distributed()[1] > 1:
        dist.barrier()


def rank_zero_decides(flag: bool) -> bool:
    """Rank 0's ``flag``, on every process: for decisions that each process could take differently,
    such as stopping on its own clock, after which the others would wait for it forever."""
    if world()[1] == 1:
        return flag
    decision = [flag]
    dist.broadcast_object_list(decision, src=0)
    return bool(decision[0])


def shard_batch(batch: Any, rank: int, size: int, dim: int = 0) -> Any:
    """This process's slice of a batch: every tensor is cut into ``size`` near-equal parts along ``dim``."""
    if isinstance(batch, Tensor):
        return batch.tensor_split(size, dim=dim)[rank]
    if isinstance(batch, (tuple, list)):
        return type(batch)(shard_batch(b, rank, size, dim) for b in batch)
    return batch


def batch_length(batch: Any, dim: int = 0) -> int:
    """How many examples a batch holds: the size along ``dim`` of its first tensor."""
    if isinstance(batch, Tensor):
        return batch.shape[dim]
    return next(batch_length(b, dim) for b in batch if isinstance(b, (Tensor, tuple, list)))


def shard_weight(n: int, rank: int, size: int) -> float:
    """The factor on this process's mean loss over its slice of a batch of ``n`` (see :func:`shard_batch`)
    that makes DDP's average of the processes' gradients the gradient of the whole batch's mean loss:
    the slice's share of ``n``, times ``size``. 1 where ``size`` divides ``n``; else the larger slices
    count for more, as their examples would in one process."""
    return (n // size + (rank < n % size)) * size / n


def all_reduce_sums(sums: dict[str, Tensor]) -> dict[str, Tensor]:
    """Sum each statistic over all processes (in one collective)."""
    if world()[1] == 1 or not sums:
        return sums
    keys = sorted(sums)
    stacked = torch.stack([sums[k].double() for k in keys])
    dist.all_reduce(stacked)
    return dict(zip(keys, stacked, strict=True))
