"""The README's main job (``highwaynet reproduce depth --data mnist5k``) pinned: its first epochs on a
slice of the data give the losses stored beside this file (``test_main_job_numbers.json``).

A change that moves the depth study's numbers (the initialisation, the data's order, the optimiser,
the recipe's settings) fails here, in CI, instead of being found by a user whose figures no longer
match the README's. Where a change means to move them: say why in the changelog, regenerate the
stored results (``docs/results/depth-mnist5k.json``) and this file (``python tests/test_main_job_numbers.py``).

The tolerance is relative, ``TOLERANCE`` (1e-5): measured on this slice, the number of CPU threads
(1, 2 or 4: another order of the sums in the matrix products) moves the pinned losses by at most
1.6e-7, while changing the learning rate or the gate bias by 1% moves them by 8e-5 to 2e-2. The plain
50-layer net is not pinned: its first epochs are chaotic (the thread count alone moves them by up to
2.7%), so no tolerance both holds across machines and catches a change there.
"""

import json
import sys
from pathlib import Path

from conftest import needs_mlxtend

GOLDEN = Path(__file__).with_suffix(".json")
#: The slice: both kinds at 10 and 50 layers, the study's rate, first seed and settings; two epochs on
#: the first 1,000 training examples.
ARGS = ["reproduce", "depth", "--data", "mnist5k", "--depths", "10,50", "--lrs", "0.03", "--seeds", "0",
        "--epochs", "2", "--max-train", "1000"]
PINNED = ("plain-10", "highway-10", "highway-50")
TOLERANCE = 1e-5


def first_epochs(out: Path) -> dict[str, list[dict[str, float]]]:
    """Run the slice into ``out``; each net's training and validation loss per epoch."""
    from highwaynet.cli import main
    from highwaynet.training import read_metrics

    assert main([*ARGS, "--out", str(out)]) == 0
    return {net: [{k: m[k] for k in ("train_loss", "val_loss")} for m in read_metrics(next((out / net).glob("lr*")))]
            for net in PINNED}


@needs_mlxtend
def test_the_main_job_s_first_epochs_are_the_stored_ones(tmp_path):
    golden = json.loads(GOLDEN.read_text())
    assert golden["command"] == "highwaynet " + " ".join(ARGS) and golden["tolerance"] == TOLERANCE
    measured = first_epochs(tmp_path / "slice")
    moved = [f"{net}, epoch {e + 1}, {key}: {value:.9g}, stored {stored[e][key]:.9g}"
             for net, stored in golden["losses"].items() for e, epoch in enumerate(measured[net])
             for key, value in epoch.items() if abs(value - stored[e][key]) > TOLERANCE * abs(stored[e][key])]
    assert not moved, ("the depth study's first epochs moved (this file's docstring says what to do):\n"
                       + "\n".join(moved))


if __name__ == "__main__":  # python tests/test_main_job_numbers.py: rewrite the stored losses
    import tempfile

    import torch

    import highwaynet
    from highwaynet.training.run_dir import cpu_model

    with tempfile.TemporaryDirectory() as folder:
        losses = first_epochs(Path(folder) / "slice")
    record = {"command": "highwaynet " + " ".join(ARGS), "tolerance": TOLERANCE,
              "made_by": {"highwaynet": highwaynet.__version__, "torch": torch.__version__, "cpu": cpu_model(),
                          "cpu_threads": torch.get_num_threads(), "python": sys.version.split()[0]},
              "losses": losses}
    GOLDEN.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {GOLDEN}")
