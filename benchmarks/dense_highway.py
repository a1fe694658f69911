"""Dense highway stack, forward + backward: ours against the floor and the peers' algorithms.

Rows, all on the same input and weights, measured side by side in one run:
  floor      the bare projections alone (``Linear(d, 2d)`` per layer, no gating)
  separate   Chainer's / Lasagne's algorithm: separate H and T linears, gating written out
  fused-one  GluonNLP's / AllenNLP's algorithm: one projection, split, gating written out
  ours       ``highwaynet.nn.Highway``, eager: on CUDA with Triton, the fused layer
             (``highwaynet.kernels.highway_layer``: one element-wise pass each way); elsewhere
             one projection and ``torch.lerp`` gating
  ours, unfused  the same layers with ``fused=False`` (on the CPU this is what "ours" runs)
  ours+compile  the same under ``torch.compile``
  ours, unfused, max-autotune  (``--max-autotune``) ``Highway(fused=False)`` under
             ``torch.compile(mode="max-autotune")``, whose Triton matrix-product templates can take the
             gating into their epilogues, which the fused layer's separate pass cannot

``--dtype tf32`` runs float32 tensors with TF32 matrix products (PyTorch's
``allow_tf32``), as the issue's H100 table.

Prints a table of medians and ratios to the floor, and writes JSON.

    python benchmarks/dense_highway.py                       # CPU-sized shapes, on the CPU
    python benchmarks/dense_highway.py --device cuda --tokens 16384 --dim 1024 --dtype bfloat16 --repeats 30
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from common import measure_rows, report

from highwaynet.nn import Highway


def separate_step(x, weights, biases):
    for w, b in zip(weights, biases, strict=True):
        d = w.shape[1]
        h = F.relu(F.linear(x, w[:d], b[:d]))
        t = torch.sigmoid(F.linear(x, w[d:], b[d:]))
        x = h * t + x * (1 - t)
    return x


def one_projection_step(x, weights, biases):
    for w, b in zip(weights, biases, strict=True):
        h, t = F.linear(x, w, b).chunk(2, dim=-1)
        t = torch.sigmoid(t)
        x = F.relu(h) * t + x * (1 - t)
    return x


def floor_step(x, weights, biases):
    # The same matrix products, forward and backward (dX and dW of every layer), and nothing else.
    return sum(F.linear(x, w, b).sum() for w, b in zip(weights, biases, strict=True))


def fwd_bwd(fn, x):
    def run():
        out = fn(x)
        (out.sum() if out.dim() else out).backward()
        x.grad = None
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--dtype", default="float32", choices=("float32", "tf32", "bfloat16"))
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--max-autotune", action="store_true",
                        help="add the unfused layer under torch.compile(mode='max-autotune') (minutes to tune)")
    parser.add_argument("--json", default="benchmarks/dense_highway.json")
    args = parser.parse_args()

    device = torch.device(args.device)
    dtype = torch.float32 if args.dtype == "tf32" else getattr(torch, args.dtype)
    torch.backends.cuda.matmul.allow_tf32 = args.dtype == "tf32"
    torch.backends.cudnn.allow_tf32 = args.dtype == "tf32"
    torch.manual_seed(0)
    net = Highway(args.dim, args.layers).to(device, dtype)
    unfused = Highway(args.dim, args.layers, fused=False).to(device, dtype)
    unfused.load_state_dict(net.state_dict())
    weights = [p.weight for p in net.layers]
    biases = [p.bias for p in net.layers]
    x = torch.randn(args.tokens, args.dim, device=device, dtype=dtype, requires_grad=True)

    # The peers' algorithms compute the same values (checked here, so that the table compares like with like).
    with torch.no_grad():
        reference = one_projection_step(x, weights, biases)
        for fn in (lambda v: separate_step(v, weights, biases), net, unfused):
            torch.testing.assert_close(fn(x), reference, rtol=2e-2, atol=2e-2)

    rows = {
        "floor (projections alone)": lambda v: floor_step(v, weights, biases),
        "separate H and T (Chainer, Lasagne)": lambda v: separate_step(v, weights, biases),
        "one projection (GluonNLP, AllenNLP)": lambda v: one_projection_step(v, weights, biases),
        "ours: Highway, eager": net,
        "ours: Highway(fused=False), eager": unfused,
    }
    if not args.no_compile:
        rows["ours: Highway, torch.compile"] = torch.compile(net)
    if args.max_autotune:
        rows["ours: Highway(fused=False), compile max-autotune"] = torch.compile(unfused, mode="max-autotune")
    results = measure_rows({name: fwd_bwd(fn, x) for name, fn in rows.items()}, device, args.repeats)
    report(f"dense highway fwd+bwd, {args.tokens} tokens x {args.dim} wide, {args.layers} layers, {args.dtype}, "
           f"median of {args.repeats}", results, "floor (projections alone)", device, args.json, vars(args))


if __name__ == "__main__":
    main()
