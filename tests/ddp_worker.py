"""Run by tests/test_distributed.py under torchrun: a few steps of data-parallel training on CPU (gloo).

Each rank saves its final parameters, so that the test can check that all ranks agree.
"""

import sys
from pathlib import Path

import torch

from highwaynet.data import load_digits
from highwaynet.models import HighwayMLP, RHNLanguageModel
from highwaynet.training import ClassificationTask, LanguageModelTask, TrainConfig, Trainer
from highwaynet.training.distributed import world


class Streams:
    """A small corpus: a repeating pattern with some noise, so that there is something to learn."""

    level = "char"

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        ids = (torch.arange(3000) % 7 + torch.randint(0, 2, (3000,), generator=generator)) % 10
        self.train, self.valid, self.test = ids[:2000], ids[2000:2500], ids[2500:]


def main(out: str, kind: str) -> None:
    torch.manual_seed(0)
    if kind == "mlp":
        model = HighwayMLP(64, 10, depth=4, width=16)
        task = ClassificationTask(load_digits(max_train=400), batch_size=80, seed=1)
    else:  # windows (T, B): each process takes half of the B streams, with its own carried state
        model = RHNLanguageModel(10, 16, depth=2)
        task = LanguageModelTask(Streams(), batch_size=8, bptt=20, eval_batch_size=4, seed=1)
    trainer = Trainer(model, task, TrainConfig(epochs=2, lr=0.1 if kind == "mlp" else 0.01,
                                               optimizer="sgd", seed=1), Path(out) / "run", progress=False)
    history = trainer.fit()
    rank, size = world()
    torch.save({"state": model.state_dict(), "history": history, "size": size}, Path(out) / f"rank{rank}.pt")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
