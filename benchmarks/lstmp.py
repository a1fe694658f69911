"""One window of ELMo's biLM layer (an LSTM with projection and clipping), forward: the persistent kernel
against the per-step algorithm, the hoisted reference, the floor and cuDNN's projected LSTM.

Default shape, ELMo's original biLM: one layer and one direction (the biLM runs four such windows a
batch: two layers, two directions) of a batch of 32 sentences x 64 tokens, input 512 (the token
embedding's projection), 4,096 cells projected to 512, both clips 3, forget bias 1.

Rows, measured side by side in one run (inference: no gradients):
  per step (AllenNLP's algorithm)
                      the input's products inside the time loop, a product a step (as AllenNLP's
                      ``LstmCellWithProjection`` runs ELMo)
  hoisted reference   ``kernels.lstmp.lstmp_window_reference``: the input's products for the whole
                      window in one product, then the loop in PyTorch operations
  persistent kernel   the input's products in one product, then the whole window in one Triton
                      launch (``kernels.triton_persistent.lstmp_forward``; CUDA, or the CPU under
                      ``TRITON_INTERPRET=1`` as the tests run it); ``--tiles`` adds a row for each of
                      other tiles (``block_b x block_n x block_k x warps``)
  floor               the products alone: the input's for the window, then each step's two
                      (recurrent, projection); on a GPU also replayed as one CUDA graph
  cuDNN LSTM, proj_size
                      ``nn.LSTM(proj_size=...)`` of the same sizes: the same cell without the clips,
                      which cuDNN cannot apply (not the same function; the speed cuDNN reaches)

``x per step`` = the per-step algorithm's time / the row's. ``benchmarks/elmo.py`` times the whole
biLM; :func:`lstmp_rows` gives it these rows for a window of its own.

    python benchmarks/lstmp.py --device cuda [--tf32 | --dtype bfloat16] [--tiles 32x16x64x4 ...]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from common import graphed, measure_rows, report
from rhn import parse_tiles
from torch import nn

from highwaynet.kernels.gating import triton_available
from highwaynet.kernels.lstmp import LSTMPPath, lstmp_window, lstmp_window_reference
from highwaynet.kernels.persistent import Tiles


def per_step(x, h0, c0, w_x, bias, w_h, w_p, clip):
    """AllenNLP's algorithm: each step's input products inside the loop (the cell as the reference's)."""
    h, c, outputs = h0, c0, []
    for x_t in x.unbind(0):
        i, j, f, o = (torch.addmm(bias, x_t, w_x.t()) + h @ w_h.t()).chunk(4, dim=-1)
        c = (torch.sigmoid(f + 1.0) * c + torch.sigmoid(i) * torch.tanh(j)).clamp(-clip, clip)
        h = ((torch.sigmoid(o) * torch.tanh(c)) @ w_p.t()).clamp(-clip, clip)
        outputs.append(h)
    return torch.stack(outputs)


def lstmp_rows(x: torch.Tensor, w_x: torch.Tensor, bias: torch.Tensor, w_h: torch.Tensor, w_p: torch.Tensor,
               clip: float, tiles: list[Tiles]) -> dict[str, Callable[[], object]]:
    """The rows above for one window of ``x`` ``(T, B, input)`` (the weights as ``lstmp_window``'s, plus
    the input's ``w_x`` ``(4C, input)`` and ``bias`` ``(4C,)``), each checked against the per-step
    algorithm first (bfloat16: to 0.1, the states lie in [-3, 3]; else 2e-3, TF32's rounding)."""
    steps, batch, _ = x.shape
    proj, cells = w_p.shape
    h0, c0 = x.new_zeros(batch, proj), x.new_zeros(batch, cells)

    def hoisted():
        return lstmp_window_reference(torch.addmm(bias, x.flatten(0, 1), w_x.t()).view(steps, batch, -1), h0, c0,
                                      w_h, w_p, cell_clip=clip, proj_clip=clip)[0]

    def persistent(tiles=None):
        def run():
            x_proj = torch.addmm(bias, x.flatten(0, 1), w_x.t()).view(steps, batch, -1)
            if tiles is None:
                return lstmp_window(x_proj, h0, c0, w_h, w_p, cell_clip=clip, proj_clip=clip,
                                    path=LSTMPPath.PERSISTENT)[0]
            from highwaynet.kernels.triton_persistent import lstmp_forward

            return lstmp_forward(x_proj, h0, c0, w_h, w_p, 1.0, clip, clip, tiles=tiles)[0]
        return run

    def floor():
        torch.addmm(bias, x.flatten(0, 1), w_x.t())
        h, m = h0, c0
        for _ in range(steps):
            h @ w_h.t()
            h = m @ w_p.t()

    rows: dict[str, Callable[[], object]] = {
        "per step (AllenNLP's algorithm)": lambda: per_step(x, h0, c0, w_x, bias, w_h, w_p, clip),
        "hoisted reference": hoisted}
    if triton_available(x):
        rows["persistent kernel"] = persistent()
        for t in tiles:
            rows["persistent kernel, tiles {}x{}x{}x{}".format(*t)] = persistent(t)
    want = rows["per step (AllenNLP's algorithm)"]()
    tol = 1e-1 if x.dtype == torch.bfloat16 else 2e-3
    for name, run in rows.items():
        torch.testing.assert_close(run(), want, rtol=tol, atol=tol, msg=name)
    rows["floor"] = floor
    if x.is_cuda:
        rows["floor, CUDA graph"] = graphed(floor)
        if "persistent kernel" in rows:
            try:
                rows["persistent kernel, CUDA graph"] = graphed(rows["persistent kernel"])
            except RuntimeError as error:  # (a cooperative launch that this CUDA cannot capture)
                print(f"persistent kernel, CUDA graph: not captured: {error}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--input", type=int, default=512)
    parser.add_argument("--cells", type=int, default=4096)
    parser.add_argument("--proj", type=int, default=512)
    parser.add_argument("--clip", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--tf32", action="store_true", help="float32 products in TF32 on the GPU, for every row")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--tiles", type=parse_tiles, nargs="*", default=[],
                        help="a persistent-kernel row for each of these tiles (block_b x block_n x block_k x warps)")
    parser.add_argument("--json", default="benchmarks/lstmp.json")
    args = parser.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = args.tf32
    torch.manual_seed(0)
    lstm = nn.LSTM(args.input, args.cells, proj_size=args.proj).to(device, dtype)
    # the same weights for every row: TensorFlow's kernel split into its input and recurrent parts
    w_x, w_h, w_p = lstm.weight_ih_l0.detach(), lstm.weight_hh_l0.detach(), lstm.weight_hr_l0.detach()
    bias = (lstm.bias_ih_l0 + lstm.bias_hh_l0).detach()
    x = torch.randn(args.steps, args.batch, args.input, device=device, dtype=dtype)
    with torch.no_grad():
        rows = lstmp_rows(x, w_x, bias, w_h, w_p, args.clip, args.tiles)
        rows["cuDNN LSTM, proj_size (no clips)"] = lambda: lstm(x)
        results = measure_rows(rows, device, args.repeats)
    params = sum(p.numel() for p in lstm.parameters())
    precision = "TF32" if args.tf32 and device.type == "cuda" and dtype == torch.float32 else args.dtype
    settings = {**vars(args), "tiles": [list(t) for t in args.tiles]}
    baseline = "per step (AllenNLP's algorithm)"
    report(f"LSTM with projection and clipping, forward: {args.steps} steps x batch {args.batch}, input {args.input}, "
           f"{args.cells} cells, projection {args.proj}, {precision}; {params / 1e6:.2f}M parameters; "
           f"median of {args.repeats}", results, baseline, device, args.json, settings,
           {"tokens/s": {k: args.steps * args.batch / v for k, v in results.items()},
            "x per step": {k: results[baseline] / v for k, v in results.items()}})


if __name__ == "__main__":
    main()
