"""Data-parallel training: 2 CPU processes (gloo) against one process with the same global batch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import process_timeout

WORKER = Path(__file__).with_name("ddp_worker.py")
SLOW_RANK0_CLI = Path(__file__).with_name("slow_rank0_cli.py")


def run(out: Path, processes: int, kind: str) -> None:
    launch([str(WORKER), str(out), kind], processes)


def launch(arguments: list[str], processes: int) -> str:
    """Run a Python script or module (``-m ...``) in one process, or under torchrun; its stdout."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if processes == 1:
        command = [sys.executable, *arguments]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
                   *arguments]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=process_timeout(300))
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("kind", ["mlp", "mlp-uneven", "lm"])
def test_two_processes_match_one(tmp_path, kind):
    """An MLP on images (batches split along dim 0; "mlp-uneven": the last batch of each epoch split
    2 and 1, whose slices' losses DDP must weigh by their share), and an RHN language model (windows
    (T, B) split along the streams, each process carrying its own streams' state)."""
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
        for key in ("train_loss", "val_loss") + (("train_acc", "val_acc") if kind != "lm" else ()):
            assert abs(a[key] - b[key]) < 1e-4, (key, a[key], b[key])
    # Only rank 0 wrote the run folder.
    assert (tmp_path / "ddp" / "run" / "metrics.jsonl").read_text().count("\n") == 2


def test_sweep_from_the_command_line_under_torchrun_matches_one_process(tmp_path):
    """``torchrun -m highwaynet reproduce depth``: every process runs the sweep, each run data-parallel;
    rank 0 alone writes the folders and prints. The learning-rate search must pick alike in every
    process, and a run's folder must be whole before any process reads it."""
    arguments = ["-m", "highwaynet", "reproduce", "depth", "--data", "digits", "--depths", "3", "--lrs", "0.03,0.1",
                 "--seeds", "0,1", "--epochs", "2", "--device", "cpu"]
    single = launch(arguments + ["--out", str(tmp_path / "single")], 1)
    ddp = launch(arguments + ["--out", str(tmp_path / "ddp")], 2)
    assert ddp.count("report.md") == single.count("report.md") == 1   # printed once
    one, two = (json.loads((tmp_path / d / "summary.json").read_text())["nets"] for d in ("single", "ddp"))
    for a, b in zip(one, two, strict=True):
        assert (a["kind"], a["lr"]) == (b["kind"], b["lr"])
        for key in ("train_loss", "test_acc"):
            assert b[key]["mean"] == pytest.approx(a[key]["mean"], abs=1e-4), (a["kind"], key)
    files = sorted(p.relative_to(tmp_path / "single") for p in (tmp_path / "single").rglob("*"))
    assert files == sorted(p.relative_to(tmp_path / "ddp") for p in (tmp_path / "ddp").rglob("*"))


def test_training_for_a_time_stops_every_process_at_rank_zeros_epoch(tmp_path):
    # Each process stopping by its own clock would leave the others waiting for it forever.
    run(tmp_path, 2, "mlp-max-time")
    histories = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True)["history"] for r in (0, 1)]
    assert len(histories[0]) == len(histories[1]) == 6  # rank 0's epochs take well under 2 s in all


def test_sentence_run_under_torchrun_matches_one_process(tmp_path, shared_data):
    """A sentence run keeps its vocabulary and tests its best weights: under torchrun rank 0 writes
    them, and every process reads the best weights only once they are written. Rank 0 writes each
    file a second late (tests/slow_rank0_cli.py), so that a process reading too early fails every
    time rather than on a slow machine only."""
    # (a set of your own is UTF-8; TREC is published in Latin-1)
    lines = (shared_data / "sentence" / "TREC.train.all").read_text(encoding="latin-1").encode().splitlines()
    data = tmp_path / "trec-small"
    data.mkdir()
    (data / "train").write_bytes(b"\n".join(lines[:400]) + b"\n")
    (data / "test").write_bytes(b"\n".join(lines[-101:]) + b"\n")  # 101: the two processes split it 51 and 50
    arguments = ["-m", "highwaynet", "reproduce", "sentences", "--task", str(data), "--layers", "2",
                 "--hidden", "8", "--embed-dim", "16", "--dropout", "0", "--epochs", "3", "--lr", "0.02",
                 "--device", "cpu", "--seeds", "0"]  # (one seed: 2 runs, each file of rank 0's a second late)
    launch(arguments + ["--out", str(tmp_path / "single")], 1)
    launch([str(SLOW_RANK0_CLI)] + arguments[2:] + ["--out", str(tmp_path / "ddp")], 2)
    one, two = (json.loads(next((tmp_path / out).rglob("results.json")).read_text()) for out in ("single", "ddp"))
    # The last epoch was the best one, so model.pt changed at the very end: read any earlier, it is
    # missing or older, and the test figures differ.
    history = [json.loads(line) for line in next((tmp_path / "single").rglob("metrics.jsonl")).read_text().splitlines()]
    assert history[-1]["val_acc"] > max(m["val_acc"] for m in history[:-1])
    assert two["best_val_acc"] == pytest.approx(one["best_val_acc"], abs=1e-6)
    assert two["test"]["loss"] == pytest.approx(one["test"]["loss"], abs=1e-4)
    assert two["test"]["acc"] == pytest.approx(one["test"]["acc"], abs=1e-6)
    run_dir = next((tmp_path / "ddp").rglob("results.json")).parent
    assert "\t" in launch(["-m", "highwaynet", "predict", str(run_dir), "What is the capital of France ?"], 1)


def test_adversarial_sentence_run_under_torchrun_matches_one_process(tmp_path, shared_data):
    """Adversarial training runs the model twice a step and differentiates the first pass alone to the
    word vectors: DistributedDataParallel must still reduce the gradients once, as one process has them."""
    # (a set of your own is UTF-8; TREC is published in Latin-1)
    lines = (shared_data / "sentence" / "TREC.train.all").read_text(encoding="latin-1").encode().splitlines()
    data = tmp_path / "trec-small"
    data.mkdir()
    (data / "train").write_bytes(b"\n".join(lines[:400]) + b"\n")
    (data / "test").write_bytes(b"\n".join(lines[-100:]) + b"\n")
    arguments = ["-m", "highwaynet", "reproduce", "sentences", "--task", str(data), "--layers", "2",
                 "--hidden", "8", "--embed-dim", "16", "--dropout", "0", "--epochs", "2", "--lr", "0.02",
                 "--device", "cpu", "--adversarial", "1"]
    launch(arguments + ["--out", str(tmp_path / "single")], 1)
    launch(arguments + ["--out", str(tmp_path / "ddp")], 2)
    one, two = ([json.loads(line) for line in next((tmp_path / out).rglob("metrics.jsonl")).read_text().splitlines()]
                for out in ("single", "ddp"))
    for a, b in zip(one, two, strict=True):
        for key in ("train_loss", "train_acc", "val_loss", "val_acc"):
            assert b[key] == pytest.approx(a[key], abs=1e-5), key
