"""An RHN layer, forward + backward over a BPTT window: ours against the labml loop and cuDNN's LSTM.

Default shape, the RHN paper's PTB model: recurrence depth 10, hidden 830, 35 steps, batch 20
(``--cpu-shape`` picks one a 2-core CPU runs in seconds: depth 4, hidden 256).

Rows, measured side by side in one run:
  floor               the layer's matrix products alone, as ours does them: the input projection
                      and its weight gradient, one small product per micro-step forward and one
                      back (the state's gradient), one weight-gradient product per micro-layer
  labml as written    labml's RHN (labml_nn.recurrent_highway_networks) as its code runs: autograd
                      over every micro-step, the input's projection inside the step loop (a small
                      product a step, each way), ``s + (h - s)·t``
  labml loop          ``RHN(fused=False)``: labml's loop with the input's projection taken out of
                      it (one product for the whole window) and the gate one ``lerp``
  ours                ``RHN`` (fused recurrence: hand-written backward, batched weight gradients;
                      on CUDA with TF32, one Triton kernel per micro-step each way, product and
                      gate; in exact float32, cuBLAS and the Triton gate kernels)
  ours, PyTorch operations
                      (the CPU) ``RHN`` with ``kernels.rhn_cpu`` switched off: its loops' gating in
                      PyTorch operations, not one pass of C++ a micro-step
  ours, torch.compile ``torch.compile(RHN)``: the recurrence stays one call (a custom operator each
                      way), the rest compiled
  ours, halves padded ``RHN`` on ``RHNPath.ONE_KERNEL_PADDED_HALVES`` where the one-kernel path runs
                      (Triton, tensor-core products): each half of ``[h | t]`` and ``dz`` padded too, a
                      layout never chosen automatically until a GPU run shows it faster
  ours, one kernel a micro-step
                      ``RHN`` on ``RHNPath.ONE_KERNEL`` where it would take the persistent kernel
  ours, persistent kernel
                      ``RHN`` on ``RHNPath.PERSISTENT`` wherever it takes a Triton path (also where the
                      layer's own rules refuse it, as in TF32 at the PTB shape, whose weights exceed
                      an H100's L2 cache): the whole window one launch each way; ``--tiles`` adds a
                      row for each of other tiles (``block_b x block_n x block_k x warps``)
  labml loop, torch.compile whole
                      (``--compile-loop``) the labml loop traced whole by torch.compile, every micro-step
                      unrolled; on the CPU with inductor's C++ wrapper, so that no Python runs between
                      the operations (minutes to compile: 4 on 2 cores at ``--cpu-shape``)
  ... CUDA graph      the same forward + backward replayed as one CUDA graph (GPU only)
  LSTM (cuDNN)        ``nn.LSTM`` with about as many parameters (GPU: cuDNN)

Tokens per second = steps x batch / time; "x LSTM" = the LSTM's time / the row's (1 or more: as fast
as cuDNN's LSTM or faster). The JSON's settings record the layer's own choice of path and why.

    python benchmarks/rhn.py --device cuda [--tf32 | --dtype bfloat16] [--no-compile] [--tiles 32x16x64x4 ...]
    python benchmarks/rhn.py --cpu-shape [--compile-loop]
"""

from __future__ import annotations

import argparse
from unittest import mock

import torch
from common import autotuned, graphed, measure_rows, report
from torch import nn

import highwaynet.nn.rhn
from highwaynet.kernels import explain, rhn_cpu, rhn_eager
from highwaynet.kernels.dispatch import Choice
from highwaynet.kernels.gating import triton_available
from highwaynet.kernels.persistent import Tiles
from highwaynet.kernels.rhn_recurrence import RHNPath, choose_path
from highwaynet.nn import RHN
from highwaynet.nn.lstm import run_lstm


def lstm_hidden_for(params: int, input_size: int) -> int:
    """The LSTM hidden size whose parameter count is closest to ``params``."""
    def count(h):
        return 4 * h * (input_size + h) + 8 * h
    return min(range(1, 8192), key=lambda h: abs(count(h) - params))


def with_path(run, path: RHNPath, replaces: frozenset[RHNPath], tiles: Tiles | None = None):
    """``run`` with the layer's own choice of path replaced by ``path`` where it is one of ``replaces``
    (and the persistent kernel's tiles, if given, in place of its defaults)."""
    def choose(*args, **kwargs):
        choice = choose_path(*args, **kwargs)
        return Choice(path, "benchmark") if choice.path in replaces else choice
    run = mock.patch.object(highwaynet.nn.rhn, "choose_path", choose)(run)
    if tiles is not None:
        from highwaynet.kernels import triton_persistent

        run = mock.patch.object(triton_persistent, "default_tiles", lambda batch: tiles)(run)
    return run


_ONE_KERNEL_OR_PERSISTENT = frozenset({RHNPath.ONE_KERNEL, RHNPath.PERSISTENT})
_TRITON_PATHS = frozenset({RHNPath.GATE_KERNEL, RHNPath.ONE_KERNEL, RHNPath.PERSISTENT})


def with_halves_padded(run):
    """``run`` with the RHN's one-kernel path in its other layout (``RHNPath.ONE_KERNEL_PADDED_HALVES``):
    the layer's own choice, replaced where it is ``ONE_KERNEL`` (or ``PERSISTENT``, which it comes after)."""
    return with_path(run, RHNPath.ONE_KERNEL_PADDED_HALVES, _ONE_KERNEL_OR_PERSISTENT)


def with_one_kernel(run):
    """``run`` with one kernel a micro-step where the layer takes the persistent kernel (or one kernel)."""
    return with_path(run, RHNPath.ONE_KERNEL, _ONE_KERNEL_OR_PERSISTENT)


def with_persistent_kernel(run, tiles: Tiles | None = None):
    """``run`` with the persistent kernel wherever the layer takes a Triton path, its rules aside."""
    return with_path(run, RHNPath.PERSISTENT, _TRITON_PATHS, tiles)


def parse_tiles(text: str) -> Tiles:
    """``"32x16x64x4"``: block_b x block_n x block_k x warps (powers of two; the first three at least 16)."""
    try:
        return Tiles(*(int(v) for v in text.split("x"))).check()
    except (TypeError, ValueError) as error:
        raise argparse.ArgumentTypeError(f"tiles are block_b x block_n x block_k x warps, e.g. 32x16x64x4: "
                                         f"{error}") from None


def without_cpp_loops(run):
    """``run`` with the RHN's CPU loops in PyTorch operations (``kernels.rhn_cpu`` switched off)."""
    return mock.patch.object(rhn_cpu, "enabled", False)(run)


def fwd_bwd(module, x, grad_out):
    def run():
        out, _ = module(x)
        out.backward(grad_out[..., :out.shape[-1]])
    return run


def labml_as_written(module: RHN):
    """labml's RHN algorithm on ``module``'s weights (its first layer), called as ``module`` is: per
    time step, micro-layer 0 adds the step's input projection to its product; every micro-layer
    slices ``[h | t]`` and updates ``s + (h − s)·t``; autograd records all of it."""
    cell, hidden = module.cells[0], module.hidden_size

    def rhn(x):
        state, outputs = x.new_zeros(x.shape[1], hidden), []
        for x_t in x:
            for d, linear in enumerate(cell.hidden_proj):
                z = linear(state) + cell.input_proj(x_t) if d == 0 else linear(state)
                h, t = torch.tanh(z[:, :hidden]), torch.sigmoid(z[:, hidden:])
                state = state + (h - state) * t
            outputs.append(state)
        return torch.stack(outputs), state
    return rhn


def products_alone(module: RHN, x):
    """The matrix products of ``module``'s forward + backward (one layer), without the gating, laid
    out as ours does them: on CUDA cuBLAS calls on step-major buffers; on the CPU as
    ``kernels.rhn_eager``, layer-major, with (on two threads or more) ``R_d``'s H and T rows as the
    two matrices of one batched product forward, and its column halves back."""
    cell = module.cells[0]
    steps, batch, hidden, depth = x.shape[0], x.shape[1], module.hidden_size, module.depth
    w_in = cell.input_proj.weight.detach()
    weights = [p.weight.detach() for p in cell.hidden_proj]
    biases = [p.bias.detach() for p in cell.hidden_proj]
    rows = x.reshape(steps * batch, -1)
    z = x.new_empty(batch, 2 * hidden)
    state = x.new_zeros(batch, hidden)
    dz = torch.randn(steps * depth, batch, 2 * hidden, device=x.device, dtype=x.dtype)
    states = torch.randn(steps * depth, batch, hidden, device=x.device, dtype=x.dtype)
    # on the CPU, with two threads or more, h and t apart forward and the state's gradient in halves back
    parts = 2 if rhn_eager.use_halves(x) else 1
    walk_parts = 2 if parts == 2 and hidden % 2 == 0 else 1
    blocks = [w.t().unflatten(-1, (parts, -1)).transpose(0, 1) for w in weights]  # R_dᵀ's column blocks: views
    halves = [w.unflatten(-1, (walk_parts, -1)).transpose(0, 1) for w in weights]
    z_blocks, state_blocks = z.view(parts, batch, -1), state.expand(parts, batch, -1)
    state_halves = state.view(walk_parts, batch, -1)

    def run():
        x_proj = rows @ w_in.t()
        for _ in range(steps):
            for d in range(depth):
                if x.is_cuda:
                    torch.addmm(biases[d], state, weights[d].t(), out=z)
                else:
                    z_blocks.baddbmm_(state_blocks, blocks[d])
        for k in range(steps * depth - 1, -1, -1):
            if x.is_cuda:
                torch.mm(dz[k], weights[k % depth], out=state)
            else:
                state_halves.baddbmm_(dz[k].expand(walk_parts, batch, -1), halves[k % depth])
        if x.is_cuda:
            by_layer = dz.view(steps, depth, batch, -1).transpose(0, 1).reshape(depth, steps * batch, -1)
            inputs = states.view(steps, depth, batch, -1).transpose(0, 1).reshape(depth, steps * batch, -1)
        else:  # layer-major buffers: micro-layer d's rows are one matrix already
            by_layer, inputs = dz.view(depth, steps * batch, -1), states.view(depth, steps * batch, -1)
        for d in range(depth):
            by_layer[d].t() @ inputs[d]
        return x_proj, by_layer[0].t() @ rows  # (x needs no gradient here, as in the rows timed)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=830)
    parser.add_argument("--steps", type=int, default=35)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--cpu-shape", action="store_true", help="depth 4, hidden 256")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--tf32", action="store_true",
                        help="float32 products in TF32 on the GPU, for every row: cuDNN's LSTM does so by default")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="every row's parameters and data (bfloat16: the RHN's ten weights, 27.6 MB at the "
                             "PTB shape, fit an H100's 50 MB of L2, where in 32 bits, 55 MB, they do not)")
    parser.add_argument("--compile-loop", action="store_true",
                        help="add the labml loop compiled whole (slow to compile: every micro-step unrolled)")
    parser.add_argument("--no-compile", action="store_true", help="leave out the torch.compile row (faster)")
    parser.add_argument("--tiles", type=parse_tiles, nargs="*", default=[],
                        help="a persistent-kernel row for each of these tiles (block_b x block_n x block_k x warps)")
    parser.add_argument("--json", default="benchmarks/rhn.json")
    args = parser.parse_args()
    if args.cpu_shape:
        args.depth, args.hidden = 4, 256
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = args.tf32
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    x = torch.randn(args.steps, args.batch, args.hidden, device=device, dtype=dtype)

    ours = RHN(args.hidden, args.hidden, depth=args.depth).to(device, dtype)
    loop = RHN(args.hidden, args.hidden, depth=args.depth, fused=False).to(device, dtype)
    loop.load_state_dict(ours.state_dict())
    params = sum(p.numel() for p in ours.parameters())
    lstm = nn.LSTM(args.hidden, lstm_hidden_for(params, args.hidden)).to(device, dtype)
    lstm_params = sum(p.numel() for p in lstm.parameters())
    grad_out = torch.randn(args.steps, args.batch, max(args.hidden, lstm.hidden_size), device=device, dtype=dtype)

    with torch.no_grad():  # the same function (checked, so that the table compares like with like)
        # (in bfloat16 each path rounds at its own places, over 350 micro-steps at the PTB shape; the
        # states lie in [-1, 1], so a wrong function still misses by far more)
        tol = 1e-1 if dtype == torch.bfloat16 else 5e-3 if args.tf32 and device.type == "cuda" else 1e-5
        as_written = labml_as_written(ours)
        torch.testing.assert_close(ours(x)[0], loop(x)[0], rtol=tol, atol=tol)
        torch.testing.assert_close(ours(x)[0], as_written(x)[0], rtol=tol, atol=tol)
        if not args.no_compile:
            compiled = torch.compile(ours)
            torch.testing.assert_close(ours(x)[0], compiled(x)[0], rtol=tol, atol=tol)
        # (on the CPU under TRITON_INTERPRET=1 too, with --tf32: a smoke test of the rows, as the tests run it)
        halves_padded = triton_available(x) and (args.tf32 or dtype != torch.float32)
        if halves_padded:
            torch.testing.assert_close(ours(x)[0], with_halves_padded(lambda: ours(x)[0])(), rtol=tol, atol=tol)
            torch.testing.assert_close(ours(x)[0], with_one_kernel(lambda: ours(x)[0])(), rtol=tol, atol=tol)
        persistent = triton_available(x)
        for tiles in [None, *args.tiles] if persistent else []:
            got = with_persistent_kernel(lambda: ours(x)[0], tiles)()
            torch.testing.assert_close(ours(x)[0], got, rtol=tol, atol=tol)
        choice = explain(ours, x)[0]  # the layer's own choice (its first cell's), for the record
        if args.compile_loop:
            # On the CPU, inductor's C++ wrapper: without it, Python calls each of the ~1,000 operations.
            compiled_loop = torch.compile(loop, options={"cpp_wrapper": device.type == "cpu"})
            torch.testing.assert_close(ours(x)[0], compiled_loop(x)[0], rtol=tol, atol=tol)

    rows = {"labml as written": fwd_bwd(as_written, x, grad_out), "labml loop": fwd_bwd(loop, x, grad_out),
            "floor": products_alone(ours, x), "ours": fwd_bwd(ours, x, grad_out)}
    if not args.no_compile:
        rows["ours, torch.compile"] = fwd_bwd(compiled, x, grad_out)
    if rhn_cpu.available(x):
        torch.testing.assert_close(ours(x)[0], without_cpp_loops(lambda: ours(x)[0])(), rtol=tol, atol=tol)
        rows["ours, PyTorch operations"] = without_cpp_loops(fwd_bwd(ours, x, grad_out))
    if args.compile_loop:
        rows["labml loop, torch.compile whole"] = fwd_bwd(compiled_loop, x, grad_out)
    if device.type == "cuda":  # eager, the floor is launch-bound too: its graph is the GPU's floor
        rows["floor, CUDA graph"] = graphed(rows["floor"])
        rows["labml loop, CUDA graph"] = graphed(fwd_bwd(loop, x, grad_out), loop)
        rows["ours, CUDA graph"] = graphed(fwd_bwd(ours, x, grad_out), ours)
    if halves_padded:
        rows["ours, halves padded"] = with_halves_padded(fwd_bwd(ours, x, grad_out))
        rows["ours, one kernel a micro-step"] = with_one_kernel(fwd_bwd(ours, x, grad_out))
        if device.type == "cuda":
            rows["ours, halves padded, CUDA graph"] = graphed(with_halves_padded(fwd_bwd(ours, x, grad_out)), ours)
    for tiles in [None, *args.tiles] if persistent else []:
        name = "ours, persistent kernel" + ("" if tiles is None else ", tiles {}x{}x{}x{}".format(*tiles))
        rows[name] = with_persistent_kernel(fwd_bwd(ours, x, grad_out), tiles)
        if device.type == "cuda":
            try:
                rows[f"{name}, CUDA graph"] = graphed(with_persistent_kernel(fwd_bwd(ours, x, grad_out), tiles), ours)
            except RuntimeError as error:  # (a cooperative launch that this CUDA cannot capture)
                print(f"{name}, CUDA graph: not captured: {error}")
    lstm_row = f"LSTM (hidden {lstm.hidden_size})"
    # (run_lstm: nn.LSTM as it is, but in bfloat16 on a CPU whose oneDNN has no such LSTM, where torch 2.3 fails)
    rows[lstm_row] = fwd_bwd(lambda x: run_lstm(lstm, x, None), x, grad_out)
    results = measure_rows(rows, device, args.repeats)
    tokens = args.steps * args.batch
    settings = {**vars(args), "chosen": {"path": choice.path, "why": choice.why}}
    settings["persistent_tiles"] = [list(t) for t in settings.pop("tiles")]  # ("tiles": the micro-step kernels')
    if device.type == "cuda" and triton_available(x):  # the tiles the micro-step kernels chose
        from highwaynet.kernels import rhn_step

        settings["tiles"] = autotuned(rhn_step._forward_kernel, rhn_step._backward_kernel)
        print(settings["tiles"])
    precision = "TF32" if args.tf32 and device.type == "cuda" and dtype == torch.float32 else args.dtype
    report(f"RHN fwd+bwd: depth {args.depth}, hidden {args.hidden}, {args.steps} steps x batch {args.batch}, "
           f"{precision}; RHN {params / 1e6:.2f}M parameters, LSTM {lstm_params / 1e6:.2f}M; median of {args.repeats}",
           results, "labml as written", device, args.json, settings,
           {"tokens/s": {k: tokens / v for k, v in results.items()},
            "x LSTM": {k: results[lstm_row] / v for k, v in results.items()}})


if __name__ == "__main__":
    main()
