"""ELMo's biLM LSTM, forward: highwaynet's paths against the per-step algorithm AllenNLP runs and the floor,
on the CPU and on a GPU (the persistent kernel, cuDNN's projected LSTM).

Default shape: the original ELMo (93.6 M parameters: 2 layers of 4,096 cells projected to 512, the
2,048-filter character CNN, two highway layers), random weights written to a synthetic bilm-tf file
and loaded from it; a batch of 32 sentences of 64 tokens (boundaries included); both clips 3, forget
bias 1.

Rows, one direction of one LSTM layer (the unit the biLM runs four times), measured side by side in one
run after each is checked against AllenNLP's algorithm (to 1e-4; 2e-3 with ``--tf32``, 0.1 in bfloat16):
  floor (products alone)
                      the products alone, as ours does them: the input products for the whole window in
                      one product, then per step the recurrent product and the projection; on a GPU
                      also replayed as one CUDA graph
  floor, MKL packed weights
                      on an x86 CPU with MKL: the same products with the recurrent and projection
                      weights in MKL's packed layout (``torch.ops.mkl._mkl_linear``, packed once before
                      the timing; the same values): what that layout would save
  ours                ``ProjectedLSTM`` as it chooses (``kernels.lstmp.choose_path``): the products as in
                      the floor, the loop in C++ on the CPU; on a GPU the persistent kernel where opted in
                      (``HIGHWAYNET_PERSISTENT=1``) and within its limits, else PyTorch operations
  ours, PyTorch operations
                      the same with the loop in PyTorch operations (``lstmp_recurrence_reference``:
                      the path with gradients and under ``torch.compile``)
  ours, persistent kernel
                      where Triton runs (CUDA, or the CPU under ``TRITON_INTERPRET=1`` as the tests run
                      it): the loop in one Triton launch (``kernels.triton_persistent.lstmp_forward``),
                      forced; ``--tiles`` adds a row for each of other tiles (``block_b x block_n x
                      block_k x warps``); on a GPU also replayed as one CUDA graph
  AllenNLP per-step   AllenNLP's ``LstmCellWithProjection`` algorithm as its code runs: per step the
                      input's product and the state's (inside the loop), the gates from slices, the
                      state cloned, the output written into an accumulator
  cuDNN LSTM, proj_size (no clips)
                      on a GPU: ``nn.LSTM(proj_size=...)`` of the same sizes, the same cell without the
                      clips, which cuDNN cannot apply (not the same function: the speed cuDNN reaches)

The JSON's ``speed-up``: AllenNLP per-step's time over the row's (the biLM rows: over the biLM with
AllenNLP's per-step LSTMs).

With ``--whole``, the whole biLM forward too (character CNN, highway layers, both directions of both
layers): ours, and ours with AllenNLP's per-step LSTM in place of each ``ProjectedLSTM``.

    python benchmarks/elmo.py [--threads 2] [--whole]
    python benchmarks/elmo.py --device cuda [--tf32 | --dtype bfloat16] [--tiles 32x16x64x4 ...] [--whole]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import torch
from common import graphed, report, timed_calls
from rhn import parse_tiles
from torch import nn

import highwaynet.elmo.bilm
from highwaynet.elmo import ELMO_FILTERS, ELMoBiLM, ProjectedLSTM
from highwaynet.kernels import lstmp_cpu
from highwaynet.kernels.dispatch import Choice
from highwaynet.kernels.gating import triton_available
from highwaynet.kernels.lstmp import LSTMPPath
from highwaynet.kernels.persistent import Tiles

PER_STEP = "AllenNLP per-step"


def allennlp_per_step(lstm: ProjectedLSTM, x: torch.Tensor) -> torch.Tensor:
    """AllenNLP's ``LstmCellWithProjection.forward`` algorithm on ``lstm``'s weights (its gate order
    and its forget bias folded into the bias, as its loader does), every row running every step."""
    batch, steps, _ = x.shape
    cells, width = lstm.cell_size, lstm.hidden_size
    # AllenNLP's order (i, f, g, o) and its loader's +1 on the forget gate's bias
    order = torch.cat([torch.arange(0, cells), torch.arange(2 * cells, 3 * cells), torch.arange(cells, 2 * cells),
                       torch.arange(3 * cells, 4 * cells)]).to(x.device)
    input_linearity = lstm.weight_ih[order]
    state_linearity = lstm.weight_hh[order]
    bias = lstm.bias[order].clone()
    bias[cells:2 * cells] += lstm.forget_bias
    projection = lstm.weight_proj
    output = x.new_zeros(batch, steps, width)
    memory, state = x.new_zeros(batch, cells), x.new_zeros(batch, width)
    for t in range(steps):
        previous_memory, previous_state = memory[0:batch].clone(), state[0:batch].clone()
        projected_input = x[0:batch, t] @ input_linearity.t()
        projected_state = torch.addmm(bias, previous_state, state_linearity.t())
        input_gate = torch.sigmoid(projected_input[:, 0:cells] + projected_state[:, 0:cells])
        forget_gate = torch.sigmoid(projected_input[:, cells:2 * cells] + projected_state[:, cells:2 * cells])
        memory_init = torch.tanh(projected_input[:, 2 * cells:3 * cells] + projected_state[:, 2 * cells:3 * cells])
        output_gate = torch.sigmoid(projected_input[:, 3 * cells:] + projected_state[:, 3 * cells:])
        new_memory = input_gate * memory_init + forget_gate * previous_memory
        if lstm.cell_clip:
            new_memory = torch.clamp(new_memory, -lstm.cell_clip, lstm.cell_clip)
        timestep_output = (output_gate * torch.tanh(new_memory)) @ projection.t()
        if lstm.proj_clip:
            timestep_output = torch.clamp(timestep_output, -lstm.proj_clip, lstm.proj_clip)
        memory, state = memory.clone(), state.clone()
        memory[0:batch], state[0:batch] = new_memory, timestep_output
        output[0:batch, t] = timestep_output
    return output


def input_gates(lstm: ProjectedLSTM, x: torch.Tensor) -> torch.Tensor:
    """The input products of the whole window ``x`` ``(B, T, P)`` as one product, ``(T, B, 4C)``, as ours does
    them (the floors' first part)."""
    batch, steps, _ = x.shape
    return torch.addmm(lstm.bias, x.transpose(0, 1).reshape(steps * batch, -1), lstm.weight_ih.t()).view(
        steps, batch, -1)


def products_alone(lstm: ProjectedLSTM, x: torch.Tensor) -> torch.Tensor:
    """The matrix products of ``lstm``'s forward as ours does them, nothing between them."""
    batch, steps, _ = x.shape
    gates = input_gates(lstm, x)
    state, m = x.new_zeros(batch, lstm.hidden_size), x.new_zeros(batch, lstm.cell_size)
    hh_t, proj_t = lstm.weight_hh.t(), lstm.weight_proj.t()
    for t in range(steps):
        gates[t].addmm_(state, hh_t)
        state = m @ proj_t
    return state


def packed_products_alone(lstm: ProjectedLSTM, x: torch.Tensor) -> Callable[[], torch.Tensor]:
    """The floor with the recurrent and projection weights in MKL's packed layout (packed once, for
    the batch's row count, before the timing; the same values): what that layout would take off the
    products each step, the part of ours that the C++ loop cannot shorten."""
    batch = x.shape[0]
    packed_hh = torch.ops.mkl._mkl_reorder_linear_weight(lstm.weight_hh.detach(), batch)
    packed_proj = torch.ops.mkl._mkl_reorder_linear_weight(lstm.weight_proj.detach(), batch)
    for weight, packed in ((lstm.weight_hh, packed_hh), (lstm.weight_proj, packed_proj)):  # (the same products)
        probe = torch.randn(batch, weight.shape[1])
        torch.testing.assert_close(torch.ops.mkl._mkl_linear(probe, packed, weight, None, batch), probe @ weight.t(),
                                   rtol=0, atol=1e-5)

    def run() -> torch.Tensor:
        gates = input_gates(lstm, x)
        state, m = x.new_zeros(batch, lstm.hidden_size), x.new_zeros(batch, lstm.cell_size)
        for t in range(x.shape[1]):
            gates[t] += torch.ops.mkl._mkl_linear(state, packed_hh, lstm.weight_hh, None, batch)
            state = torch.ops.mkl._mkl_linear(m, packed_proj, lstm.weight_proj, None, batch)
        return state
    return run


def mkl_packs(x: torch.Tensor) -> bool:
    """Whether this PyTorch's MKL packed products run ``x`` (float32 on an x86 CPU with MKL)."""
    return (x.device.type == "cpu" and x.dtype == torch.float32 and torch.backends.mkl.is_available()
            and hasattr(torch.ops.mkl, "_mkl_linear"))


@contextlib.contextmanager
def on_path(path: LSTMPPath, tiles: Tiles | None = None) -> Iterator[None]:
    """Every ``ProjectedLSTM`` forward inside on ``path`` (as ``path=`` forces it on
    ``lstmp_recurrence``), the persistent kernel launched with ``tiles`` where given."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(highwaynet.elmo.bilm, "choose_path",
                                              lambda *args: Choice(path, "benchmark")))
        if tiles is not None:
            from highwaynet.kernels import triton_persistent

            launch = functools.partial(triton_persistent.lstmp_forward, tiles=tiles)
            stack.enter_context(mock.patch.object(triton_persistent, "lstmp_forward", launch))
        yield


def with_per_step_lstms(run):
    """``run`` with every ``ProjectedLSTM`` forward replaced by AllenNLP's per-step algorithm (same
    values): the whole biLM as AllenNLP runs its LSTMs."""
    def per_step(self, x, mask=None, state=None):  # (every row full: the benchmark's sentences are)
        return (allennlp_per_step(self, x.flip(1)).flip(1) if self.reverse else allennlp_per_step(self, x)), state
    return mock.patch.object(ProjectedLSTM, "forward", per_step)(run)


def interleaved(rows, device: torch.device, repeats: int, warmup: bool) -> dict[str, float]:
    """Each row's median seconds a call over ``repeats`` rounds, every round timing each row once in turn
    (after one untimed call of each with ``warmup``: at the full shape on the CPU a call is many seconds,
    its one-time costs small, and common.measure_rows' warm-up calls per block would double the run)."""
    times: dict[str, list[float]] = {name: [] for name in rows}
    for fn in rows.values() if warmup else ():
        fn()
    for _ in range(repeats):
        for name, fn in rows.items():
            times[name] += timed_calls(fn, device, 1)
    return {name: statistics.median(t) for name, t in times.items()}


def lstm_rows(lstm: ProjectedLSTM, x: torch.Tensor, tiles: list[Tiles]) -> dict[str, Callable[[], object]]:
    """The rows above for one LSTM on ``x`` ``(B, T, P)``, but for cuDNN's (the CUDA graphs after the
    agreement check: a graph replays its captured call)."""
    def forced(path: LSTMPPath, tile: Tiles | None = None) -> Callable[[], object]:
        def run() -> object:
            with on_path(path, tile):
                return lstm(x)[0]
        return run

    rows: dict[str, Callable[[], object]] = {"floor (products alone)": lambda: products_alone(lstm, x),
                                             **({"floor, MKL packed weights": packed_products_alone(lstm, x)}
                                                if mkl_packs(x) else {}),
                                             "ours": lambda: lstm(x)[0],
                                             "ours, PyTorch operations": forced(LSTMPPath.PYTORCH)}
    if triton_available(x):
        rows["ours, persistent kernel"] = forced(LSTMPPath.PERSISTENT)
        for tile in tiles:
            rows["ours, persistent kernel, tiles {}x{}x{}x{}".format(*tile)] = forced(LSTMPPath.PERSISTENT, tile)
    rows[PER_STEP] = lambda: allennlp_per_step(lstm, x)
    return rows


def graphed_rows(rows: dict[str, Callable[[], object]]) -> dict[str, Callable[[], object]]:
    """On a GPU, the floor and the persistent kernel replayed as one CUDA graph each."""
    graphs = {}
    for name in ("floor (products alone)", "ours, persistent kernel"):
        if name in rows:
            try:
                graphs[f"{name}, CUDA graph"] = graphed(rows[name])
            except RuntimeError as error:  # (a cooperative launch that this CUDA cannot capture)
                print(f"{name}, CUDA graph: not captured: {error}")
    return graphs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--tf32", action="store_true", help="float32 products in TF32 on the GPU, for every row")
    parser.add_argument("--tiles", type=parse_tiles, nargs="*", default=[],
                        help="a persistent-kernel row for each of these tiles (block_b x block_n x block_k x warps)")
    parser.add_argument("--projection", type=int, default=512)
    parser.add_argument("--cells", type=int, default=4096)
    parser.add_argument("--filters", choices=("elmo", "tiny"), default="elmo",
                        help="the character CNN: ELMo's 2,048 filters, or 16 (a quick check)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=64, help="per sentence, <S> and </S> included")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--whole", action="store_true", help="also time the whole biLM forward")
    parser.add_argument("--no-warmup", action="store_true", help="no untimed round first (the rows were checked "
                                                                 "against each other before: their first calls)")
    parser.add_argument("--json", default="benchmarks/elmo_cpu.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = args.tf32
    torch.manual_seed(0)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    filters = ELMO_FILTERS if args.filters == "elmo" else ((1, 8), (2, 8))
    random = ELMoBiLM(args.projection, args.cells, 2, filters=filters, num_highway=2, stateful=False)
    parameters = sum(p.numel() for p in random.parameters()) - random.char_dim  # (id 0's row is not the file's)
    with tempfile.TemporaryDirectory() as folder:
        bilm = ELMoBiLM.from_files(*random.save_files(Path(folder)), stateful=False, device=device, dtype=dtype)
    del random
    lstm = bilm.forward_layers[1]
    x = torch.randn(args.batch, args.tokens, args.projection).clamp(-3, 3).to(device, dtype)
    ids = torch.randint(1, 262, (args.batch, args.tokens, 50), device=device)
    tol = 0.1 if dtype == torch.bfloat16 else 2e-3 if args.tf32 else 1e-4
    with torch.no_grad():
        rows = lstm_rows(lstm, x, args.tiles)
        reference = rows[PER_STEP]()
        for name, run in rows.items():
            got = run()
            if not name.startswith("floor"):
                torch.testing.assert_close(got, reference, rtol=0, atol=tol, msg=lambda m, name=name: f"{name}: {m}")
        if device.type == "cpu" and dtype in (torch.float32, torch.float64):
            assert lstmp_cpu.unavailable(x) is None, "the C++ loop is not built"
        if device.type == "cuda":
            rows.update(graphed_rows(rows))
            cudnn = nn.LSTM(args.projection, args.cells, proj_size=args.projection, batch_first=True).to(device, dtype)
            rows["cuDNN LSTM, proj_size (no clips)"] = lambda: cudnn(x)
        if args.whole:
            rows["biLM: ours"] = lambda: bilm(ids)
            rows["biLM: AllenNLP per-step LSTMs"] = with_per_step_lstms(lambda: bilm(ids))
            whole_ours, whole_theirs = rows["biLM: ours"](), rows["biLM: AllenNLP per-step LSTMs"]()
            for a, b in zip(whole_ours[0], whole_theirs[0], strict=True):
                torch.testing.assert_close(a, b, rtol=0, atol=tol)
        times = interleaved(rows, device, args.repeats, not args.no_warmup)
    per_step = times[PER_STEP]
    speedup = {name: (times["biLM: AllenNLP per-step LSTMs"] if name.startswith("biLM") else per_step) / seconds
               for name, seconds in times.items()}
    settings = {"parameters": parameters, "batch": args.batch, "tokens": args.tokens, "projection": args.projection,
                "cells": args.cells, "threads": args.threads, "repeats": args.repeats, "warmup": not args.no_warmup,
                "unit": "one direction of one LSTM layer (the biLM runs four)"}
    if device.type != "cpu" or dtype != torch.float32 or args.tf32 or args.tiles:
        settings.update(dtype=args.dtype, tf32=args.tf32, tiles=[list(t) for t in args.tiles])
    what = "LSTM and whole biLM" if args.whole else "LSTM"
    precision = "TF32" if args.tf32 and dtype == torch.float32 else args.dtype
    report(f"ELMo's biLM {what}, forward ({parameters / 1e6:.1f} M parameters, batch {args.batch} x {args.tokens} "
           f"tokens" + (f", {precision}" if device.type == "cuda" else "") + ")", times, "floor (products alone)",
           device, args.json, settings, {"speed-up": speedup})


if __name__ == "__main__":
    main()
