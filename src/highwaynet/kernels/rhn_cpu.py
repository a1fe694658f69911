"""The CPU RHN recurrence's loops in C++ (``rhn_cpu.cpp``): each micro-step's gating in one pass.

:mod:`.rhn_eager` lays out the buffers and runs the products; what it runs between them, a few
PyTorch operations a micro-step on a few thousand values, costs mostly the operations' own
overhead, more than their arithmetic. The two loops here, forward and the backward walk, run the
same products through PyTorch and each micro-step's gating as one vectorised pass, forward and
back, which saves most of that overhead (``benchmarks/rhn_cpu_parts.py`` times a window both ways
side by side; ``benchmarks/rhn.py --cpu-shape`` the whole layer).

**Built on first use**, once per machine, PyTorch version and highwaynet release, with
``torch.utils.cpp_extension`` (a C++ compiler and ``ninja``; seconds, once), into ``$TORCH_EXTENSIONS_DIR`` (default
``~/.cache/torch_extensions``). Where it cannot be built, a warning says why, and the RHN runs
:mod:`.rhn_eager`'s loops in PyTorch operations: the same values, a little slower. It is used for
float32 and float64 on an x86-64 CPU with AVX2, compiled for the instruction set PyTorch's own
kernels use there (AVX2 or AVX-512). Set ``HIGHWAYNET_CPU_KERNEL=0`` (or :data:`enabled` ``= False``) to use
the PyTorch operations instead and skip the build.

Reference: :mod:`.rhn_eager`'s loops, and through them the autograd loop over
:meth:`highwaynet.nn.RHNCell.step` (tested in float64, both layouts, with and without a mask).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from .gating import _constant_when_compiled

__all__ = ["available", "enabled", "unavailable"]

#: Whether the RHN may use the C++ loops on the CPU (``HIGHWAYNET_CPU_KERNEL=0`` when highwaynet
#: was imported makes it ``False``). Read at each forward (under ``torch.compile``, when compiling).
enabled = os.environ.get("HIGHWAYNET_CPU_KERNEL", "1") != "0"

_SOURCE = Path(__file__).with_name("rhn_cpu.cpp")
# The instruction sets of ATen's own vectorised builds of each level (at::vec's CPU_CAPABILITY):
# the kernel is built for the level PyTorch runs at on this CPU.
_FLAGS = {
    "AVX2": ["-mavx2", "-mfma"],
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma"],
}
_loaded: bool | None = None  # None: not yet tried in this process
_loading = threading.Lock()  # (threads that start RHNs at once build it once)


@_constant_when_compiled  # (decided when compiling, as the path's other choices)
def unavailable(x_proj: Tensor) -> str | None:
    """Why the RHN's CPU recurrence cannot run the C++ loops for ``x_proj``, or None where it can:
    :data:`enabled`, a CPU tensor of float32 or float64, a CPU with AVX2, and the extension built
    (here, if need be)."""
    if not enabled:
        return "HIGHWAYNET_CPU_KERNEL=0 switched the C++ loops off"
    if x_proj.device.type != "cpu":
        return "the C++ loops run on the CPU"
    if x_proj.dtype not in (torch.float32, torch.float64):
        return f"the C++ loops run float32 and float64, not {str(x_proj.dtype).removeprefix('torch.')}"
    if torch.backends.cpu.get_cpu_capability() not in _FLAGS:
        return "the C++ loops need a CPU with AVX2"
    if not _load():
        return "the C++ kernel could not be built (see the warning that said why)"
    return None


def available(x_proj: Tensor) -> bool:
    """Whether the RHN's CPU recurrence runs the C++ loops for ``x_proj`` (see :func:`unavailable`)."""
    return unavailable(x_proj) is None


def _load() -> bool:
    """Builds (once per machine and PyTorch) and loads the operators ``torch.ops.highwaynet_cpu.*``;
    ``False``, with one warning, where that fails."""
    global _loaded
    with _loading:
        if _loaded is None:
            _loaded = _try_build_and_load()
    return _loaded


def _try_build_and_load() -> bool:
    return try_build(lambda: _build_and_load(), "CPU RHN kernel",
                     "the RHN runs its loops in PyTorch operations instead")


def try_build(build: Callable[[], None], what: str, instead: str) -> bool:
    """``build()``; ``False``, with one warning that says why and that ``instead`` runs, where it fails.
    (Every C++ kernel of the package is built and loaded so: see :func:`build_extension`.)"""
    try:
        build()
        return True
    except Exception as error:  # any failure to build or load: the PyTorch operations remain
        # (a failed build's message is its whole log: its last line, ninja's own aside, says why)
        lines = [line for line in str(error).splitlines() if line.strip() and not line.startswith("ninja:")]
        why = f"{type(error).__name__}: {lines[-1] if lines else error}"
        warnings.warn(
            f"highwaynet: could not build the {what} ({why}); {instead} (the same values, a little slower). "
            "It needs a C++ compiler and ninja (pip install ninja); set HIGHWAYNET_CPU_KERNEL=0 to skip it.",
            RuntimeWarning, stacklevel=_callers_level())
        return False


def _callers_level() -> int:
    """The ``stacklevel`` that makes a warning raised by its caller name the first line outside
    highwaynet and torch: the user's own, however many layers (modules, autograd, compile) lie between."""
    inside = (str(Path(__file__).parents[1]), str(Path(torch.__file__).parent))
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(inside):
        frame, level = frame.f_back, level + 1
    return level


def _build_and_load() -> None:
    build_extension(_SOURCE, "highwaynet_rhn_cpu_", "CPU RHN kernel")


def build_extension(source: Path, prefix: str, what: str) -> None:
    """Build (once per machine, PyTorch and source) and load the operators the C++ file ``source`` defines,
    in a folder of ``$TORCH_EXTENSIONS_DIR`` named ``prefix`` + versions; ``what`` names it in the notice."""
    from torch.utils import cpp_extension

    # The torch version in the name: torch rebuilds when the source or flags change, not when torch
    # does, and a library built against another torch would not load (or worse). The instruction set
    # too, for a home folder shared by machines of several kinds. And the source's and flags' hash:
    # a new highwaynet gets a folder of its own, so that the notice below is printed exactly when
    # a build is coming (torch would rebuild in place, silently, over the old library).
    level = torch.backends.cpu.get_cpu_capability()
    flags = ["-O3", *_FLAGS[level], f"-DCPU_CAPABILITY_{level}", f"-DCPU_CAPABILITY={level}"]
    digest = hashlib.sha256(source.read_bytes() + " ".join(flags).encode()).hexdigest()[:8]
    name = prefix + re.sub(r"\W", "_", f"{torch.__version__}_{level}_{digest}")
    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR", Path.home() / ".cache" / "torch_extensions"))
    build_dir = root / name
    build_dir.mkdir(parents=True, exist_ok=True)
    if shutil.which("ninja") is None:
        # pip's ninja installs its binary beside the interpreter, which is on PATH only where the
        # environment was activated; torch looks for it on PATH.
        try:
            import ninja  # type: ignore[import-not-found]
            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
        except ImportError:
            pass
    if not (build_dir / f"{name}.so").exists():
        print(f"highwaynet: building the {what} in {build_dir} (once for this machine, PyTorch and "
              "highwaynet release; about 10 s)", file=sys.stderr, flush=True)
    cpp_extension.load(name, [str(source)], extra_cflags=flags, build_directory=str(build_dir),
                       is_python_module=False, verbose=False)
