"""Which device a run trains on: one resolution that the Trainer, CUDA graphs and torchrun share.

A device setting is ``"auto"`` (CUDA, then Apple's MPS, then the CPU) or a torch device string
(``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``). :func:`pick_device` turns it into the
``torch.device`` this process trains on, and refuses, with a message that says what to pass
instead, a device this machine does not have. Under ``torchrun`` each process on a machine takes
the GPU of its ``LOCAL_RANK``; the check that the machine has a GPU for each of its processes
reads only what every process sees alike (``LOCAL_WORLD_SIZE`` and the GPU count), so that all of
them refuse together rather than one failing while the others wait for it.

Nothing here imports the rest of the package: the Trainer (:mod:`.trainer`), the CUDA graphs
(:mod:`.cuda_graph`) and the process group (:mod:`.distributed`) all sit above it.
"""

from __future__ import annotations

import os

import torch

from .._checks import describe
from ..config.train import check_device_name

__all__ = ["DeviceUnavailable", "pick_device"]


class DeviceUnavailable(ValueError):
    """A device setting names a device this machine (or this process under torchrun) does not have."""


def _torchrun_processes() -> tuple[int, int] | None:
    """``(LOCAL_RANK, LOCAL_WORLD_SIZE)`` of a process that torchrun started with others, else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    return local_rank, int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))


def _no_cuda(name: str) -> DeviceUnavailable:
    why = "this PyTorch is a CPU build" if torch.version.cuda is None and torch.version.hip is None \
        else "no GPU or driver was found"
    return DeviceUnavailable(f"device {name!r}: this machine has no CUDA device ({why}); pass --device cpu, "
                             f"or auto, which takes what there is")


def _cuda(name: str, index: int | None) -> torch.device:
    if not torch.cuda.is_available():
        raise _no_cuda(name)
    count = torch.cuda.device_count()
    processes = _torchrun_processes()
    if processes is not None:
        local_rank, local_size = processes
        if index is not None and local_size > 1:
            raise DeviceUnavailable(
                f"device {name!r} under torchrun: each of the {local_size} processes on this machine takes the GPU "
                f"of its LOCAL_RANK, and {name} would put them all on one; pass --device cuda (choose the GPUs "
                f"with CUDA_VISIBLE_DEVICES), or start one process per machine")
        if index is None:
            if local_size > count:
                raise DeviceUnavailable(
                    f"{local_size} processes on this machine but {count} GPU{'s' if count != 1 else ''}: pass "
                    f"--nproc_per_node={count} or fewer, or --device cpu")
            index = local_rank
    if index is not None and index >= count:
        raise DeviceUnavailable(f"device {name!r}: this machine has {count} CUDA device{'s' if count != 1 else ''} "
                                f"(cuda:0 to cuda:{count - 1})")
    return torch.device("cuda", index) if index is not None else torch.device("cuda")


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def pick_device(name: str | torch.device = "auto") -> torch.device:
    """The device this process trains on for the setting ``name``.

    ``"auto"``: CUDA if available, else MPS, else the CPU. Under torchrun a CUDA device (``"auto"``
    or ``"cuda"``) is ``cuda:LOCAL_RANK``; an explicit ``cuda:K`` is honoured where one process runs
    per machine and refused where several would share it.

    Raises:
        DeviceUnavailable: the machine has no such device (no CUDA, too few GPUs for the processes,
            no MPS, a backend this PyTorch cannot make tensors on) or it computes nothing (``"meta"``);
            the message says what to pass instead.
        ValueError: ``name`` is not a device.
        TypeError: ``name`` is neither a str nor a ``torch.device``.
    """
    if isinstance(name, str):
        check_device_name(name)
        device = None if name == "auto" else torch.device(name)
    elif isinstance(name, torch.device):
        device, name = name, str(name)
    else:
        raise TypeError(f"name must be a device's name (a str: auto, cpu, cuda, cuda:N or mps) or a torch.device, "
                        f"got {describe(name)}")
    if device is None:  # auto
        if torch.cuda.is_available():
            return _cuda("auto", None)
        return torch.device("mps") if _mps_available() else torch.device("cpu")
    if device.type == "cuda":
        return _cuda(name, device.index)
    if device.type == "mps" and not _mps_available():
        raise DeviceUnavailable(f"device {name!r}: this machine has no MPS device (Apple silicon with a PyTorch "
                                f"built for it); pass --device cpu, or auto")
    if device.type == "meta":
        raise DeviceUnavailable(f"device {name!r} holds no values (PyTorch's meta device: shapes alone), so nothing "
                                f"can run there; pass --device cpu, or auto")
    if device.type not in ("cpu", "mps"):
        # Another backend torch names (xpu, hpu, vulkan, lazy, ...): this build or machine may lack it, which
        # torch says only when a tensor is first made there, each backend in its own way.
        try:
            torch.empty(0, device=device)
        except (RuntimeError, AssertionError, ImportError) as error:
            raise DeviceUnavailable(f"device {name!r}: PyTorch cannot make a tensor there on this machine "
                                    f"({type(error).__name__}: {str(error).splitlines()[0][:120]}); pass --device "
                                    f"cpu, or auto") from None
    return device
