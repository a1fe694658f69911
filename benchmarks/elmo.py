"""ELMo's biLM, forward: highwaynet's LSTM against the per-step algorithm AllenNLP runs, and the floor.

Default shape: the original ELMo (93.6 M parameters: 2 layers of 4,096 cells projected to 512, the
2,048-filter character CNN, two highway layers), random weights written to a synthetic bilm-tf file
and loaded from it; a batch of 32 sentences of 64 tokens (boundaries included).

Rows, one direction of one LSTM layer (the unit the biLM runs four times), measured side by side in one run:
  floor               the products alone, as ours does them: the input products for the whole window in
                      one product, then per step the recurrent product and the projection
  ours                ``ProjectedLSTM`` (the products as in the floor; the loop and each step's
                      element-wise work in C++ on the CPU)
  ours, PyTorch operations
                      the same with the loop in PyTorch operations (the GPU's and autograd's path)
  AllenNLP per-step   AllenNLP's ``LstmCellWithProjection`` algorithm as its code runs: per step the
                      input's product and the state's (inside the loop), the gates from slices, the
                      state cloned, the output written into an accumulator

The JSON's ``speed-up``: AllenNLP per-step's time over the row's (the biLM rows: over the biLM with
AllenNLP's per-step LSTMs).

With ``--whole``, the whole biLM forward too (character CNN, highway layers, both directions of both
layers): ours, and ours with AllenNLP's per-step LSTM in place of each ``ProjectedLSTM``.

    python benchmarks/elmo.py [--threads 2] [--whole]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from unittest import mock

import torch
from common import report, timed_calls

from highwaynet.elmo import ELMO_FILTERS, ELMoBiLM, ProjectedLSTM
from highwaynet.kernels import lstmp
from highwaynet.kernels.lstmp import LSTMPPath


def allennlp_per_step(lstm: ProjectedLSTM, x: torch.Tensor) -> torch.Tensor:
    """AllenNLP's ``LstmCellWithProjection.forward`` algorithm on ``lstm``'s weights (its gate order
    and its forget bias folded into the bias, as its loader does), every row running every step."""
    batch, steps, _ = x.shape
    cells, width = lstm.cell_size, lstm.hidden_size
    # AllenNLP's order (i, f, g, o) and its loader's +1 on the forget gate's bias
    order = torch.cat([torch.arange(0, cells), torch.arange(2 * cells, 3 * cells), torch.arange(cells, 2 * cells),
                       torch.arange(3 * cells, 4 * cells)])
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


def products_alone(lstm: ProjectedLSTM, x: torch.Tensor) -> torch.Tensor:
    """The matrix products of ``lstm``'s forward as ours does them, nothing between them."""
    batch, steps, _ = x.shape
    gates = torch.addmm(lstm.bias, x.transpose(0, 1).reshape(steps * batch, -1), lstm.weight_ih.t())
    gates = gates.view(steps, batch, -1)
    state, m = x.new_zeros(batch, lstm.hidden_size), x.new_zeros(batch, lstm.cell_size)
    hh_t, proj_t = lstm.weight_hh.t(), lstm.weight_proj.t()
    for t in range(steps):
        gates[t].addmm_(state, hh_t)
        state = m @ proj_t
    return state


def with_per_step_lstms(run):
    """``run`` with every ``ProjectedLSTM`` forward replaced by AllenNLP's per-step algorithm (same
    values): the whole biLM as AllenNLP runs its LSTMs."""
    def per_step(self, x, mask=None, state=None):  # (every row full: the benchmark's sentences are)
        return (allennlp_per_step(self, x.flip(1)).flip(1) if self.reverse else allennlp_per_step(self, x)), state
    return mock.patch.object(ProjectedLSTM, "forward", per_step)(run)


def interleaved(rows, device: torch.device, repeats: int, warmup: bool) -> dict[str, float]:
    """Each row's median seconds a call over ``repeats`` rounds, every round timing each row once in turn
    (after one untimed call of each with ``warmup``: at the full shape a call is many seconds, its
    one-time costs small, and common.measure_rows' warm-up calls per block would double the run)."""
    times: dict[str, list[float]] = {name: [] for name in rows}
    for fn in rows.values() if warmup else ():
        fn()
    for _ in range(repeats):
        for name, fn in rows.items():
            times[name] += timed_calls(fn, device, 1)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    torch.manual_seed(0)
    device = torch.device("cpu")
    filters = ELMO_FILTERS if args.filters == "elmo" else ((1, 8), (2, 8))
    random = ELMoBiLM(args.projection, args.cells, 2, filters=filters, num_highway=2, stateful=False)
    parameters = sum(p.numel() for p in random.parameters()) - random.char_dim  # (id 0's row is not the file's)
    with tempfile.TemporaryDirectory() as folder:
        bilm = ELMoBiLM.from_files(*random.save_files(Path(folder)), stateful=False)
    del random
    lstm = bilm.forward_layers[1]
    x = torch.randn(args.batch, args.tokens, args.projection).clamp(-3, 3)
    ids = torch.randint(1, 262, (args.batch, args.tokens, 50))

    def ours():
        return lstm(x)[0]

    def ours_pytorch():
        with mock.patch.object(lstmp.lstmp_cpu, "unavailable", lambda gates: "benchmark"):
            return lstm(x)[0]

    rows = {"floor (products alone)": lambda: products_alone(lstm, x), "ours": ours,
            "ours, PyTorch operations": ours_pytorch, "AllenNLP per-step": lambda: allennlp_per_step(lstm, x)}
    with torch.no_grad():
        reference = allennlp_per_step(lstm, x)
        for name in ("ours", "ours, PyTorch operations"):
            got = rows[name]()
            assert torch.allclose(got, reference, rtol=0, atol=1e-4), (name, (got - reference).abs().max())
        assert lstmp.choose_path(x[0].contiguous()).path is LSTMPPath.CPP, "the C++ loop is not built"
        if args.whole:
            rows["biLM: ours"] = lambda: bilm(ids)
            rows["biLM: AllenNLP per-step LSTMs"] = with_per_step_lstms(lambda: bilm(ids))
            whole_ours, whole_theirs = rows["biLM: ours"](), rows["biLM: AllenNLP per-step LSTMs"]()
            for a, b in zip(whole_ours[0], whole_theirs[0], strict=True):
                assert torch.allclose(a, b, rtol=0, atol=1e-4), (a - b).abs().max()
        times = interleaved(rows, device, args.repeats, not args.no_warmup)
    per_step = times["AllenNLP per-step"]
    lstm_rows = [name for name in times if not name.startswith("biLM")]
    speedup = {name: per_step / times[name] if name in lstm_rows
               else times["biLM: AllenNLP per-step LSTMs"] / times[name] for name in times}
    settings = {"parameters": parameters, "batch": args.batch, "tokens": args.tokens, "projection": args.projection,
                "cells": args.cells, "threads": args.threads, "repeats": args.repeats, "warmup": not args.no_warmup,
                "unit": "one direction of one LSTM layer (the biLM runs four)"}
    what = "LSTM and whole biLM" if args.whole else "LSTM"
    report(f"ELMo's biLM {what}, forward ({parameters / 1e6:.1f} M parameters, batch {args.batch} x {args.tokens} "
           f"tokens)", times, "floor (products alone)", device, args.json, settings,
           {"speed-up": speedup})


if __name__ == "__main__":
    main()
