"""One RHN micro-step, forward and backward: the one-kernel micro-step against cuBLAS plus the gate kernel.

At the RHN paper's PTB shape (batch 20, hidden 830) a micro-step is a small product and a little
element-wise work. Rows, each a CUDA graph of ``--micro-steps`` micro-steps (the launches as they
run in the layer's captured forward + backward), time per micro-step:

  product alone       ``addmm`` (forward: ``s Rᵀ + b``; backward: ``dz R``): the floor
                      (forward also with ``Rᵀ`` stored contiguous: cuBLAS's other layout)
  product + gate      ``addmm`` then the Triton gate kernel (forward), the gate's backward kernel
                      then ``addmm`` (backward): what the layer ran before the one-kernel step
  one kernel          :mod:`highwaynet.kernels.rhn_step` (backward: with the previous micro-step's
                      gate in the epilogue, as the layer's walk runs it), reading ``R`` as it is
                      (rows of 830), with ``R`` padded to rows of 832 (``padded_weight``), with
                      the states padded too (``padded_states``: as the layer runs it), and with
                      each half of ``[h | t]`` and ``dz`` padded as well (``padded_halves``: as the
                      layer runs on ``RHNPath.ONE_KERNEL_PADDED_HALVES``)
  ... D weights in turn
                      the same, the micro-steps reading ``--depth`` weights in turn, as the layer's
                      do: at the PTB shape (depth 10) 55 MB of ``R``, more than an H100's 50 MB of
                      L2, where the other rows read one weight, which stays in L2

    python benchmarks/rhn_step.py [--tf32]

``--device cpu`` under ``TRITON_INTERPRET=1`` runs the rows without CUDA graphs at a tiny shape, to
check that the script runs (the tests do); its times mean nothing.
"""

from __future__ import annotations

import argparse
import itertools

import torch
from common import autotuned, graphed, measure_rows, report

from highwaynet.kernels import rhn_layout, rhn_step
from highwaynet.kernels.gating import ACTIVATION_CODES, gate_backward, gate_forward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--hidden", type=int, default=830)
    parser.add_argument("--micro-steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--depth", type=int, default=10, help="weights read in turn in the 'in turn' rows")
    parser.add_argument("--tf32", action="store_true", help="float32 products in TF32")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu under TRITON_INTERPRET=1 (a smoke test)")
    parser.add_argument("--json", default="benchmarks/rhn_step.json")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.manual_seed(0)
    b, h, n, tanh = args.batch, args.hidden, args.micro_steps, ACTIVATION_CODES["tanh"]
    s, g = torch.randn(b, h, device=device), torch.randn(b, h, device=device)
    w, bias = torch.randn(2 * h, h, device=device) / h ** 0.5, torch.randn(2 * h, device=device)
    z = torch.randn(b, 2 * h, device=device).sigmoid()  # as [h | t]
    dz, dz_before, out = torch.randn(b, 2 * h, device=device), torch.empty(b, 2 * h, device=device), torch.empty_like(s)
    w_t, w_pad = w.t().contiguous(), rhn_layout.padded_weight(w)
    others = [torch.randn(2 * h, h, device=device) / h ** 0.5 for _ in range(args.depth - 1)]
    depth_ws, depth_pads = [w, *others], [w_pad, *map(rhn_layout.padded_weight, others)]
    s_pad, out_pad = (rhn_layout.padded_states((b, h), s)[:, :h] for _ in range(2))
    s_pad.copy_(s)
    z_pad, dz_pad, dz_before_pad = (rhn_layout.padded_halves((b, 2 * h), s) for _ in range(3))
    rhn_layout.halves(z_pad, h).copy_(rhn_layout.halves(z, h))
    rhn_layout.halves(dz_pad, h).copy_(rhn_layout.halves(dz, h))

    def repeated(step):
        def run():
            for _ in range(n):
                step()
        return graphed(run) if device.type == "cuda" else run

    def in_turn(step, weights):
        """``step(weight)`` with ``weights`` in turn, one a micro-step, as the layer reads its micro-layers'."""
        turn = itertools.cycle(weights)
        return repeated(lambda: step(next(turn)))

    in_turn_label = f"{args.depth} weights in turn"

    rows = {
        "forward: product alone": repeated(lambda: torch.addmm(bias, s, w.t(), out=z)),
        "forward: product alone, Rᵀ stored": repeated(lambda: torch.addmm(bias, s, w_t, out=z)),
        "forward: product + gate": repeated(lambda: gate_forward(torch.addmm(bias, s, w.t(), out=z), s, tanh,
                                                                 keep_activations=True, out=out)),
        "forward: one kernel, rows of H": repeated(lambda: rhn_step.micro_step_forward(s, None, w, bias, z, out)),
        "forward: one kernel, R padded": repeated(lambda: rhn_step.micro_step_forward(s, None, w_pad, bias, z, out)),
        "forward: one kernel, R and states padded": repeated(
            lambda: rhn_step.micro_step_forward(s_pad, None, w_pad, bias, z, out_pad)),
        f"forward: product alone, {in_turn_label}": in_turn(lambda r: torch.addmm(bias, s, r.t(), out=z), depth_ws),
        f"forward: one kernel, R and states padded, {in_turn_label}": in_turn(
            lambda r: rhn_step.micro_step_forward(s_pad, None, r, bias, z, out_pad), depth_pads),
        "forward: one kernel, all padded": repeated(
            lambda: rhn_step.micro_step_forward(s_pad, None, w_pad, bias, z_pad, out_pad)),
        f"forward: one kernel, all padded, {in_turn_label}": in_turn(
            lambda r: rhn_step.micro_step_forward(s_pad, None, r, bias, z_pad, out_pad), depth_pads),
        "backward: product alone": repeated(lambda: torch.mm(dz, w, out=out)),
        "backward: gate + product": repeated(
            lambda: gate_backward(g, z, s, tanh, grad_z=dz, activated=True)[1].addmm_(dz, w)),
        "backward: one kernel, rows of H": repeated(lambda: rhn_step.micro_step_backward(
            dz, g, w, None, previous=rhn_step.Previous(z, s, None, dz_before, out))),
        "backward: one kernel, R padded": repeated(lambda: rhn_step.micro_step_backward(
            dz, g, w_pad, None, previous=rhn_step.Previous(z, s, None, dz_before, out))),
        "backward: one kernel, R and states padded": repeated(lambda: rhn_step.micro_step_backward(
            dz, g, w_pad, None, previous=rhn_step.Previous(z, s_pad, None, dz_before, out))),
        f"backward: product alone, {in_turn_label}": in_turn(lambda r: torch.mm(dz, r, out=out), depth_ws),
        f"backward: one kernel, R and states padded, {in_turn_label}": in_turn(lambda r: rhn_step.micro_step_backward(
            dz, g, r, None, previous=rhn_step.Previous(z, s_pad, None, dz_before, out)), depth_pads),
        "backward: one kernel, all padded": repeated(lambda: rhn_step.micro_step_backward(
            dz_pad, g, w_pad, None, previous=rhn_step.Previous(z_pad, s_pad, None, dz_before_pad, out))),
        f"backward: one kernel, all padded, {in_turn_label}": in_turn(lambda r: rhn_step.micro_step_backward(
            dz_pad, g, r, None, previous=rhn_step.Previous(z_pad, s_pad, None, dz_before_pad, out)), depth_pads),
    }
    results = {name: seconds / n for name, seconds in measure_rows(rows, device, args.repeats).items()}
    settings = {**vars(args), "tiles": autotuned(rhn_step._forward_kernel, rhn_step._backward_kernel)}
    print(settings["tiles"])
    runs_as = "a CUDA graph" if device.type == "cuda" else "a loop"
    report(f"one RHN micro-step, batch {b}, hidden {h}, {'TF32' if args.tf32 else 'float32'}: "
           f"time per micro-step in {runs_as} of {n}", results, "forward: product alone", device,
           args.json, settings, {"µs": {k: 1e6 * v for k, v in results.items()}})


if __name__ == "__main__":
    main()
