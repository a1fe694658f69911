"""The CPU RHN recurrence part by part: where a window's time goes, against its products alone.

What ``RHN`` runs without Triton (:mod:`highwaynet.kernels.rhn_eager`), at the CPU shape of
``benchmarks/rhn.py --cpu-shape`` (depth 4, hidden 256, 35 steps x batch 20). Rows, side by side:

  window                    the recurrence forward then backward, as the layer calls them
  forward, backward         each half alone
  forward: products         its ``T·D`` small products alone (``baddbmm_``: each micro-step's ``h``
                            and ``t`` as one batched product of two matrices, as ours on two
                            threads or more, into a buffer's rows)
  forward: products as (B, 2H)  the same products as one ``(B, 2H)`` product each (``addmm_``), as
                            the layer ran them before 2026-11-24: MKL then splits the ``B`` rows
                            over the threads, and each reads all of ``R_d``
  forward: one sigmoid      one ``sigmoid_`` over each micro-step's ``(B, 2H)`` row, alone
  backward: walk products   the walk's ``T·D`` small products alone (``dz R`` onto the carried gradient,
                            ``baddbmm_``: ``R_d``'s column halves as two matrices, the gradient by halves)
  backward: walk products as (B, H)  the same as one ``(B, 2H) x (2H, H)`` product each (``addmm_``),
                            as before 2026-11-24
  backward: weight products the ``D`` weight-gradient products over ``T·B`` rows, alone

  window, C++ loops; forward, C++ loop; backward, C++ walk
                            the same with the loops in C++ (``kernels.rhn_cpu``, what the layer runs
                            where that can be built): each micro-step's gating one pass

What each half costs above its products is its element-wise work and the operators' own cost.
The last column divides each row by the ``T·D`` micro-steps.

    python benchmarks/rhn_cpu_parts.py
"""

from __future__ import annotations

import argparse

import torch
from common import measure_rows, report

from highwaynet.kernels import rhn_cpu, rhn_eager


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--steps", type=int, default=35)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--json", default="benchmarks/rhn_cpu_parts.json")
    args = parser.parse_args()
    torch.manual_seed(0)
    depth, hidden, steps, batch = args.depth, args.hidden, args.steps, args.batch
    micro_steps = steps * depth
    x_proj = torch.randn(steps, batch, 2 * hidden)
    s0 = torch.zeros(batch, hidden)
    weights = [torch.randn(2 * hidden, hidden) / hidden ** 0.5 for _ in range(depth)]
    biases = [torch.randn(2 * hidden) for _ in range(depth)]
    grad_out = torch.randn(steps, batch, hidden)
    apart = rhn_eager.use_halves(x_proj)  # as RHN calls it: h and t apart on two threads or more
    _, z, inputs = rhn_eager.forward(x_proj, s0, None, weights, biases, apart)

    rows_z = torch.randn(micro_steps, batch, 2 * hidden).unbind(0)
    rows_pair = torch.randn(micro_steps, 2, batch, hidden).unbind(0)
    # sigmoid_ on rows of its own: repeated in place it settles at its fixed point, away from the
    # denormal values the products' rows (growing call by call) would lead it to
    rows_sigmoid = torch.randn(micro_steps, batch, 2 * hidden).unbind(0)
    state, carried = torch.randn(batch, hidden), torch.randn(batch, hidden)
    # as rhn_eager's on two threads or more: R_dᵀ's H and T columns, and R_d's column halves, as views
    pairs = [w.t().unflatten(-1, (2, -1)).transpose(0, 1) for w in weights]
    state_pair = state.expand(2, batch, hidden)
    weights_t = [w.t() for w in weights]
    walk_parts = 2 if hidden % 2 == 0 else 1
    column_halves = [w.unflatten(-1, (walk_parts, -1)).transpose(0, 1) for w in weights]
    carried_pair = torch.randn(walk_parts, batch, hidden // walk_parts)
    rows_dz = torch.randn(micro_steps, batch, 2 * hidden).unbind(0)
    dz_all = torch.randn(depth, steps * batch, 2 * hidden)  # layer-major as ours
    inputs_all = torch.randn(depth, steps * batch, hidden)

    def forward_products():
        for k in range(micro_steps):
            rows_pair[k].baddbmm_(state_pair, pairs[k % depth])

    def forward_products_unsplit():
        for k in range(micro_steps):
            rows_z[k].addmm_(state, weights_t[k % depth])

    def sigmoids():
        for k in range(micro_steps):
            rows_sigmoid[k].sigmoid_()

    def walk_products():
        for k in range(micro_steps - 1, -1, -1):
            carried_pair.baddbmm_(rows_dz[k].expand(walk_parts, batch, 2 * hidden), column_halves[k % depth])

    def walk_products_unsplit():
        for k in range(micro_steps - 1, -1, -1):
            carried.addmm_(rows_dz[k], weights[k % depth])

    def weight_products():
        for d in range(depth):
            dz_all[d].t() @ inputs_all[d]

    def forward(cpp=False):
        return rhn_eager.forward(x_proj, s0, None, weights, biases, apart, cpp=cpp)

    def backward(cpp=False):
        return rhn_eager.backward(grad_out, z, inputs, None, weights, cpp=cpp)

    def forward_backward(cpp=False):
        _, z_new, inputs_new = forward(cpp)
        rhn_eager.backward(grad_out, z_new, inputs_new, None, weights, cpp=cpp)

    rows = {"window": forward_backward, "forward": forward, "forward: products": forward_products,
            "forward: products as (B, 2H)": forward_products_unsplit,
            "forward: one sigmoid": sigmoids, "backward": backward, "backward: walk products": walk_products,
            "backward: walk products as (B, H)": walk_products_unsplit,
            "backward: weight products": weight_products}
    if rhn_cpu.available(x_proj):  # what the layer runs where the C++ loops can be built
        rows.update({"window, C++ loops": lambda: forward_backward(True), "forward, C++ loop": lambda: forward(True),
                     "backward, C++ walk": lambda: backward(True)})
    results = measure_rows(rows, torch.device("cpu"), args.repeats)
    report(f"CPU RHN recurrence (kernels.rhn_eager, rhn_cpu) part by part: depth {depth}, hidden {hidden}, "
           f"{steps} steps x batch {batch}, float32; median of {args.repeats}", results, "window",
           torch.device("cpu"), args.json, vars(args),
           {"µs/micro-step": {k: 1e6 * v / micro_steps for k, v in results.items()}})


if __name__ == "__main__":
    main()
