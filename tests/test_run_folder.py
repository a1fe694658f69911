"""Nothing lost, nothing silently wrong: a run folder has one writer, every interrupted state has a
way on, a killed run resumes to the uninterrupted result, and a diverged run does not pass for one
that finished."""

import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import process_timeout

from highwaynet.cli import main
from highwaynet.training.progress import SweepProgress
from highwaynet.training.run_dir import RunFolderBusy, held_by, hold_run_dir, release_lock, run_once, take_lock

pytest.importorskip("sklearn", reason="the digits come with scikit-learn (the data extra)")

HERE = Path(__file__).resolve().parent
# A small run on the 8x8 digits: six epochs of a few steps each.
TRAIN = ["train", "mlp", "--data", "digits", "--depth", "3", "--width", "16", "--epochs", "6", "--max-train", "300",
         "--batch-size", "50", "--dropout", "0.1", "--device", "cpu"]


def _metrics(run: Path) -> list[dict]:
    """The metrics lines, without their wall times (the one thing two runs may differ in)."""
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in m.items() if k != "time"} for m in lines]


def test_a_second_process_is_refused_and_told_who_writes(tmp_path, capsys):
    run = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                               "from highwaynet.training.run_dir import hold_run_dir\n"
                               f"with hold_run_dir({str(run)!r}):\n"
                               "    print('holding', flush=True)\n    time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        assert main([*TRAIN, "--out", str(run)]) == 2
        error = capsys.readouterr().err
        assert f"is being written by process {holder.pid} on {socket.gethostname()}" in error
        assert not (run / "config.json").exists()  # nothing written before the lock
    finally:
        holder.kill()
        holder.wait()
    # the OS released the lock with the process: the folder is free
    assert main([*TRAIN, "--epochs", "1", "--out", str(run)]) == 0


def test_the_lock_is_reentrant_in_one_process_and_released(tmp_path):
    with hold_run_dir(tmp_path), hold_run_dir(tmp_path):  # a recipe holds it, and its Trainer again
        pass
    with hold_run_dir(tmp_path):
        child = subprocess.run([sys.executable, "-c", "from highwaynet.training.run_dir import hold_run_dir\n"
                                f"with hold_run_dir({str(tmp_path)!r}): pass"], capture_output=True, text=True)
        assert child.returncode != 0 and RunFolderBusy.__name__ in child.stderr
    with hold_run_dir(tmp_path):
        pass


def test_held_by_names_the_holder_take_lock_is_refused_by_and_takes_nothing(tmp_path):
    """held_by reads who holds a folder's lock without taking it or writing anything: the holder that
    take_lock names when refused ("another process" where the holder has not written who it is yet); None
    for a folder never locked, one no process holds, and one this process holds."""
    import fcntl

    run = tmp_path / "run"
    assert held_by(run) is None  # (no folder, no lock file)
    with hold_run_dir(run):
        assert held_by(run) is None  # this process holds it
    assert held_by(run) is None  # nobody holds it (its lock file names the last holder)
    who = f"process {os.getpid()} on {socket.gethostname()}"
    lock = take_lock(run / ".lock", RunFolderBusy)  # (a real flock, on a descriptor of its own: another holder)
    try:
        assert held_by(run) == who and (run / ".lock").read_text() == f"{who}\n"
        with pytest.raises(RunFolderBusy) as busy:
            take_lock(run / ".lock", lambda holder: RunFolderBusy("busy", holder))
        assert busy.value.holder == who
    finally:
        release_lock(lock)
    (run / ".lock").write_text("")  # a holder that has locked the file and not yet written who it is
    fd = os.open(run / ".lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert held_by(run) == "another process"
        with pytest.raises(RunFolderBusy) as busy:
            take_lock(run / ".lock", lambda holder: RunFolderBusy("busy", holder))
        assert busy.value.holder == "another process"
    finally:
        os.close(fd)
    assert held_by(run) is None and (run / ".lock").read_text() == ""  # (read, never written)
    release_lock(take_lock(run / ".lock", RunFolderBusy))  # (and free to take)


def test_a_folder_killed_before_its_first_checkpoint_starts_over(tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*TRAIN, "--epochs", "1", "--out", str(run)]) == 0
    # What a kill during the first checkpoint's write leaves: the config, a metrics line, half a file.
    (run / "checkpoint.pt").unlink()
    (run / "results.json").unlink()
    (run / "checkpoint.pt.tmp").write_bytes(b"PK\x03\x04 half a zip")
    assert main([*TRAIN, "--epochs", "1", "--out", str(run), "--resume"]) == 0
    printed = "".join(capsys.readouterr())
    assert "holds no checkpoint yet" in printed and "starting it from scratch" in printed
    assert not (run / "checkpoint.pt.tmp").exists()
    assert [m["epoch"] for m in _metrics(run)] == [1]
    # and a fresh start over such a folder needs no --restart either
    (run / "checkpoint.pt").unlink()
    (run / "results.json").unlink()
    assert main([*TRAIN, "--epochs", "1", "--out", str(run)]) == 0


def test_a_damaged_checkpoint_names_the_file_and_the_ways_on(tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*TRAIN, "--epochs", "3", "--out", str(run)]) == 0
    (run / "results.json").unlink()
    checkpoint = run / "checkpoint.pt"
    checkpoint.write_bytes(checkpoint.read_bytes()[:1000])  # truncated
    assert main([*TRAIN, "--out", str(run), "--resume"]) == 2
    error = capsys.readouterr().err
    assert f"{checkpoint} cannot be read" in error and "--restart" in error
    assert f"mv {run / 'checkpoint.prev.pt'} {checkpoint}" in error
    # the way on it names: the previous checkpoint (epoch 2), then the run resumes to its end
    (run / "checkpoint.prev.pt").rename(checkpoint)
    assert main([*TRAIN, "--epochs", "3", "--out", str(run), "--resume"]) == 0
    assert [m["epoch"] for m in _metrics(run)] == [1, 2, 3]
    # --restart starts it over; a folder with a run is otherwise never overwritten (other settings: refused)
    assert main([*TRAIN, "--epochs", "1", "--out", str(run)]) == 2
    assert f"{run} holds a run with other settings (--epochs 3 there, 1 asked)" in capsys.readouterr().err
    assert main([*TRAIN, "--epochs", "1", "--out", str(run), "--restart"]) == 0
    assert [m["epoch"] for m in _metrics(run)] == [1]


def _epochs_saved(run: Path) -> int:
    """The epochs a run folder's checkpoint holds, which a resumed run goes on from (0: none yet)."""
    for name in ("checkpoint.pt", "checkpoint.prev.pt"):  # (the second: a kill between putting one aside and the next)
        if (run / name).is_file():
            return torch.load(run / name, weights_only=True)["epoch"]
    return 0


def test_killed_at_random_moments_every_run_resumes_to_the_uninterrupted_result(tmp_path):
    """SIGKILL at random moments and in the middle of the first and later writes of checkpoints and
    files (tests/kill_worker.py slows every write), then resume until the run finishes: the metrics and
    the best weights are those of a run never interrupted, and every run was killed at least once. Each
    attempt is a process of its own, forked from one that has imported what a run imports (kill_worker.py
    --serve), so that the random moments fall in the run's work rather than in its imports: spread over
    the work the attempt has left, at the quickest pace seen (a whole run's time, or what an attempt that
    ran to its end shows a whole run takes at most). The machine's pace changes with
    its load (a whole run measured while it was busy, an attempt on a quiet machine can end before its
    moment): a run whose first attempt ended before its random moment is started again in a fresh folder
    at an earlier moment, drawn from the time that attempt took; a few times at most."""
    server = subprocess.Popen([sys.executable, str(HERE / "kill_worker.py"), "--serve"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    limit = process_timeout(120)
    epochs = int(TRAIN[TRAIN.index("--epochs") + 1])

    def attempt(run: Path, kill_at: int, seconds: float | None) -> tuple[int, float]:
        """The attempt's exit code (-9: killed) and how long it lived; one not to be killed must end in time."""
        resume = ["--resume"] if (run / "config.json").is_file() else []
        server.stdin.write(json.dumps([kill_at, seconds or limit, str(tmp_path / "stderr"),
                                       [*TRAIN, "--out", str(run), *resume]]) + "\n")
        server.stdin.flush()
        answer = server.stdout.readline()
        assert answer, f"the server ended: {server.wait()}"
        ended = json.loads(answer)
        assert seconds is not None or ended["seconds"] < limit, f"a run ran past {limit:.0f} s"
        assert ended["code"] in (0, -signal.SIGKILL), (tmp_path / "stderr").read_text()[-2000:]
        return ended["code"], ended["seconds"]

    try:
        reference = tmp_path / "reference"
        code, whole = attempt(reference, 0, None)
        assert code == 0
        pace, rng = whole, random.Random(0)  # (pace: how long a whole run takes at most, as seen so far)

        def moment(left: float, earlier: float = 1.0) -> float:
            """A random moment in an attempt with the share ``left`` of the run's epochs to train (at least
            one epoch's: its start and last writes): u / 4 of that share of a whole run's time after the
            start, u uniform in [0.5, 4], times ``earlier``."""
            return rng.uniform(0.5, 4.0) / 4.0 * pace * max(left, 1 / epochs) * earlier

        # the first attempt kills itself inside its 1st, 2nd (the first checkpoint), 5th or 9th write, or is
        # killed at a random moment; the next ones are killed at random moments, twice, then run to the end.
        plans = [1, 2, 5, 9, 0, 0, 0, 0]
        killed, missed = [0] * len(plans), 0
        for number, kill_at in enumerate(plans):
            run, left, later, tries = tmp_path / f"run{number}", 1.0, 2, 1  # (left: the share of epochs to train)
            delay = None if kill_at else moment(left)
            while True:
                code, lived = attempt(run, kill_at, delay)
                if code == -signal.SIGKILL:
                    killed[number] += 1
                    left = 1 - _epochs_saved(run) / epochs
                    kill_at, delay, later = 0, moment(left) if later else None, later - 1
                    continue
                if left:  # (it trained that share of the epochs in this time: a whole run takes no longer now)
                    pace = min(pace, lived / left)
                if killed[number] or kill_at:
                    break
                # The first attempt ended before its random moment: a whole run, never interrupted (the
                # reference's result too), faster than the one the moment was drawn from. Start it again in a
                # fresh folder, at a moment in the first 80%, 64%, 51% of that run's time.
                assert _metrics(run) == _metrics(reference), number
                assert tries <= 3, (f"run {number}: its first attempt ended before its random moment {tries} "
                                    f"times (the last {delay:.2f} s, after {lived:.2f} s): the machine's pace "
                                    f"changed more than this test allows for")
                missed += 1
                run, delay, tries = tmp_path / f"run{number}-{tries}", moment(1.0, 0.8 ** tries), tries + 1
            assert killed[number], (f"run {number} ended without being killed in its write {kill_at}: a run "
                                     f"writes fewer files than that now")
            assert _metrics(run) == _metrics(reference), number
            assert (run / "model.pt").read_bytes() == (reference / "model.pt").read_bytes(), number
            assert not list(run.glob("*.tmp"))
    finally:
        server.stdin.close()
        server.wait(timeout=process_timeout(30))
    print(f"{sum(killed)} kills over {len(plans)} runs ({killed}; {missed} first attempts started again, "
          f"ended before their moment); a whole run took {whole:.1f} s, lately {pace:.1f} s; every run resumed to "
          f"the uninterrupted result")


def test_a_run_that_diverges_from_the_start_exits_with_an_error_and_no_results(tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*TRAIN, "--lr", "1e6", "--epochs", "3", "--out", str(run)]) == 1
    error = capsys.readouterr().err
    assert "epoch 1 ended with" in error and "training diverged" in error and "no epoch before it was saved" in error
    assert "--lr" in error and "--nonfinite skip" in error
    assert not (run / "results.json").exists() and not (run / "checkpoint.pt").exists()


class Poisoned:
    """A classification task whose training loss turns NaN in the chosen epochs (every step, or every
    third), as a run that diverges does."""

    def __new__(cls, data, epochs, every=1):
        from highwaynet.training import ClassificationTask

        class Task(ClassificationTask):
            epoch, calls = 0, 0

            def batches(self, split, epoch):
                if split == "train":
                    Task.epoch = epoch + 1
                return super().batches(split, epoch)

            def step(self, model, batch):
                loss, stats = super().step(model, batch)
                if model.training and Task.epoch in epochs:
                    Task.calls += 1
                    if Task.calls % every == 0:
                        loss = loss * float("nan")
                return loss, stats

        return Task(data, 50)


def _digits():
    from highwaynet.data import load_digits
    from highwaynet.models import HighwayMLP

    data = load_digits(max_train=300)
    return data, HighwayMLP(data.in_features, 10, 3, 16)


def test_a_run_that_diverges_stops_and_keeps_its_last_good_checkpoint(tmp_path):
    from highwaynet.config import TrainConfig
    from highwaynet.training import Trainer, TrainingDiverged

    data, model = _digits()
    trainer = Trainer(model, Poisoned(data, {3}), TrainConfig(epochs=4, lr=0.1), tmp_path, progress=False)
    with pytest.raises(TrainingDiverged, match=r"epoch 3 ended with train_loss nan.*holds epoch 2, the last good one"):
        trainer.fit()
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["epoch"] == 2
    assert [m["epoch"] for m in _metrics(tmp_path)] == [1, 2]


def test_skipping_non_finite_steps_leaves_them_out_and_counts_them(tmp_path):
    """nonfinite="skip": a step whose gradients are not finite is not applied (the weights stay finite),
    and each epoch's metrics count such steps."""
    from highwaynet.config import TrainConfig
    from highwaynet.training import Trainer

    data, model = _digits()
    history = Trainer(model, Poisoned(data, {1, 2}, every=3), TrainConfig(epochs=2, lr=0.1, nonfinite="skip"),
                      tmp_path, progress=False).fit()
    assert [m["skipped"] for m in history] == [2, 2]  # 6 steps an epoch, every third poisoned
    assert all(torch.isfinite(p).all() for p in model.parameters())
    with pytest.raises(ValueError, match="must be one of 'stop', 'skip', 'record'"):
        TrainConfig(nonfinite="ignore")


def test_a_diverged_rate_in_the_depth_search_ends_its_run_and_loses(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["reproduce", "depth", "--data", "digits", "--depths", "3", "--lrs", "1e30,0.1", "--seeds", "0",
                 "--epochs", "2", "--max-train", "200", "--device", "cpu", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert all(net["lr"] == 0.1 for net in summary["nets"])
    diverged = json.loads((out / "highway-3" / "lr1e+30-seed0" / "results.json").read_text())
    assert diverged["diverged"] == 1 and not math.isfinite(diverged["final"]["train_loss"])
    assert "run 2 of 4 (1 done, 3 to go" in capsys.readouterr().out  # the sweep's overall progress


def test_a_resumed_run_counts_the_time_of_its_earlier_sessions(tmp_path):
    run = tmp_path / "run"
    assert main([*TRAIN, "--epochs", "2", "--out", str(run)]) == 0
    results = json.loads((run / "results.json").read_text())
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    (run / "results.json").unlink()
    time.sleep(0.1)
    assert main([*TRAIN, "--out", str(run), "--resume"]) == 0  # nothing left to train: the time stays
    again = json.loads((run / "results.json").read_text())
    assert again["seconds"] >= state["seconds"] > 0
    assert again["seconds"] >= 0.5 * results["seconds"]


@pytest.mark.parametrize("bad, message", [
    ("--lr nan", "--lr must be a finite number, got nan"),
    ("--lr inf", "--lr must be a finite number, got inf"),
    ("--data-dir /nonexistent", "the data folder /nonexistent does not exist"),
])
def test_bad_options_are_refused_before_anything_runs(tmp_path, capsys, bad, message):
    assert main([*TRAIN, "--out", str(tmp_path / "run"), *bad.split()]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_a_label_only_the_test_file_has_is_refused_before_training(tmp_path, capsys):
    data = tmp_path / "mine"
    data.mkdir()
    (data / "train").write_text("".join(f"{i % 2} word{i} other\n" for i in range(40)))
    (data / "test").write_text("0 word1\n1 word2\n4 word3 other\n")
    assert main(["reproduce", "sentences", "--task", str(data), "--encoder", "cnn", "--seeds", "0",
                 "--out", str(tmp_path / "out")]) == 2
    assert f"{data / 'test'}, line 3: label 4 is not one of the training data's labels 0..1" in capsys.readouterr().err


def test_a_corpus_that_is_not_utf8_names_the_file_and_the_byte(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("train", "valid", "test"):
        (corpus / f"{name}.txt").write_bytes(b"the cat sat\non the mat\n" * 20)
    (corpus / "valid.txt").write_bytes(b"the cat\nsat on the m\xe4t\n")
    assert main(["train", "lm", "--corpus", str(corpus), "--level", "word", "--out", str(tmp_path / "run")]) == 2
    error = capsys.readouterr().err
    assert f"{corpus / 'valid.txt'} is not UTF-8 text: byte 20 (line 2)" in error


def test_data_files_found_on_disk_are_checked_once(shared_data, tmp_path, monkeypatch):
    from highwaynet.data import download, load_sentences

    folder = tmp_path / "sentence"
    folder.mkdir()
    for name in ("TREC.train.all", "TREC.test.all"):
        (folder / name).write_bytes((shared_data / "sentence" / name).read_bytes())
    calls = []
    real = download.check_sha256
    monkeypatch.setattr(download, "check_sha256", lambda *a, **k: calls.append(a[0].name) or real(*a, **k))
    load_sentences("trec", folder)
    load_sentences("trec", folder)
    assert sorted(calls) == ["TREC.test.all", "TREC.train.all"]  # the second load remembered them
    with open(folder / "TREC.test.all", "a") as f:
        f.write("0 an extra line\n")  # changed: checked again, and refused
    with pytest.raises(OSError, match=r"TREC.test.all does not match its sha256"):
        load_sentences("trec", folder)


def test_a_finished_study_run_again_keeps_its_wall_and_cpu_time(tmp_path):
    """The report of a finished study written again adds the new session's seconds to the summary's,
    CPU seconds too (0.4.0 kept only the last session's CPU time: a few seconds for a report)."""
    from highwaynet.training.run_dir import finish_sweep

    reports = []
    finish_sweep(tmp_path, {"seconds": 2500.0, "cpu_seconds": 4900.0}, lambda out, s: reports.append(s))
    again = finish_sweep(tmp_path, {"seconds": 12.5, "cpu_seconds": 15.5}, lambda out, s: reports.append(s))
    assert (again["seconds"], again["cpu_seconds"]) == (2512.5, 4915.5)
    assert json.loads((tmp_path / "summary.json").read_text())["cpu_seconds"] == 4915.5
    assert reports[-1]["cpu_seconds"] == 4915.5


def test_a_run_held_by_another_process_is_not_said_to_be_resumed(tmp_path):
    """A split sweep's run another process writes (it has a checkpoint): this process resumes nothing, so it
    says the run is held by that process, never "(resumed)", and leaves it to it for the sweep's end."""
    run = tmp_path / "run"
    with hold_run_dir(run):  # (the other process made it a run folder of highwaynet's, and saved an epoch)
        (run / "checkpoint.pt").write_bytes(b"the other process's")
    lock = take_lock(run / ".lock", RunFolderBusy)  # (a real flock, on a descriptor of its own: another holder)
    printed, progress = [], SweepProgress(1)
    try:
        assert run_once(run, lambda resume: pytest.fail("trained a run another process holds"), printed.append,
                        "highway 3, seed 0", progress=progress) is None
    finally:
        release_lock(lock)
    who = f"process {os.getpid()} on {socket.gethostname()}"
    assert printed == [f"{run}: highway 3, seed 0: held by another process ({who}), left to it: a sweep split over "
                       f"several processes; looked at again at the sweep's end"]
    assert progress.held == {run: who} and progress.done == 1
