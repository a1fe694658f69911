"""How long the sentence-classification table and SST-2 depth sweep take on this machine.

Trains one epoch of each task x encoder (the recurrent stacks at 1 and 2 layers, whose difference
is the cost of one more block) with the recipe's defaults, and projects the full runs of
``reproduce sentences`` from those epochs:

  table   every task, encoders bilstm/hbilstm at 1 and 2 layers, cnn, cnn-highway; 3 seeds
          (SST-1, SST-2, TREC) or 10 folds (MR, Subj)
  sweep   SST-2, bilstm and hbilstm at 1, 2, 4, 6, 8, 10, 15, 20 layers, 3 seeds

A run costs its set-up and test (measured) plus ``epochs`` epochs; an epoch of an L-layer stack
costs the 1-layer epoch plus L - 1 times one block.

    python benchmarks/sentence_time.py --data-dir ../shared/data/sentence
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
from common import device_name
from provenance import stamp

from highwaynet.data.sentences import SENTENCE_TASKS
from highwaynet.recipes.sentences import CROSS_VALIDATED, SentenceConfig, load_data, run
from highwaynet.training import TrainConfig

TABLE = [("bilstm", 1), ("bilstm", 2), ("hbilstm", 1), ("hbilstm", 2), ("cnn", 1), ("cnn-highway", 1)]
SWEEP_LAYERS = [1, 2, 4, 6, 8, 10, 15, 20]


def time_one_epoch(task: str, encoder: str, layers: int, data, device: str) -> tuple[float, float]:
    """``(seconds of one training epoch with its validation, seconds of the run's set-up and test)``."""
    config = SentenceConfig(task=task, encoder=encoder, layers=layers,
                            train=TrainConfig(epochs=1, optimizer="adam", lr=1e-3, monitor="val_acc",
                                              grad_clip=5.0, device=device))
    with tempfile.TemporaryDirectory() as out:
        results = run(config, out, data=data, progress=False, log=lambda *a: None)
        epoch = json.loads(Path(out, "metrics.jsonl").read_text().splitlines()[0])["time"]
    return epoch, results["seconds"] - epoch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, help="folder holding the sentence files")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--epochs", type=int, default=10, help="epochs of the projected runs")
    parser.add_argument("--json", default="benchmarks/sentence_time.json")
    args = parser.parse_args()

    measured: dict[str, dict[str, tuple[float, float]]] = {}
    for task in SENTENCE_TASKS:
        data = load_data(SentenceConfig(task=task), args.data_dir)
        measured[task] = {f"{e}-L{n}": time_one_epoch(task, e, n, data, args.device) for e, n in TABLE}
        print(task, {k: round(v[0], 1) for k, v in measured[task].items()}, flush=True)

    def run_seconds(task: str, encoder: str, layers: int) -> float:
        (e1, setup), e2 = measured[task][f"{encoder}-L1"], measured[task].get(f"{encoder}-L2", (0.0, 0.0))[0]
        per_block = e2 - e1 if layers > 1 else 0.0
        return setup + args.epochs * (e1 + (layers - 1) * per_block)

    def repeats(task: str) -> int:
        return 10 if task in CROSS_VALIDATED else 3

    table = {task: sum(repeats(task) * run_seconds(task, e, n) for e, n in TABLE) for task in SENTENCE_TASKS}
    sweep = sum(3 * run_seconds("sst2", e, n) for e in ("bilstm", "hbilstm") for n in SWEEP_LAYERS)

    print(f"\none epoch (training and validation), seconds; {device_name(torch.device(args.device))}, "
          f"torch {torch.__version__}")
    names = [f"{e}-L{n}" for e, n in TABLE]
    print(f"{'':8}" + "".join(f"{n:>15}" for n in names))
    for task in SENTENCE_TASKS:
        print(f"{task:8}" + "".join(f"{measured[task][n][0]:15.1f}" for n in names))
    print(f"\nprojected, {args.epochs} epochs a run:")
    for task, seconds in table.items():
        print(f"  table, {task:5} ({repeats(task)} x {len(TABLE)} runs): {seconds / 3600:6.2f} h")
    print(f"  table, all sets:                  {sum(table.values()) / 3600:6.2f} h")
    print(f"  SST-2 depth sweep (48 runs):      {sweep / 3600:6.2f} h")
    record = {**stamp(), "device": device_name(torch.device(args.device)), "torch": torch.__version__,
              "epochs": args.epochs,
              "epoch_seconds": {t: {n: v[0] for n, v in m.items()} for t, m in measured.items()},
              "setup_seconds": {t: {n: v[1] for n, v in m.items()} for t, m in measured.items()},
              "projected_hours": {"table": {t: s / 3600 for t, s in table.items()},
                                  "table_total": sum(table.values()) / 3600, "sst2_sweep": sweep / 3600}}
    Path(args.json).write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
