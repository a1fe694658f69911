"""The Triton kernels compile for an H100 on a machine without a GPU (``benchmarks/triton_compile.py``).

The interpreter tests check the kernels' arithmetic; only the compiler meets a GPU's limits (shared
memory, registers, the layouts ``tl.dot`` takes). Triton compiles for a target without its driver,
so each kernel is compiled here through its own launch code, as a GPU's first call would, and what
it needs is checked against an H100's.
"""

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import process_timeout

ROOT = Path(__file__).resolve().parents[1]
triton = pytest.importorskip("triton", reason="Triton is not installed (the gpu extra)")
TOOLS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
pytestmark = [
    pytest.mark.skipif(not (TOOLS / "cuobjdump").is_file(), reason="this Triton has no CUDA tools (cuobjdump)"),
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="compiles: not under the interpreter"),
    # (benchmarks/triton_compile.py sets the driver Triton compiles for; older Triton kept it otherwise)
    pytest.mark.skipif(not hasattr(triton.runtime.driver, "_active"),
                       reason=f"Triton {triton.__version__} keeps its driver otherwise than the compile harness "
                              f"sets it (no triton.runtime.driver._active): pip install -U triton"),
]
KERNELS = {"_gate_forward_kernel", "_gate_backward_kernel", "_forward_kernel", "_backward_kernel",
           "_rhn_forward_kernel", "_rhn_backward_kernel", "_lstmp_forward_kernel"}


def test_every_kernel_compiles_for_an_h100_within_its_limits(tmp_path):
    out = tmp_path / "compiled.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "triton_compile.py"), "--quick", "--arch", "90",
                          "--json", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=process_timeout(600))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    record = json.loads(out.read_text())
    kernels = record["kernels"]
    assert {k["kernel"] for k in kernels} == KERNELS
    assert all(k["arch"] == 90 and not k["problems"] and k["registers"] > 0 for k in kernels), [
        k for k in kernels if k["problems"] or not k["registers"]]
    # both precisions of the quick run, and the autotuner's every candidate tile of the micro-step kernels
    assert {k["precision"] for k in kernels} == {"tf32", "bfloat16"}
    # each persistent kernel marked as one, with the registers of an SM its program is allocated
    assert all(k["persistent"] == k["kernel"].startswith(("_rhn_", "_lstmp_")) for k in kernels)
    assert all(k["allocated"] == -(-k["registers"] // 8) * 8 * 32 * k["warps"] for k in kernels)
    assert set(record["what"]) == KERNELS
    tuned = {(k["case"], tuple(sorted(k["constants"].items()))) for k in kernels if k["kernel"] == "_forward_kernel"}
    assert len(tuned) >= 2 * 7, len(tuned)


@pytest.fixture
def compiler(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module("triton_compile")


def test_a_kernel_beyond_the_gpus_shared_memory_spilling_or_not_compiling_is_reported(compiler):
    """The checks themselves: a product whose tiles need more shared memory than an H100 block may
    have, one held to 32 registers a thread (ptxas spills the rest to the stack frame, which cuobjdump
    reports as STACK, not LOCAL), and a kernel that does not compile (a range of 12: Triton's are powers
    of two), are each reported, not passed over."""
    import torch
    import triton.language as tl

    @triton.jit
    def product(a_ptr, b_ptr, c_ptr, K, BLOCK: tl.constexpr, BLOCK_K: tl.constexpr):
        rows, cols = tl.arange(0, BLOCK)[:, None], tl.arange(0, BLOCK)[None, :]
        ks = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = tl.load(a_ptr + rows * K + (k + ks)[None, :])
            b = tl.load(b_ptr + (k + ks)[:, None] * BLOCK + cols)
            acc = tl.dot(a, b, acc)
        tl.store(c_ptr + rows * BLOCK + cols, acc)

    record = []
    a = torch.zeros(256, 1024)
    for case, block, block_k, stages in (("fits", 64, 32, 2), ("too big", 256, 256, 4), ("not compiling", 12, 16, 1)):
        with compiler.compiling_for(90, case, record):
            product[(1,)](a, a, a, 1024, BLOCK=block, BLOCK_K=block_k, num_stages=stages)

    @triton.jit
    def scan(x_ptr, y_ptr, BLOCK: tl.constexpr):  # (a 64 x 64 tile in one warp: 128 values a thread, all live)
        rows, cols = tl.arange(0, BLOCK)[:, None], tl.arange(0, BLOCK)[None, :]
        x = tl.load(x_ptr + rows * BLOCK + cols)
        tl.store(y_ptr + rows * BLOCK + cols, tl.cumsum(x, axis=1) * tl.flip(x, 1))

    for case, registers in (("scan", None), ("spilling", 32)):
        with compiler.compiling_for(90, case, record):
            scan[(1,)](a, a, BLOCK=64, num_warps=1, maxnreg=registers)
    with compiler.compiling_for(80, "fits, on an A100", record):  # (after sm_90: each its own target)
        product[(1,)](a, a, a, 1024, BLOCK=64, BLOCK_K=32, num_stages=2)
    found = {entry.case: entry for entry in record}
    assert not found["fits, on an A100"].problems and found["fits, on an A100"].arch == 80
    assert not found["fits"].problems and found["fits"].registers > 0 and found["fits"].shared > 0
    assert found["scan"].spilled == 0 and not found["spilling"].problems
    assert found["spilling"].registers <= 32 and found["spilling"].spilled > 0, found["spilling"]
    assert found["too big"].shared > compiler.LIMITS[90]["shared_per_block"]
    assert any("shared memory" in p for p in found["too big"].problems), found["too big"]
    assert any("does not compile" in p for p in found["not compiling"].problems), found["not compiling"]
    assert triton.runtime.driver._active is None or not isinstance(triton.runtime.driver._active,
                                                                    compiler._CompileOnly)


def test_registers_are_allocated_256_a_warp_and_exact_float32_compiles_no_products(compiler):
    """An SM allocates registers 256 a warp (8 a thread): 255 a thread in 8 warps take all 65,536, 250
    take 256 a thread. Exact float32 compiles only the gate kernels: the layers take neither the
    micro-steps nor the persistent kernels there (products on tensor cores only), so none is counted."""
    assert compiler.allocated_registers(255, 8) == 65536 and compiler.allocated_registers(128, 8) == 32768
    assert compiler.allocated_registers(250, 4) == 256 * 32 * 4
    assert {name.split(" ")[0] for name, precision, _ in compiler.cases(quick=False) if precision == "float32"} == {
        "gate"}


def test_the_micro_steps_are_compiled_as_the_rhn_launches_them(compiler):
    """Triton compiles a kernel anew for each specialisation (an integer's divisibility by 16, the
    constexprs): the quick run's micro-step case compiles every kernel that the RHN's one-kernel path
    launches over a longer window (a training step's, with its dropout mask, and an evaluation's,
    without), weights and states padded as the layer pads them; not kernels of other strides."""
    import importlib

    import torch
    from triton.runtime.jit import JITFunction

    recurrence = importlib.import_module("highwaynet.kernels.rhn_recurrence")
    compiled: dict[str, set[str]] = {"case": set(), "layer": set()}

    def collect(into, launch):
        with compiler.compiling_for(90, into, []):
            inner = JITFunction.run

            def run(self, *args, **kwargs):
                kernel = inner(self, *args, **kwargs)
                if kernel is not None:
                    compiled[into].add(kernel.hash)
                return kernel
            JITFunction.run = run
            launch()

    case = next(launch for name, _, launch in compiler.cases(quick=True) if name.startswith("micro-step bfloat16"))
    collect("case", case)

    def layer():
        steps, batch, hidden, depth, dtype = 4, 20, 830, 3, torch.bfloat16
        for mask in (torch.ones(batch, hidden, dtype=dtype), None):
            weights = [torch.randn(2 * hidden, hidden, dtype=dtype) for _ in range(depth)]
            biases = [torch.randn(2 * hidden, dtype=dtype) for _ in range(depth)]
            _, z, inputs = recurrence._forward("one kernel", torch.randn(steps, batch, 2 * hidden, dtype=dtype),
                                               torch.randn(batch, hidden, dtype=dtype), mask, weights, biases)
            recurrence._backward("one kernel", torch.randn(steps, batch, hidden, dtype=dtype), z, inputs, mask,
                                 weights)
    collect("layer", layer)
    assert compiled["layer"] and compiled["layer"] <= compiled["case"], (
        len(compiled["layer"] - compiled["case"]), len(compiled["layer"]))


def test_performance_page_shows_what_the_compiled_kernels_need(monkeypatch):
    """The page's table takes each kernel's most registers and shared memory over its tiles, per GPU
    and precision, and says which broke a limit or spilled."""
    monkeypatch.syspath_prepend(str(ROOT / "docs" / "_ext"))
    results = importlib.import_module("results")

    def kernel(name, precision, registers, shared, problems=(), spilled=0, warps=4):
        return {"kernel": name, "case": "c", "precision": precision, "arch": 90, "constants": {}, "warps": warps,
                "stages": 1, "registers": registers, "shared": shared, "spilled": spilled, "problems": list(problems),
                "persistent": name.startswith("_lstmp_"), "allocated": -(-registers // 8) * 8 * 32 * warps}

    record = {"command": "python benchmarks/triton_compile.py", "triton": "3.9.0", "highwaynet": "0.4.0",
              "commit": "abc", "date": "2026-11-28",
              "limits": {"90": {"gpu": "H100 (sm_90)", "shared_per_block": 227 * 1024, "registers_per_sm": 65536}},
              "what": {"_lstmp_forward_kernel": "persistent LSTM", "_gate_forward_kernel": "gate"},
              "kernels": [kernel("_lstmp_forward_kernel", "bfloat16", 128, 24576, warps=8),
                          kernel("_lstmp_forward_kernel", "bfloat16", 255, 1024),
                          kernel("_lstmp_forward_kernel", "float32", 200, 300 * 1024, ["shared memory"]),
                          kernel("_gate_forward_kernel", "bfloat16", 40, 0, spilled=16)]}
    text = results._compiled(record)
    assert "| persistent LSTM | 200, 300 KB (over a limit) | 255, 24 KB |" in text, text
    assert "| gate |  | 40, 0 KB, 16 B spilled |" in text, text
    assert "**4 kernels, 1 beyond a limit, 1 spilling to local memory** (_gate_forward_kernel)" in text
    assert "at most 32,768 of an SM's 65,536 registers" in text  # (128 registers x 256 threads)
    record["kernels"].append(kernel("_lstmp_forward_kernel", "float32", 255, 1024, warps=8))
    # (an SM allocates registers 256 a warp: 255 a thread take 256, and 8 warps the whole SM)
    assert "at most 65,536 of an SM's 65,536 registers" in results._compiled(record)
    record["kernels"].append(kernel("_gate_forward_kernel", "bfloat16", 40, 0, spilled=8))  # (counted as kernels)
    assert "**6 kernels, 1 beyond a limit, 2 spilling to local memory** (_gate_forward_kernel)" in \
        results._compiled(record)
    del record["kernels"][0]["allocated"]  # (a record written before the script wrote it)
    with pytest.raises(ValueError, match="rerun python benchmarks/triton_compile.py"):
        results._compiled(record)
