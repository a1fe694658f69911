r"""Persistent recurrence kernels: one launch a window, the time loop inside it (the rules; no Triton here).

A recurrence at a small batch (the RHN paper's PTB model: batch 20, hidden 830, depth 10, 35 steps:
350 dependent micro-steps a window) is bound by latency, not arithmetic: each micro-step's product
is too small to fill a GPU, and a launch per micro-step (:mod:`.rhn_step`) pays a launch and a round
trip through memory 350 times each way. The kernels of :mod:`.triton_persistent` run a whole window
in one launch, for the RHN layer (forward and backward) and for an LSTM with projection and clipping
(ELMo's biLM layer, forward; :mod:`.lstmp`).

**Grid decomposition.** The state's columns are cut into tiles of ``BLOCK_N`` hidden units (and the
batch into tiles of ``BLOCK_B`` rows); each program of a grid of at most one program per SM owns
a fixed set of tiles for the whole window. A micro-step's new state needs every column of the
previous one, so after each micro-step every program waits at a grid-wide barrier (a counter in
global memory: ``_grid_barrier`` in :mod:`.triton_persistent`) before reading the next. The grid
never holds more programs than the GPU has SMs, so that all of them are resident at once (a
program waiting at the barrier for one not yet started would wait for ever). The RHN's forward
takes one barrier a micro-step, its backward one (the gate's gradient for the program's own
columns, then, after the barrier, the state's gradient ``dz R_d`` for them, which reads every
column of ``dz``); the LSTM two a time step (the gates and cell for the program's cell units, then
the projection for its output units, which reads every cell unit's ``m``).

**Where the weights live.** Each program re-reads its rows of the recurrent weights every
micro-step; what makes the kernel fast is that they then come from the L2 cache (50 MiB on an
H100), not from memory: the RHN's ten ``(2H, H)`` weights at the PTB shape are 26.3 MiB in
bfloat16. They do not fit the SMs' shared memory (228 KiB each, 29 MiB over all 132 SMs, and Triton
cannot pin a tile in shared memory across a loop), nor their registers. Hence the rules below:
the kernel is chosen where the recurrent weights fit the L2 cache.

**Limits** (what :func:`rhn_refusal` and :func:`lstmp_refusal` check, in words for
:func:`~highwaynet.kernels.explain`):

- CUDA tensors and Triton (never the CPU: under ``TRITON_INTERPRET=1`` the tests call the kernels
  on the CPU explicitly);
- one dtype, its products on tensor cores: bfloat16, float16, or float32 with TF32 allowed
  (``torch.backends.cuda.matmul.allow_tf32``, as for ``torch.mm``). Exact float32 products would
  run off tensor cores, where cuBLAS's are faster (``benchmarks/rhn_step.py``); float64 Triton
  would compute in float32 only;
- contiguous tensors;
- a batch of at most :data:`MAX_BATCH` rows (beyond it a micro-step's product fills the GPU on its
  own and the launches stop mattering);
- recurrent weights that fit the device's L2 cache: for an RHN of depth ``L`` and width ``H``,
  ``L · 2H · H`` values (at depth 10 in bfloat16, ``H ≤ 1144`` on an H100's 50 MiB; in float32,
  ``H ≤ 809``, so the PTB model in TF32, 52.6 MiB, is refused); for the LSTM, ``4C · P + P · C``
  values (ELMo's original, ``C = 4096``, ``P = 512``: 20 MiB in bfloat16, 40 MiB in float32);
- for the LSTM, what the kernel computes: a projection. A padded batch is no limit: the LSTM's
  kernel takes per-row lengths (a row past its own holds its state and outputs zeros), as the RHN's
  window runs over the padding (:mod:`.rhn_recurrence`).

These are the design's premises, not measurements: ``docs/notes/persistent-kernel.md`` says what a
GPU run must measure first, and ``benchmarks/rhn.py`` and ``benchmarks/elmo.py`` time the kernel
(also where these rules refuse it) against cuDNN's LSTM and the other paths.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from .gating import INTERPRETING, _constant_when_compiled, triton_available

__all__ = ["ENABLED", "MAX_BATCH", "Budget", "Tiles", "device_budget", "lstmp_refusal", "programs_for", "rhn_refusal"]

#: Whether the kernels are chosen automatically within their limits. Off until a GPU run has measured
#: them (issue 59: their grid-wide barrier and their speed are unmeasured): ``HIGHWAYNET_PERSISTENT=1``
#: in the environment, or this set to True, opts in. The tests and benchmarks call them explicitly.
ENABLED = os.environ.get("HIGHWAYNET_PERSISTENT", "") == "1"

#: The largest batch the persistent kernels are chosen for (a heuristic for the GPU run to measure).
MAX_BATCH = 128

#: An H100's L2 cache, for a device that does not report its own.
_L2_FALLBACK = 50 * 2 ** 20


class Tiles(NamedTuple):
    """A persistent kernel's tiles: ``block_b`` batch rows by ``block_n`` units (hidden units of the
    RHN's state, cell or projection units of the LSTM) a tile, the products' contraction in steps of
    ``block_k``, and ``warps`` a program. Powers of two, at least 16 (Triton's ``tl.dot``)."""

    block_b: int
    block_n: int
    block_k: int
    warps: int = 4

    def check(self) -> Tiles:
        for name, value in zip(("block_b", "block_n", "block_k"), self[:3], strict=True):
            if value < 16 or value & (value - 1):
                raise ValueError(f"Tiles.{name} must be a power of two of at least 16, got {value}")
        if self.warps < 1 or self.warps & (self.warps - 1):
            raise ValueError(f"Tiles.warps must be a power of two, got {self.warps}")
        return self


def default_tiles(batch: int) -> Tiles:
    """The tiles where none are given: the whole batch in one row tile up to 64 rows, and narrow
    column tiles (16 units), so that as many SMs as possible share the reading of the weights."""
    block_b = 16
    while block_b < min(batch, 64):
        block_b *= 2
    return Tiles(block_b, 16, 32 if INTERPRETING else 64)


class Budget(NamedTuple):
    """What the kernels may assume of a GPU: its SMs (the most programs resident at once) and its L2
    cache in bytes (where the recurrent weights stay between micro-steps)."""

    sms: int
    l2_bytes: int


@functools.cache
def _budget(index: int) -> Budget:
    props = torch.cuda.get_device_properties(index)
    return Budget(props.multi_processor_count, int(getattr(props, "L2_cache_size", 0) or _L2_FALLBACK))


@_constant_when_compiled  # (a device's properties: read once while compiling)
def device_budget(device: torch.device) -> Budget:
    """The :class:`Budget` of a CUDA device (read once per device); on the CPU (the interpreter) one SM,
    so that a launch there runs one program (see :func:`programs_for`)."""
    if device.type != "cuda":
        return Budget(1, _L2_FALLBACK)
    return _budget(device.index if device.index is not None else torch.cuda.current_device())


def programs_for(tiles: int, device: torch.device, programs: int | None = None) -> int:
    """How many programs a launch runs: at most one per SM (all resident at once, which the grid
    barrier needs) and no more than there are tiles; ``programs`` to ask for fewer (the tests run
    several tiles a program). Under Triton's interpreter, which runs a grid's programs one after
    another, one: a second would wait at the first barrier for ever."""
    most = min(tiles, device_budget(device).sms)  # (one on the CPU: its budget's one "SM")
    if programs is not None:
        if programs < 1:
            raise ValueError(f"programs must be positive, got {programs}")
        most = min(most, programs)
    return max(1, most)


def dtype_refusal(dtypes: set[torch.dtype], tf32: bool) -> str | None:
    """Why the kernels' products would not run exactly on tensor cores in these dtypes, or None. (The
    reasons read after "not the persistent kernel: ", as :func:`~highwaynet.kernels.explain` shows them.)"""
    if len(dtypes) != 1:
        names = ", ".join(sorted(str(d).removeprefix("torch.") for d in dtypes))
        return f"mixed dtypes ({names}, as under autocast), where it takes one"
    dtype = next(iter(dtypes))
    if dtype in (torch.bfloat16, torch.float16) or (dtype == torch.float32 and tf32):
        return None
    if dtype == torch.float32:
        return ("exact float32, where its products run on tensor cores (bfloat16, float16, or float32 with "
                "torch.backends.cuda.matmul.allow_tf32)")
    return f"{str(dtype).removeprefix('torch.')}, where it computes bfloat16, float16 and float32"


def size_refusal(weight_bytes: int, batch: int, budget: Budget) -> str | None:
    """Why a window of this size is outside the kernels' limits on a GPU of ``budget``, or None."""
    if batch > MAX_BATCH:
        return f"a batch of {batch} rows, over its {MAX_BATCH}"
    if weight_bytes > budget.l2_bytes:
        return (f"its recurrent weights ({weight_bytes / 2 ** 20:.1f} MiB) exceed the GPU's L2 cache "
                f"({budget.l2_bytes / 2 ** 20:.1f} MiB), where it keeps them")
    return None


def _refusal(tensors: Sequence[Tensor], weights: Sequence[Tensor], batch: int) -> str | None:
    first = tensors[0]
    if not first.is_cuda:
        return "it runs on CUDA tensors only"
    if not ENABLED:
        return "off until a GPU run has measured it (HIGHWAYNET_PERSISTENT=1 turns it on)"
    if not triton_available(first):
        return "no Triton"
    why = dtype_refusal({t.dtype for t in tensors}, torch.backends.cuda.matmul.allow_tf32)
    if why is not None:
        return why
    if not all(t.is_contiguous() for t in tensors):
        return "a tensor that is not contiguous"
    return size_refusal(sum(w.numel() * w.element_size() for w in weights), batch, device_budget(first.device))


def rhn_refusal(x_proj: Tensor, s0: Tensor, mask: Tensor | None, weights: Sequence[Tensor],
                biases: Sequence[Tensor]) -> str | None:
    """Why the persistent kernel must not run this RHN window (see the module's limits), or None."""
    tensors = [x_proj, s0, *weights, *biases] + ([mask] if mask is not None else [])
    return _refusal(tensors, weights, s0.shape[0])


def lstmp_refusal(x_proj: Tensor, h0: Tensor, c0: Tensor, w_h: Tensor, w_p: Tensor | None) -> str | None:
    """Why the persistent kernel must not run this LSTM window (see the module's limits), or None; also
    where it would compute something else: no projection ``w_p``. (Per-row lengths are no reason: the
    kernel takes them.)"""
    weights = [w_h] if w_p is None else [w_h, w_p]
    why = _refusal([x_proj, h0, c0, *weights], weights, h0.shape[0])
    if why is None and w_p is None:
        why = "no projection (P = C), where it computes one"
    return why
