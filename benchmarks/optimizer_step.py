"""The optimiser's update on the CPU: PyTorch's default (foreach) against its fused kernels.

The Trainer asks for ``fused=True`` on the CPU (torch >= 2.4). This measures why, on the models and
optimisers of the recipes, side by side in one run:

  sentences   SST-2's highway BiLSTM (5.1 M parameters, 4.8 M of them the word vectors), Adam,
              batch 50 x 20 words
  depth       the 100-layer highway MLP of ``reproduce depth`` (202 small tensors), SGD with
              momentum, batch 100
  lm          the character RHN of ``train lm`` (hidden 256, depth 4), Adam, 50 steps x batch 32

Rows per model: the update alone (``optimizer.step()`` on fixed gradients) and a whole training
step (forward, backward, update), each with the default and with the fused update. The last column
is each fused row's time over its default row's.

    python benchmarks/optimizer_step.py
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from common import device_name, measure_rows
from provenance import stamp
from torch import nn

from highwaynet.models.lm import RHNLanguageModel
from highwaynet.models.mlp import HighwayMLP
from highwaynet.models.sentence import SentenceClassifier


def cases(vocab: int) -> dict[str, tuple[nn.Module, type[torch.optim.Optimizer], dict, tuple, object]]:
    """name -> (model, optimiser class, its options, a batch, the loss of a batch)."""
    tokens = torch.randint(1, vocab, (50, 20))

    def sentence_loss(model, batch):
        return F.cross_entropy(model(batch[0], batch[1]), batch[2])

    def mlp_loss(model, batch):
        return F.cross_entropy(model(batch[0]), batch[1])

    def lm_loss(model, batch):
        logits, _ = model(batch[0])
        return F.cross_entropy(logits.flatten(0, 1), batch[1].flatten())

    return {
        "sentences": (SentenceClassifier(vocab, 2), torch.optim.Adam, {"lr": 1e-3},
                      (tokens, torch.full((50,), 20), torch.randint(0, 2, (50,))), sentence_loss),
        "depth": (HighwayMLP(784, 10, 100), torch.optim.SGD, {"lr": 0.03, "momentum": 0.9},
                  (torch.randn(100, 784), torch.randint(0, 10, (100,))), mlp_loss),
        "lm": (RHNLanguageModel(65, 256, depth=4), torch.optim.Adam, {"lr": 2e-3},
               (torch.randint(0, 65, (50, 32)), torch.randint(0, 65, (50, 32))), lm_loss),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=16_000, help="the sentence model's vocabulary (SST-2's: 16k)")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json", default="benchmarks/optimizer_step_cpu.json")
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device("cpu")
    rows, parameters = {}, {}
    for name, (model, optimizer_class, options, batch, loss_of) in cases(args.vocab).items():
        parameters[name] = sum(p.numel() for p in model.parameters())
        optimizers = {impl: optimizer_class(model.parameters(), fused=fused, **options)
                      for impl, fused in (("default", None), ("fused", True))}
        steps = {}
        for impl, optimizer in optimizers.items():

            def train_step(model=model, optimizer=optimizer, batch=batch, loss_of=loss_of):
                optimizer.zero_grad(set_to_none=True)
                loss_of(model, batch).backward()
                optimizer.step()

            train_step()  # makes the gradients and the optimiser's state
            steps[impl] = train_step
        rows.update({f"{name}: update, {impl}": optimizer.step for impl, optimizer in optimizers.items()})
        rows.update({f"{name}: training step, {impl}": step for impl, step in steps.items()})
    # (The update rows change the weights as they run; the step's cost does not depend on them.)
    seconds = measure_rows(rows, device, args.repeats)

    print(f"One optimiser update and one training step, default against fused\n{device_name(device)}, "
          f"torch {torch.__version__}")
    width = max(map(len, rows)) + 2
    print(f"{'':{width}}{'ms':>10}{'fused / default':>18}")
    ratios = {}
    for row, s in seconds.items():
        if row.endswith("fused"):
            ratios[row] = s / seconds[row.replace("fused", "default")]
        print(f"{row:{width}}{1e3 * s:10.3f}" + (f"{ratios[row]:18.2f}" if row in ratios else ""))
    record = {"title": "optimiser update, default against fused", **stamp(), "device": device_name(device),
              "torch": torch.__version__, "settings": vars(args), "parameters": parameters,
              "ms": {k: 1e3 * v for k, v in seconds.items()}, "fused_over_default": ratios}
    with open(args.json, "w") as f:
        json.dump(record, f, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
