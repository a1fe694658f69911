"""
Your own block behind a highway gate: residual, highway, GTrXL and ReZero connections
=====================================================================================

A block of your own (here a LayerNorm and a small MLP, as in a Transformer or an MLP-Mixer) stacked
24 deep in a classifier of scikit-learn's 8x8 digits, five ways: the blocks alone, one after
another; each inside a ``highwaynet.nn.Residual`` whose combiner is a plain sum (``x + F(x)``),
a highway gate (``T ⊙ F(x) + (1 − T) ⊙ x``, ``T`` starting at about 0.12), GTrXL's GRU-type gate, or
ReZero's scalar (``x + α F(x)``, ``α`` starting at 0). The same optimiser and steps for all (about 30 s on a
2-core CPU). Then the highway model's gates: the mean
``T`` of each block (``highwaynet.record_gates``), and the test accuracy with its most open gate
shut (``highwaynet.lesion``: that block then carries its input through).

.. code-block:: bash

    pip install ".[data]"         # in highwaynet's clone: scikit-learn, for the digits
    python examples/gated_residual_block.py [--depth 24] [--steps 250]
"""

import argparse

import torch
from sklearn.datasets import load_digits
from torch import nn

from highwaynet import lesion, record_gates
from highwaynet.nn import GRUGate, HighwayGate, Residual, ReZero, Sum

# (the docstring is the gallery page's text; sphinx-gallery runs the script without it)
DESCRIPTION = "Your own block behind a highway gate: residual, highway, GTrXL and ReZero connections"


class MyBlock(nn.Module):
    """The block you already have: LayerNorm, then an MLP, (..., width) -> (..., width)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 2 * width), nn.GELU(),
                                 nn.Linear(2 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)


#: Each connection's combiner, for a stream of ``width``.
COMBINERS = {"residual": lambda width: Sum(), "highway": lambda width: HighwayGate(width, bias=-2.0),
             "gtrxl": lambda width: GRUGate(width, bias=-2.0), "rezero": lambda width: ReZero()}


def classifier(depth: int, width: int, connection: str | None) -> nn.Module:
    """Pixels -> width -> ``depth`` blocks (alone, or each inside a ``Residual``) -> 10 classes."""
    blocks = [MyBlock(width) if connection is None else Residual(MyBlock(width), COMBINERS[connection](width))
              for _ in range(depth)]
    return nn.Sequential(nn.Linear(64, width), *blocks, nn.LayerNorm(width), nn.Linear(width, 10))


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, seed: int) -> None:
    """Adam on batches of 64."""
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        batch = torch.randint(len(x), (64,), generator=generator)
        loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    return 100 * (model.eval()(x).argmax(-1) == y).float().mean().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--depth", type=int, default=24)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16  # pixels 0..16 -> 0..1
    y = torch.tensor(digits.target)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    train_idx, test_idx = order[:1400], order[1400:]
    models = {}
    for connection in (None, "residual", "highway", "gtrxl", "rezero"):
        torch.manual_seed(args.seed)
        model = classifier(args.depth, args.width, connection)
        train(model, x[train_idx], y[train_idx], args.steps, args.seed)
        models[connection] = model
        name = connection or "blocks alone"
        print(f"{name:12} {args.depth} blocks: test accuracy {accuracy(model, x[test_idx], y[test_idx]):.1f}%")

    highway = models["highway"]
    with record_gates(highway) as gates:
        highway(x[test_idx])
    mean = gates.mean_per_gate()  # one mean T per block
    print("highway gates, mean T per block: " + " ".join(f"{t:.2f}" for t in mean.tolist()))
    widest = int(mean.argmax())
    with lesion(highway, widest):
        print(f"block {widest + 1} (its gate the most open) shut: test accuracy "
              f"{accuracy(highway, x[test_idx], y[test_idx]):.1f}%")


if __name__ == "__main__":
    main()
