"""Run by tests/test_distributed.py under torchrun: a few steps of data-parallel training on the CPU (gloo),
which a GPU machine gives it too.

Each rank saves its final parameters, so that the test can check that all ranks agree.
"""

import sys
from pathlib import Path

import torch

from highwaynet.data import load_digits
from highwaynet.models import HighwayMLP, RHNLanguageModel
from highwaynet.training import ClassificationTask, LanguageModelTask, TrainConfig, Trainer
from highwaynet.training.distributed import barrier, leave_distributed, world


class Streams:
    """A small corpus: a repeating pattern with some noise, so that there is something to learn."""

    level = "char"

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        ids = (torch.arange(3000) % 7 + torch.randint(0, 2, (3000,), generator=generator)) % 10
        self.train, self.valid, self.test = ids[:2000], ids[2000:2500], ids[2500:]


def main(out: str, kind: str) -> None:
    torch.manual_seed(0)
    if kind.startswith("mlp"):
        model = HighwayMLP(64, 10, depth=4, width=16)
        # "mlp-uneven": 403 training images in batches of 80 end each epoch with a batch of 3, which
        # two processes split 2 and 1.
        task = ClassificationTask(load_digits(max_train=403 if kind == "mlp-uneven" else 400), batch_size=80, seed=1)
    else:  # windows (T, B): each process takes half of the B streams, with its own carried state
        model = RHNLanguageModel(10, 16, depth=2)
        task = LanguageModelTask(Streams(), batch_size=8, bptt=20, eval_batch_size=4, seed=1)
    # "mlp-max-time": training for a time (as the LSTM of rhn-depth does), on clocks that disagree.
    max_time = 2.0 if kind == "mlp-max-time" else None
    trainer = Trainer(model, task, TrainConfig(epochs=6 if max_time else 2, lr=0.01 if kind == "lm" else 0.1,
                                               optimizer="sgd", seed=1, device="cpu"), Path(out) / "run",
                      progress=False)
    rank, size = world()
    if max_time and rank == 1:  # rank 1's epochs take 1 s by its clock: alone, it would stop after 2
        run_epoch = trainer._run_epoch
        trainer._run_epoch = lambda epoch: {**run_epoch(epoch), "time": 1.0}  # type: ignore[method-assign]
    history = trainer.fit(max_time=max_time)
    torch.save({"state": model.state_dict(), "history": history, "size": size}, Path(out) / f"rank{rank}.pt")
    barrier()
    leave_distributed()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
