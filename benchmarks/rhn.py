"""An RHN layer, forward + backward over a BPTT window: ours against the labml loop and cuDNN's LSTM.

Default shape, the RHN paper's PTB model: recurrence depth 10, hidden 830, 35 steps, batch 20
(``--cpu-shape`` picks one a 2-core CPU runs in seconds: depth 4, hidden 256).

Rows, measured side by side in one run:
  labml loop          ``RHN(fused=False)``: autograd over every micro-step, as labml's RHN
  ours                ``RHN`` (fused recurrence: hand-written backward, batched weight gradients,
                      Triton gate kernels on CUDA)
  ... CUDA graph      the same forward + backward replayed as one CUDA graph (GPU only)
  LSTM (cuDNN)        ``nn.LSTM`` with about as many parameters (GPU: cuDNN)

Tokens per second = steps x batch / time.

    python benchmarks/rhn.py --device cuda
    python benchmarks/rhn.py --cpu-shape
"""

from __future__ import annotations

import argparse

import torch
from common import measure_rows, report
from torch import nn

from highwaynet.nn import RHN


def lstm_hidden_for(params: int, input_size: int) -> int:
    """The LSTM hidden size whose parameter count is closest to ``params``."""
    def count(h):
        return 4 * h * (input_size + h) + 8 * h
    return min(range(1, 8192), key=lambda h: abs(count(h) - params))


def fwd_bwd(module, x, grad_out):
    def run():
        out, _ = module(x)
        out.backward(grad_out[..., :out.shape[-1]])
    return run


def graphed_fwd_bwd(module, x, grad_out):
    """Capture forward + backward of ``module`` on static ``x`` once; each call replays it."""
    run = fwd_bwd(module, x, grad_out)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            run()
    torch.cuda.current_stream().wait_stream(stream)
    for p in module.parameters():
        p.grad = None  # the graph's backward allocates (and on each replay rewrites) the gradients
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    return graph.replay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=830)
    parser.add_argument("--steps", type=int, default=35)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--cpu-shape", action="store_true", help="depth 4, hidden 256")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", default="benchmarks/rhn.json")
    args = parser.parse_args()
    if args.cpu_shape:
        args.depth, args.hidden = 4, 256
    device = torch.device(args.device)
    torch.manual_seed(0)
    x = torch.randn(args.steps, args.batch, args.hidden, device=device)

    ours = RHN(args.hidden, args.hidden, args.depth).to(device)
    loop = RHN(args.hidden, args.hidden, args.depth, fused=False).to(device)
    loop.load_state_dict(ours.state_dict())
    params = sum(p.numel() for p in ours.parameters())
    lstm = nn.LSTM(args.hidden, lstm_hidden_for(params, args.hidden)).to(device)
    lstm_params = sum(p.numel() for p in lstm.parameters())
    grad_out = torch.randn(args.steps, args.batch, max(args.hidden, lstm.hidden_size), device=device)

    with torch.no_grad():  # the same function (checked, so that the table compares like with like)
        torch.testing.assert_close(ours(x)[0], loop(x)[0], rtol=1e-4, atol=1e-5)

    rows = {"labml loop": fwd_bwd(loop, x, grad_out), "ours": fwd_bwd(ours, x, grad_out)}
    if device.type == "cuda":
        rows["labml loop, CUDA graph"] = graphed_fwd_bwd(loop, x, grad_out)
        rows["ours, CUDA graph"] = graphed_fwd_bwd(ours, x, grad_out)
    rows[f"LSTM (hidden {lstm.hidden_size})"] = fwd_bwd(lstm, x, grad_out)
    results = measure_rows(rows, device, args.repeats)
    tokens = args.steps * args.batch
    report(f"RHN fwd+bwd: depth {args.depth}, hidden {args.hidden}, {args.steps} steps x batch {args.batch}; "
           f"RHN {params / 1e6:.2f}M parameters, LSTM {lstm_params / 1e6:.2f}M; median of {args.repeats}",
           results, "labml loop", device, args.json, vars(args),
           {"tokens/s": {k: tokens / v for k, v in results.items()}})


if __name__ == "__main__":
    main()
