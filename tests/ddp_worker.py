"""Run by tests/test_distributed.py under torchrun: a few steps of data-parallel training on CPU (gloo).

Each rank saves its final parameters, so that the test can check that all ranks agree.
"""

import sys
from pathlib import Path

import torch

from highwaynet.data import load_digits
from highwaynet.models import HighwayMLP
from highwaynet.training import ClassificationTask, TrainConfig, Trainer
from highwaynet.training.distributed import world


def main(out: str) -> None:
    data = load_digits(max_train=400)
    torch.manual_seed(0)
    model = HighwayMLP(64, 10, depth=4, width=16)
    trainer = Trainer(model, ClassificationTask(data, batch_size=80, seed=1), TrainConfig(epochs=2, lr=0.1, seed=1),
                      Path(out) / "run", progress=False)
    history = trainer.fit()
    rank, size = world()
    torch.save({"state": model.state_dict(), "history": history, "size": size}, Path(out) / f"rank{rank}.pt")


if __name__ == "__main__":
    main(sys.argv[1])
