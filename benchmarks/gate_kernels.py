"""The fused gate kernels alone: achieved memory bandwidth per block shape, and a kernel profile.

Each kernel is memory-bound: forward reads ``z`` (2D) and ``x`` (D) and writes ``y`` (D); backward
reads ``dy``, ``z``, ``x`` and writes ``g`` (2D) and ``dx`` (D). The table gives GB/s for each
(BLOCK_M, BLOCK_D, warps) tried, to compare with the device's copy bandwidth (measured here too),
then the CUDA kernel table of one fused dense highway fwd+bwd.

    python benchmarks/gate_kernels.py --tokens 16384 --dim 1024 --dtype bfloat16
"""

from __future__ import annotations

import argparse

import torch
from common import median_seconds

from highwaynet.kernels import gating
from highwaynet.nn import Highway


def per_call(fn, device, calls: int = 20) -> float:
    """Seconds per call of ``fn``, timed over ``calls`` queued calls: one synchronisation for all of
    them, which a single call of ~0.1 ms would not outweigh."""
    return median_seconds(lambda: [fn() for _ in range(calls)], device, 10) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    device, dtype = torch.device("cuda"), getattr(torch, args.dtype)
    m, d = args.tokens, args.dim
    z = torch.randn(m, 2 * d, device=device, dtype=dtype)
    x, dy = torch.randn(m, d, device=device, dtype=dtype), torch.randn(m, d, device=device, dtype=dtype)
    size = x.element_size()
    big = torch.empty(1 << 28, device=device, dtype=torch.uint8)
    copy = per_call(lambda: big.clone(), device)
    print(f"copy: {2 * big.numel() / copy / 1e9:.0f} GB/s (read + write)")
    original = gating._blocks
    print(f"{'BLOCK_D':>8}{'BLOCK_M':>8}{'warps':>6}{'fwd GB/s':>10}{'bwd GB/s':>10}")
    for block_d in (64, 128, 256):
        for elements in (1024, 2048, 4096):
            for warps in (4, 8):
                gating._blocks = lambda _d, bd=block_d, e=elements, w=warps: (bd, max(1, e // bd), w)
                fwd = per_call(lambda: gating.gate_forward(z, x, 1), device)
                bwd = per_call(lambda: gating.gate_backward(dy, z, x, 1, bias_grad=True), device)
                print(f"{block_d:8}{elements // block_d:8}{warps:6}{4 * m * d * size / fwd / 1e9:10.0f}"
                      f"{7 * m * d * size / bwd / 1e9:10.0f}")
    gating._blocks = original

    net = Highway(d, 4).to(device, dtype)
    xs = torch.randn(m, d, device=device, dtype=dtype, requires_grad=True)
    for _ in range(3):
        net(xs).sum().backward()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        net(xs).sum().backward()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=15, max_name_column_width=60))


if __name__ == "__main__":
    main()
