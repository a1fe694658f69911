"""Dense highway stack, forward + backward: ours against the floor and the peers' algorithms.

Rows, all on the same input and weights, measured side by side in one run:
  floor      the bare projections alone (``Linear(d, 2d)`` per layer, no gating)
  separate   Chainer's / Lasagne's algorithm: separate H and T linears, gating written out
  fused-one  GluonNLP's / AllenNLP's algorithm: one projection, split, gating written out
  ours       ``highwaynet.nn.Highway`` (one projection, ``torch.lerp`` gating), eager
  ours+compile  the same under ``torch.compile``

Prints a table of medians and ratios to the floor, and writes JSON.

    python benchmarks/dense_highway.py                       # CPU-sized shapes, on the CPU
    python benchmarks/dense_highway.py --device cuda --tokens 16384 --dim 1024 --dtype bfloat16
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch
import torch.nn.functional as F

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


def timed(fn, x, sync, repeats: int) -> float:
    times = []
    for i in range(repeats + 3):
        sync()
        start = time.perf_counter()
        out = fn(x)
        (out.sum() if out.dim() else out).backward()
        sync()
        if i >= 3:  # warm-up
            times.append(time.perf_counter() - start)
        x.grad = None
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--json", default="benchmarks/dense_highway.json")
    args = parser.parse_args()

    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    torch.manual_seed(0)
    net = Highway(args.dim, args.layers).to(device, dtype)
    weights = [p.weight for p in net.layers]
    biases = [p.bias for p in net.layers]
    x = torch.randn(args.tokens, args.dim, device=device, dtype=dtype, requires_grad=True)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    # The peers' algorithms compute the same values (checked here, so that the table compares like with like).
    with torch.no_grad():
        reference = one_projection_step(x, weights, biases)
        for fn in (lambda v: separate_step(v, weights, biases), net):
            torch.testing.assert_close(fn(x), reference, rtol=2e-2, atol=2e-2)

    rows = {
        "floor (projections alone)": lambda v: floor_step(v, weights, biases),
        "separate H and T (Chainer, Lasagne)": lambda v: separate_step(v, weights, biases),
        "one projection (GluonNLP, AllenNLP)": lambda v: one_projection_step(v, weights, biases),
        "ours: Highway, eager": net,
    }
    if not args.no_compile:
        rows["ours: Highway, torch.compile"] = torch.compile(net)
    results = {name: timed(fn, x, sync, args.repeats) for name, fn in rows.items()}
    floor = results["floor (projections alone)"]
    print(f"dense highway fwd+bwd, {args.tokens} tokens x {args.dim} wide, {args.layers} layers, "
          f"{args.dtype}, {device} ({torch.get_num_threads()} threads), median of {args.repeats}")
    print(f"{'':40} {'ms':>9} {'x floor':>9}")
    for name, seconds in results.items():
        print(f"{name:40} {1e3 * seconds:9.2f} {seconds / floor:9.2f}")
    record = {"shape": vars(args), "torch": torch.__version__, "machine": platform.machine(),
              "device": torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "cpu",
              "threads": torch.get_num_threads(), "ms": {k: 1e3 * v for k, v in results.items()},
              "ratio_to_floor": {k: v / floor for k, v in results.items()}}
    with open(args.json, "w") as f:
        json.dump(record, f, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
