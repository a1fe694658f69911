"""The recurrence of an LSTM with a projection and clipping in C++ (``lstmp_cpu.cpp``): the time loop
and each step's element-wise work in one pass, the products PyTorch's own.

Built on first use as :mod:`.rhn_cpu` builds the RHN's loops (a C++ compiler and ``ninja``; seconds,
once per machine, PyTorch version and source), into ``$TORCH_EXTENSIONS_DIR``. Where it cannot be
built, a warning says why and the PyTorch operations run instead
(:func:`highwaynet.kernels.lstmp.lstmp_recurrence_reference`, the same values). Used for float32 and
float64 CPU tensors on an x86-64 CPU with AVX2, without gradients; ``HIGHWAYNET_CPU_KERNEL=0`` (read
through :data:`highwaynet.kernels.rhn_cpu.enabled`) switches it off with the RHN's.
"""

from __future__ import annotations

import threading
from pathlib import Path

import torch
from torch import Tensor

from . import rhn_cpu
from .gating import _constant_when_compiled

__all__ = ["unavailable"]

_SOURCE = Path(__file__).with_name("lstmp_cpu.cpp")
_loaded: bool | None = None  # None: not yet tried in this process
_loading = threading.Lock()


@_constant_when_compiled
def unavailable(gates: Tensor) -> str | None:
    """Why the C++ loop cannot run the recurrence on ``gates``, or None where it can (and is built)."""
    if not rhn_cpu.enabled:
        return "HIGHWAYNET_CPU_KERNEL=0 switched the C++ loops off"
    if gates.device.type != "cpu":
        return "the C++ loop runs on the CPU"
    if gates.dtype not in (torch.float32, torch.float64):
        return f"the C++ loop runs float32 and float64, not {str(gates.dtype).removeprefix('torch.')}"
    if torch.backends.cpu.get_cpu_capability() not in rhn_cpu._FLAGS:
        return "the C++ loop needs a CPU with AVX2"
    if not _load():
        return "the C++ kernel could not be built (see the warning that said why)"
    return None


def _load() -> bool:
    global _loaded
    with _loading:
        if _loaded is None:
            _loaded = rhn_cpu.try_build(lambda: _build_and_load(), "CPU LSTM kernel (ELMo's biLM)",
                                        "the LSTM runs its loop in PyTorch operations instead")
    return _loaded


def _build_and_load() -> None:
    rhn_cpu.build_extension(_SOURCE, "highwaynet_lstmp_cpu_", "CPU LSTM kernel (ELMo's biLM)")
