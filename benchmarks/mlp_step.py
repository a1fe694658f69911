"""The highway paper's MNIST network, one SGD step: ours (eager, CUDA graph) against the peers' algorithms.

The network: 784 inputs, one plain layer to width 50, 49 highway layers 50 wide (50 layers in all),
10 classes; batch 100; SGD with momentum 0.9. At this size a step is a thousand tiny kernels, so the
time is launch overhead: the rows show what each way of running the same step costs.

Rows, measured side by side in one run (the same initial weights and batches):
  separate H and T, eager   Chainer's / Lasagne's layer: two Linear modules, gating written out
  one projection, eager     GluonNLP's layer: one Linear(d, 2d), split, gating written out
  ours, eager               ``HighwayMLP`` (fused gate kernels on CUDA with Triton)
  ours, CUDA graph          the same step replayed as one graph (``TrainConfig(cuda_graph=True)``)
  ours, torch.compile       with ``--compile`` (slow to compile)

    python benchmarks/mlp_step.py                    # on the CPU
    python benchmarks/mlp_step.py --device cuda
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from common import measure_rows, report
from torch import nn

from highwaynet.models import HighwayMLP
from highwaynet.training.cuda_graph import GraphedStep


class SeparateHighwayMLP(nn.Module):
    """The same network with Chainer's / Lasagne's layer: separate H and T projections."""

    def __init__(self, ours: HighwayMLP) -> None:
        super().__init__()
        width = ours.input.out_features
        self.input, self.classifier = ours.input, ours.classifier
        self.h = nn.ModuleList(nn.Linear(width, width) for _ in ours.highway.layers)
        self.t = nn.ModuleList(nn.Linear(width, width) for _ in ours.highway.layers)
        with torch.no_grad():  # the same weights as ours, split
            for h, t, proj in zip(self.h, self.t, ours.highway.layers, strict=True):
                h.weight.copy_(proj.weight[:width]), h.bias.copy_(proj.bias[:width])
                t.weight.copy_(proj.weight[width:]), t.bias.copy_(proj.bias[width:])

    def forward(self, x):
        x = F.relu(self.input(x))
        for h, t in zip(self.h, self.t, strict=True):
            gate = torch.sigmoid(t(x))
            x = F.relu(h(x)) * gate + x * (1 - gate)
        return self.classifier(x)


class OneProjectionHighwayMLP(nn.Module):
    """The same network with GluonNLP's layer: one projection, split, gating written out."""

    def __init__(self, ours: HighwayMLP) -> None:
        super().__init__()
        self.input, self.classifier, self.layers = ours.input, ours.classifier, ours.highway.layers

    def forward(self, x):
        x = F.relu(self.input(x))
        for proj in self.layers:
            h, t = proj(x).chunk(2, dim=-1)
            t = torch.sigmoid(t)
            x = F.relu(h) * t + x * (1 - t)
        return self.classifier(x)


def sgd_step(model: nn.Module, optimizer: torch.optim.Optimizer):
    """One training step on a batch, returning its loss as the Trainer's steps do."""
    def step(batch):
        x, y = batch
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return {"loss": loss.detach()}
    return step


def rotating(step, batches: list):
    """``step`` on the next batch at each call, cycling through ``batches`` as training does."""
    position = {"i": 0}

    def run():
        position["i"] = (position["i"] + 1) % len(batches)
        return step(batches[position["i"]])
    return run


def sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--depth", type=int, default=50)
    parser.add_argument("--width", type=int, default=50)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--json", default="benchmarks/mlp_step.json")
    args = parser.parse_args()
    device = torch.device(args.device)

    torch.manual_seed(0)
    batches = [(torch.randn(args.batch, 784, device=device), torch.randint(0, 10, (args.batch,), device=device))
               for _ in range(8)]

    def fresh(kind):
        torch.manual_seed(0)
        ours = HighwayMLP(784, 10, args.depth, args.width).to(device)
        peers = {"separate": SeparateHighwayMLP, "one": OneProjectionHighwayMLP}
        return peers[kind](ours).to(device) if kind in peers else ours

    rows = {}
    for name, kind in (("separate H and T, eager (Chainer, Lasagne)", "separate"),
                       ("one projection, eager (GluonNLP)", "one"), ("ours, eager", "ours")):
        model = fresh(kind)
        rows[name] = rotating(sgd_step(model, sgd(model)), batches)
    if device.type == "cuda":
        model = fresh("ours")
        optimizer = sgd(model)
        rows["ours, CUDA graph"] = rotating(GraphedStep(sgd_step(model, optimizer), optimizer), batches)
    if args.compile:
        model = fresh("ours")
        rows["ours, torch.compile"] = rotating(sgd_step(torch.compile(model), sgd(model)), batches)

    # Every row trains the same network the same way: after the same number of steps on the same
    # batches they hold the same loss (checked, so that the table compares like with like).
    losses = {name: float(fn()["loss"]) for name, fn in rows.items()}
    first = next(iter(losses.values()))
    if any(abs(loss - first) > 1e-3 * max(1.0, abs(first)) for loss in losses.values()):
        raise AssertionError(f"the rows do not train the same network: first losses {losses}")
    results = measure_rows(rows, device, args.repeats)
    report(f"highway MLP SGD step: {args.depth} layers x {args.width}, batch {args.batch}, "
           f"median of {args.repeats}", results, "separate H and T, eager (Chainer, Lasagne)", device, args.json,
           vars(args), {"first loss": losses})


if __name__ == "__main__":
    main()
