"""Data-parallel training: 2 CPU processes (gloo) against one process with the same global batch."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

WORKER = Path(__file__).with_name("ddp_worker.py")


def run(out: Path, processes: int, kind: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if processes == 1:
        command = [sys.executable, str(WORKER), str(out), kind]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
                   str(WORKER), str(out), kind]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("kind", ["mlp", "lm"])
def test_two_processes_match_one(tmp_path, kind):
    """An MLP on images (batches split along dim 0), and an RHN language model (windows (T, B) split
    along the streams, each process carrying its own streams' state)."""
    run(tmp_path / "single", 1, kind)
    run(tmp_path / "ddp", 2, kind)
    single = torch.load(tmp_path / "single" / "rank0.pt", weights_only=True)
    rank0 = torch.load(tmp_path / "ddp" / "rank0.pt", weights_only=True)
    rank1 = torch.load(tmp_path / "ddp" / "rank1.pt", weights_only=True)
    assert rank0["size"] == rank1["size"] == 2 and single["size"] == 1
    for name, p in rank0["state"].items():
        assert torch.equal(p, rank1["state"][name]), name              # the ranks hold identical parameters
        torch.testing.assert_close(p, single["state"][name], rtol=1e-4, atol=1e-5)  # and those of one process
    for a, b in zip(rank0["history"], single["history"], strict=True):
        for key in ("train_loss", "val_loss") + (("train_acc", "val_acc") if kind == "mlp" else ()):
            assert abs(a[key] - b[key]) < 1e-4, (key, a[key], b[key])
    # Only rank 0 wrote the run folder.
    assert (tmp_path / "ddp" / "run" / "metrics.jsonl").read_text().count("\n") == 2
