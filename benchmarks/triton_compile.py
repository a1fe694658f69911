"""Compile every Triton kernel of highwaynet for GPUs that are not here, and check what the compiled
code needs against what those GPUs have.

Each kernel is compiled through its own launch code (the functions the layers call) at the shapes
the benchmarks time (the RHN at the PTB shape, ELMo's LSTM, the dense layer), in float32, TF32 and
bfloat16, with the tiles a GPU would try (the autotuner's every candidate, the persistent kernels'
default tiles and the benchmarks' others), for each ``--arch`` (80: A100, 90: H100). Triton compiles
a kernel anew for each specialisation of its arguments (the constexprs; an integer's or a pointer's
divisibility by 16), so the launches are the layers' own: the RHN's micro-steps through its one-kernel
path (weights and states padded to a multiple of 16, micro-layer 0 adding the input projection and the
others the bias), with and without a dropout mask, and ELMo's LSTM with and without lengths. Triton
compiles for a target without a GPU or its driver (its own ptxas); here a launch compiles and returns
instead of running, and each compiled kernel is recorded once. Of each the record keeps its registers,
its shared memory and its local memory a thread (``spilled``: ``cuobjdump -res-usage``'s ``STACK``
and ``LOCAL`` of the cubin; ptxas places its register spills in the stack frame, ``LOCAL`` is 0), and
checks:

- it compiles (Triton's interpreter, which the CPU tests use, runs the Python; it never meets the
  compiler's limits or its layouts);
- its shared memory fits one block on that GPU;
- for the persistent kernels, one program fits an SM (registers × threads ≤ 65,536, the registers
  allocated 256 a warp, with its shared memory): the grid barrier needs every program resident at once;
- it does not spill to local memory (reported; a spill is slow, not wrong).

What it does not compile: shapes whose sizes (or strides) differ from these in their divisibility by
16 (each such kernel compiles anew on the GPU: the one-kernel backward's last gate, say, reads padded
states), float16, and exact-float32 micro-steps and persistent kernels (products on tensor cores only:
in exact float32 the layers take cuBLAS and the gate kernels).

Prints a table and writes JSON; exits 1 if a kernel failed to compile or broke a limit.

    python benchmarks/triton_compile.py [--arch 80 90] [--quick] [--json benchmarks/triton_compile.json]

``--quick``: TF32 and bfloat16 at the default tiles, the launches of a training run (what
tests/test_triton_compile.py runs).
Not under ``TRITON_INTERPRET=1`` (the interpreter has no compiler).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

if os.environ.get("TRITON_INTERPRET") == "1":
    raise SystemExit("triton_compile.py compiles for a GPU: run it without TRITON_INTERPRET=1")

import torch
import triton
from provenance import stamp
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction

from highwaynet.kernels import triton_gating, triton_persistent
from highwaynet.kernels.activations import Activation
from highwaynet.kernels.persistent import Tiles
from highwaynet.kernels.rhn_recurrence import RHNPath

# (the module: the package's name rhn_recurrence is its function)
_RECURRENCE = importlib.import_module("highwaynet.kernels.rhn_recurrence")
_ONE_KERNEL, _PADDED_HALVES = RHNPath.ONE_KERNEL.value, RHNPath.ONE_KERNEL_PADDED_HALVES.value

#: What each GPU generation allows: the most shared memory one block may use (bytes, opted in) and
#: the registers of an SM.
LIMITS = {80: {"gpu": "A100 (sm_80)", "shared_per_block": 163 * 1024, "registers_per_sm": 65536},
          86: {"gpu": "RTX 30xx, A10 (sm_86)", "shared_per_block": 99 * 1024, "registers_per_sm": 65536},
          89: {"gpu": "RTX 40xx, L4, L40 (sm_89)", "shared_per_block": 99 * 1024, "registers_per_sm": 65536},
          90: {"gpu": "H100, H200 (sm_90)", "shared_per_block": 227 * 1024, "registers_per_sm": 65536}}
PERSISTENT = {"_rhn_forward_kernel", "_rhn_backward_kernel", "_lstmp_forward_kernel"}
#: What each kernel is, for the tables.
KERNELS = {"_gate_forward_kernel": "highway gate, forward (the dense layer's fused path)",
           "_gate_backward_kernel": "highway gate, backward",
           "_forward_kernel": "RHN micro-step, forward (product and gate in one kernel)",
           "_backward_kernel": "RHN micro-step, backward",
           "_rhn_forward_kernel": "persistent RHN window, forward",
           "_rhn_backward_kernel": "persistent RHN window, backward",
           "_lstmp_forward_kernel": "persistent LSTM with projection and clipping (ELMo), forward"}
BENCH_TILES = [Tiles(32, 32, 64, 4), Tiles(32, 16, 128, 8)]  # (gpu_suite.sh bench-persistent's --tiles)


@dataclass
class Compiled:
    """One kernel as compiled for one GPU, and what its code needs."""

    kernel: str
    case: str
    precision: str
    arch: int
    constants: dict[str, object]
    warps: int = 0
    stages: int = 0
    registers: int = 0
    shared: int = 0
    spilled: int = 0
    #: a persistent kernel (its programs must all be resident at once), and the registers of an SM one
    #: program is allocated (:func:`allocated_registers`)
    persistent: bool = False
    allocated: int = 0
    problems: list[str] = field(default_factory=list)


class _CompileOnly:
    """Triton's view of a GPU that is not here: the target to compile for, no stream."""

    def __init__(self, arch: int) -> None:
        self.target = GPUTarget("cuda", arch, 32)

    def get_current_target(self) -> GPUTarget:
        return self.target

    def get_current_device(self) -> int:
        # A "device" per target: Triton keeps each kernel's target per device, from its first call
        return self.target.arch

    def get_current_stream(self, device: int | None = None) -> int:
        return 0


def allocated_registers(registers: int, warps: int) -> int:
    """The registers of an SM a program of ``warps`` warps takes, ``registers`` a thread: an SM allocates
    them 256 a warp (8 a thread), so 255 a thread takes 256."""
    return -(-registers // 8) * 8 * 32 * warps


def _tool(name: str) -> str:
    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


def _resources(cubin: bytes) -> dict[str, int]:
    """``REG``, ``SHARED`` (static), ``STACK`` (the stack frame, where ptxas puts its spills) and ``LOCAL``
    (other local memory) of a cubin's one function, by cuobjdump."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([_tool("cuobjdump"), "-res-usage", f.name], capture_output=True, text=True,
                              check=True).stdout
    found = dict(re.findall(r"\b(REG|SHARED|STACK|LOCAL):(\d+)", text))
    return {k: int(v) for k, v in found.items()}


@contextlib.contextmanager
def compiling_for(arch: int, case: str, record: list[Compiled], precision: str = "") -> Iterator[None]:
    """Inside, a kernel launch compiles for ``arch`` and returns (each candidate configuration of an
    autotuned kernel); each compiled kernel is added to ``record`` under the name ``case``, once (a launch
    of a kernel already compiled inside adds nothing)."""
    original_run, original_tune = JITFunction.run, Autotuner.run
    seen: set[str] = set()

    def run(self, *args, grid, warmup, **kwargs):
        constants = {k: v for k, v in kwargs.items() if k.isupper() or k in ("num_warps", "num_stages")}
        entry = Compiled(self.fn.__name__, case, precision, arch, constants, persistent=self.fn.__name__ in PERSISTENT)
        record.append(entry)
        try:
            kernel = original_run(self, *args, grid=grid, warmup=True, **kwargs)
        except Exception as error:  # (what a GPU's first call would have raised)
            entry.problems.append(f"does not compile: {type(error).__name__}: {str(error).splitlines()[0][:300]}")
            return None
        if kernel.hash in seen:
            record.remove(entry)
            return kernel
        seen.add(kernel.hash)
        if kernel.metadata.target.arch != arch:  # (the check of this harness itself: Triton caches targets)
            entry.problems.append(f"compiled for sm_{kernel.metadata.target.arch}, not sm_{arch}")
        used = _resources(kernel.asm["cubin"])
        entry.warps, entry.stages = kernel.metadata.num_warps, kernel.metadata.num_stages
        entry.registers, entry.spilled = used.get("REG", 0), used.get("STACK", 0) + used.get("LOCAL", 0)
        entry.shared = kernel.metadata.shared + used.get("SHARED", 0)
        entry.allocated = allocated_registers(entry.registers, entry.warps)
        limits = LIMITS.get(arch)
        if limits and entry.shared > limits["shared_per_block"]:
            entry.problems.append(f"shared memory {entry.shared} B > {limits['shared_per_block']} B a block")
        threads = entry.warps * 32
        if limits and entry.persistent and entry.allocated > limits["registers_per_sm"]:
            entry.problems.append(f"{entry.registers} registers x {threads} threads (allocated 256 a warp) > an SM's "
                                  f"{limits['registers_per_sm']}: a program cannot be resident")
        return kernel

    def tune(self, *args, grid=None, warmup=False, **kwargs):  # every candidate, as its first call compiles them
        for config in self.configs:
            self.fn.run(*args, grid=grid, warmup=True, **kwargs, **config.all_kwargs())

    previous = driver._active  # (not .active: without a GPU, asking for it raises)
    driver.set_active(_CompileOnly(arch))
    JITFunction.run, Autotuner.run = run, tune
    try:
        yield
    finally:
        JITFunction.run, Autotuner.run = original_run, original_tune
        driver._active = previous


@contextlib.contextmanager
def precision(name: str) -> Iterator[torch.dtype]:
    """``float32`` (exact products), ``tf32`` (float32 tensors, TF32 products) or ``bfloat16``."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
    try:
        yield torch.bfloat16 if name == "bfloat16" else torch.float32
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def cases(quick: bool) -> Iterator[tuple[str, str, Callable[[], object]]]:
    """Each kernel launch to compile, named: the layers' shapes and launches, each precision, the tiles a
    GPU tries. ``quick``: TF32 and bfloat16, the default tiles, and what a training run launches (the gate
    kernels of exact float32 are TF32's: they have no products)."""
    precisions = ("tf32", "bfloat16") if quick else ("float32", "tf32", "bfloat16")
    masks = (True, False)  # (a dropout mask in training, none in evaluation)
    for name in precisions:
        # The dense layer's gate at the GPU benchmark's shape (16384 rows, 1024 wide: the backward's row
        # tile depends on the rows); the RHN's at the PTB shape (20 rows, 830 wide), as its gate-kernel path
        # launches it. (Empty tensors: a launch here reads nothing.)
        for rows, d in (((16384, 1024),) if quick else ((16384, 1024), (20, 830))):
            for code in ((Activation.RELU,) if quick else tuple(Activation)):
                def gate(rows=rows, d=d, code=code, name=name):
                    with precision(name) as dtype:
                        z, x = torch.empty(rows, 2 * d, dtype=dtype), torch.empty(rows, d, dtype=dtype)
                        triton_gating.gate_forward(z, x, code, False, None)
                        triton_gating.gate_backward(x, z, x, code, None, True, False)
                yield f"gate {name}, {rows} x {d}, {code.name.lower()}", name, gate

        # The RHN's micro-step kernels (autotuned: every candidate) as its one-kernel paths launch them, at the
        # PTB shape (batch 20, hidden 830): 2 steps of 2 micro-layers reach each launch of the forward and the
        # backward. Products on tensor cores only: in exact float32 the layer takes cuBLAS and the gate kernels.
        paths = (_ONE_KERNEL,) if quick else (_ONE_KERNEL, _PADDED_HALVES)
        for path in paths if name != "float32" else ():
            def micro_steps(name=name, path=path):
                with precision(name) as dtype:
                    steps, batch, hidden, depth = 2, 20, 830, 2
                    for has_mask in masks:
                        mask = torch.ones(batch, hidden, dtype=dtype) if has_mask else None
                        weights = [torch.zeros(2 * hidden, hidden, dtype=dtype) for _ in range(depth)]
                        biases = [torch.zeros(2 * hidden, dtype=dtype) for _ in range(depth)]
                        x = torch.zeros(steps, batch, 2 * hidden, dtype=dtype)
                        s0 = torch.zeros(batch, hidden, dtype=dtype)
                        _, z, inputs = _RECURRENCE._forward(path, x, s0, mask, weights, biases)
                        _RECURRENCE._backward(path, torch.zeros(steps, batch, hidden, dtype=dtype), z, inputs, mask,
                                              weights)
            yield f"micro-step {name}, PTB, {path}", name, micro_steps

        # The persistent kernels: the RHN at the PTB shape (depth 10, hidden 830, 35 x 20) with and without
        # a mask (and, in full, the independent carry's three parts), ELMo's LSTM with and without lengths.
        # On tensor cores only, as the micro-steps (persistent.dtype_refusal).
        for tiles in ([None] if quick else [None, *BENCH_TILES]) if name != "float32" else ():
            label = "default tiles" if tiles is None else "tiles {}x{}x{}x{}".format(*tiles)

            def rhn(name=name, tiles=tiles):
                with precision(name) as dtype:
                    steps, batch, hidden, depth = 35, 20, 830, 10
                    for parts in ((2,) if quick else (2, 3)):
                        for has_mask in masks:
                            x = torch.zeros(steps, batch, parts * hidden, dtype=dtype)
                            s0 = torch.zeros(batch, hidden, dtype=dtype)
                            mask = torch.ones(batch, hidden, dtype=dtype) if has_mask else None
                            weights = [torch.zeros(parts * hidden, hidden, dtype=dtype) for _ in range(depth)]
                            biases = [torch.zeros(parts * hidden, dtype=dtype) for _ in range(depth)]
                            _, z, states = triton_persistent.rhn_forward(x, s0, mask, weights, biases, tiles=tiles)
                            triton_persistent.rhn_backward(torch.zeros(steps, batch, hidden, dtype=dtype), z, states,
                                                           mask, weights, tiles=tiles)
            yield f"persistent RHN {name}, PTB, {label}", name, rhn

            def lstmp(name=name, tiles=tiles):
                with precision(name) as dtype:
                    steps, batch, cells, proj = 64, 32, 4096, 512
                    for lengths in (torch.full((batch,), steps), None):
                        triton_persistent.lstmp_forward(
                            torch.zeros(steps, batch, 4 * cells, dtype=dtype), torch.zeros(batch, proj),
                            torch.zeros(batch, cells), torch.zeros(4 * cells, proj), torch.zeros(proj, cells), 0.0,
                            3.0, 3.0, lengths, tiles=tiles)
            yield f"persistent ELMo LSTM {name}, {label}", name, lstmp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", type=int, nargs="+", default=[80, 90],
                        help="compute capabilities to compile for, as 80 (A100) or 90 (H100)")
    parser.add_argument("--quick", action="store_true", help="TF32 and bfloat16 at the default tiles, what a "
                                                             "training run launches")
    parser.add_argument("--json", default="benchmarks/triton_compile.json")
    args = parser.parse_args()
    record: list[Compiled] = []
    start = time.perf_counter()
    for arch in args.arch:
        for name, precision_name, launch in cases(args.quick):
            with compiling_for(arch, name, record, precision_name):
                launch()
    seconds = time.perf_counter() - start
    width = max(len(f"{c.case}: {c.kernel}") for c in record) + 2
    print(f"Triton {triton.__version__}, torch {torch.__version__}: {len(record)} kernels compiled in {seconds:.0f} s")
    print(f"{'':{width}}{'arch':>6}{'tile':>12}{'warps':>7}{'regs':>6}{'shared':>9}{'spilled':>9}")
    for c in record:
        tile = "x".join(str(v) for k, v in c.constants.items() if k.startswith("BLOCK_"))
        print(f"{c.case + ': ' + c.kernel:{width}}{c.arch:>6}{tile:>12}{c.warps:>7}{c.registers:>6}{c.shared:>9}"
              f"{c.spilled:>9}" + "".join(f"\n    {p}" for p in c.problems))
    problems = [c for c in record if c.problems]
    spilling = sorted({f"{c.kernel} (sm_{c.arch})" for c in record if c.spilled})
    print(f"{len(problems)} with problems; spilling: {', '.join(spilling) or 'none'}")
    out = {"title": "highwaynet's Triton kernels compiled for GPUs, without one", **stamp(),
           "command": " ".join(["python benchmarks/triton_compile.py", *sys.argv[1:]]), "triton": triton.__version__,
           "torch": torch.__version__, "limits": {str(a): LIMITS[a] for a in args.arch if a in LIMITS},
           "what": {k: v for k, v in KERNELS.items() if any(c.kernel == k for c in record)},
           "seconds": round(seconds, 1), "kernels": [asdict(c) for c in record]}
    Path(args.json).write_text(json.dumps(out, indent=1, default=str) + "\n")
    print(f"wrote {args.json}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
