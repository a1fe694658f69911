"""Run again = go on: every command that writes a run or a sweep folder continues its own folder when
run again with the same settings (an unfinished run resumed, finished runs skipped, the report written
again) and says so in one line; with other settings it is refused, naming each difference and the two
ways on (``--restart``, another ``--out``); ``--restart`` starts over on every command; ``--resume`` stays
an accepted spelling."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import process_timeout

from highwaynet.cli import main
from highwaynet.training import files

pytest.importorskip("sklearn", reason="the digits come with scikit-learn (the data extra)")

HERE = Path(__file__).resolve().parent
TRAIN = ["train", "mlp", "--data", "digits", "--depth", "2", "--width", "8", "--epochs", "2", "--max-train", "100",
         "--device", "cpu"]
# The depth study at its smallest: one depth, one rate, two seeds (4 runs of 2 epochs).
STUDY = ["reproduce", "depth", "--data", "digits", "--depths", "2", "--lrs", "0.1", "--seeds", "0,1", "--epochs", "2",
         "--max-train", "100", "--device", "cpu"]


def epochs_of(run: Path) -> list[int]:
    return [json.loads(line)["epoch"] for line in (run / "metrics.jsonl").read_text().splitlines()]


# -- train ---------------------------------------------------------------------------------------

def test_train_run_again_goes_on_and_says_so(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*TRAIN, "--epochs", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    # The same command again: the finished run trains no further, and says so in one line.
    assert main([*TRAIN, "--epochs", "1", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"{out} holds this run, finished after epoch 1: nothing left to train" in said
    assert "training a" not in said and epochs_of(out) == [1]
    # Other settings: refused, each difference named by its option, and both ways on.
    assert main([*TRAIN, "--epochs", "3", "--lr", "0.05", "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert f"{out} holds a run with other settings (--epochs 1 there, 3 asked; --lr 0.1 there, 0.05 asked)" in error
    assert "--restart" in error and "another --out" in error and "--resume" in error
    assert epochs_of(out) == [1]
    # --resume, the older spelling, goes on with the run's own settings, naming those it does not take by
    # their options, as the refusal does (it named the configuration's fields: train.epochs, train.lr)
    assert main([*TRAIN, "--epochs", "3", "--lr", "0.05", "--out", str(out), "--resume"]) == 0
    said = capsys.readouterr().out
    assert "not applied: --epochs 1 (asked 3), --lr 0.1 (asked 0.05)" in said and epochs_of(out) == [1]
    # --restart starts it over with the settings asked: another run.
    before = files.marker(out)["id"]
    assert main([*TRAIN, "--epochs", "3", "--out", str(out), "--restart"]) == 0
    assert "(started over: --restart)" in capsys.readouterr().out
    assert epochs_of(out) == [1, 2, 3] and files.marker(out)["id"] != before


def test_a_killed_training_run_again_resumes_it(tmp_path, capsys):
    out = tmp_path / "run"
    # killed in its 16th file write: epoch 2's best weights (epoch 1's checkpoint saved)
    worker = subprocess.run([sys.executable, str(HERE / "kill_worker.py"), "16", *TRAIN, "--out", str(out)],
                            capture_output=True, text=True, timeout=process_timeout(120))
    assert worker.returncode == -9, worker.stderr[-2000:]
    assert main([*TRAIN, "--out", str(out)]) == 0  # the same command, without --resume
    said = capsys.readouterr().out
    assert f"resumed {out} after epoch 1" in said and epochs_of(out) == [1, 2]
    assert (out / "results.json").is_file()


def test_trainer_fit_again_goes_on_and_restart_starts_over(tmp_path):
    from highwaynet.config import TrainConfig
    from highwaynet.data import load_digits
    from highwaynet.models import HighwayMLP
    from highwaynet.training import CheckpointMismatch, ClassificationTask, Trainer

    data = load_digits(max_train=100)

    def trainer(epochs: int, lr: float = 0.1) -> Trainer:
        torch.manual_seed(0)
        model = HighwayMLP(data.in_features, data.num_classes, 3, 8)
        return Trainer(model, ClassificationTask(data, 50), TrainConfig(epochs=epochs, lr=lr, device="cpu"),
                       tmp_path, progress=False, log=logged.append)

    logged: list[str] = []
    assert len(trainer(1).fit()) == 1
    assert [m["epoch"] for m in trainer(2).fit()] == [1, 2]  # fit again: goes on, no FileExistsError
    assert f"resumed {tmp_path} after epoch 1" in logged
    assert len(trainer(2).fit()) == 2 and logged[-1].endswith("nothing left to train")
    with pytest.raises(CheckpointMismatch, match=r"\(lr 0.1 then, 0.5 now\).*Trainer.fit\(restart=True\)"):
        trainer(2, lr=0.5).fit()
    assert [m["epoch"] for m in trainer(1, lr=0.5).fit(restart=True)] == [1]
    assert [json.loads(line)["epoch"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1]

    # The same Trainer again with restart: its model is trained, so it cannot start over, and the run stays.
    fitted = trainer(1, lr=0.5)
    fitted.fit()
    before = {name: (tmp_path / name).read_bytes() for name in ("metrics.jsonl", "checkpoint.pt", "model.pt")}
    with pytest.raises(ValueError, match=r"has been trained since .* make a new Trainer with a new model"):
        fitted.fit(restart=True)
    assert {name: (tmp_path / name).read_bytes() for name in before} == before



def test_a_checkpoint_that_does_not_fit_leaves_the_model_as_it_was_and_restart_starts_from_it(tmp_path):
    from highwaynet.config import TrainConfig
    from highwaynet.data import load_digits
    from highwaynet.models import HighwayMLP
    from highwaynet.training import CheckpointMismatch, ClassificationTask, Trainer

    data = load_digits(max_train=100)

    def trainer(depth: int, seed: int, folder) -> Trainer:
        torch.manual_seed(seed)
        return Trainer(HighwayMLP(data.in_features, data.num_classes, depth, 8), ClassificationTask(data, 50),
                       TrainConfig(epochs=1, lr=0.1, device="cpu"), folder, progress=False, log=lambda line: None)

    trainer(2, 0, tmp_path / "run").fit()
    deeper = trainer(3, 1, tmp_path / "run")  # (the model changed, the settings not)
    first = {k: v.clone() for k, v in deeper.model.state_dict().items()}
    with pytest.raises(CheckpointMismatch, match=r"does not fit the model .*Trainer.fit\(restart=True\)"):
        deeper.fit()
    assert all(torch.equal(first[k], v) for k, v in deeper.model.state_dict().items())  # (none of the old run's)
    without_time = [{k: v for k, v in m.items() if k != "time"} for m in deeper.fit(restart=True)]
    fresh = trainer(3, 1, tmp_path / "fresh").fit()
    assert without_time == [{k: v for k, v in m.items() if k != "time"} for m in fresh]


# -- reproduce -----------------------------------------------------------------------------------

def test_a_study_run_again_is_done_and_says_where_its_report_is(tmp_path, capsys):
    out = tmp_path / "study"
    assert main([*STUDY, "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    took = json.loads((out / "summary.json").read_text())["seconds"]
    capsys.readouterr()
    assert main([*STUDY, "--out", str(out)]) == 0  # pasted twice: exit 0
    assert json.loads((out / "summary.json").read_text())["seconds"] >= took > 0  # (its time kept, not 0 s)
    said = capsys.readouterr().out
    assert said.startswith(f"the study in {out} is done: its report is {out / 'report.md'}")
    assert said.count("done, skipped") == 4 and "(resumed)" not in said
    assert (out / "report.md").read_text().split("Total time")[1].split("\n", 1)[1] == \
        report.split("Total time")[1].split("\n", 1)[1]  # the same report (but for the time taken)


def test_a_study_with_other_settings_is_refused_or_goes_on_with_its_own(tmp_path, capsys):
    out = tmp_path / "study"
    assert main([*STUDY, "--out", str(out)]) == 0
    sweep = (out / "sweep.json").read_text()
    capsys.readouterr()
    other = [*STUDY[:5], "2,3", *STUDY[6:11], "1", *STUDY[12:], "--out", str(out)]  # --depths 2,3, --epochs 1
    assert main(other) == 2
    error = capsys.readouterr().err
    assert f"{out} holds a study with other settings (--depths [2] there, [2, 3] asked; --epochs 2 there, 1 asked)" \
        in error and "--restart" in error and "another --out" in error
    assert (out / "sweep.json").read_text() == sweep and not (out / "highway-3").exists()
    # --resume: the study goes on with its own settings, and its files say so truthfully.
    assert main([*other, "--resume"]) == 0
    said = capsys.readouterr().out
    assert "--resume goes on with its own; not applied: --depths [2] (asked [2, 3]), --epochs 2 (asked 1)" in said
    assert (out / "sweep.json").read_text() == sweep and not (out / "highway-3").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["depths"] == [2] and summary["config"]["epochs"] == 2
    assert "# Plain vs highway networks at 2 layers" in (out / "report.md").read_text()


def test_a_study_whose_sweep_json_names_an_unknown_setting_is_refused_naming_it(tmp_path, capsys):
    """sweep.json edited to hold settings this version does not have (at the top, or nested) is not taken
    as the same study (the comparison reads only the settings both hold): refused, naming the file and
    each key, with the ways on; the key removed, the study goes on."""
    out = tmp_path / "study"
    assert main([*STUDY, "--out", str(out)]) == 0
    sweep = (out / "sweep.json").read_text()
    record = json.loads(sweep)
    record["config"]["widths"] = [8, 16]
    record["config"]["schedule"] = {"warmup": 5}
    (out / "sweep.json").write_text(json.dumps(record, indent=2))
    capsys.readouterr()
    for extra in ([], ["--resume"]):
        assert main([*STUDY, "--out", str(out), *extra]) == 2
        error = capsys.readouterr().err
        assert f"{out / 'sweep.json'} holds 'widths', 'schedule.warmup', not settings of this study in highwaynet " \
               in error and "Remove them from the file to go on with the study, or pass another --out" in error
    (out / "sweep.json").write_text(sweep)
    assert main([*STUDY, "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"the study in {out} is done")


def test_restart_starts_a_study_over_keeping_the_users_files(tmp_path, capsys):
    out = tmp_path / "study"
    assert main([*STUDY, "--out", str(out)]) == 0
    run = out / "highway-2" / "lr0.1-seed0"
    (out / "notes.md").write_text("mine\n")
    (run / "notes.md").write_text("mine too\n")
    assert main(["reproduce", "gates", str(run)]) == 0  # (an analysis of a run's weights goes with them)
    old = files.marker(run)["id"]
    other = [*STUDY[:11], "1", *STUDY[12:], "--out", str(out)]  # --epochs 1
    assert main([*other, "--restart"]) == 0
    said = capsys.readouterr().out
    assert f"starting the study in {out} over" in said and "done, skipped" not in said
    assert (out / "notes.md").read_text() == "mine\n" and (run / "notes.md").read_text() == "mine too\n"
    assert not (run / "gates").exists()
    assert files.marker(run)["id"] != old and epochs_of(run) == [1]
    assert json.loads((out / "sweep.json").read_text())["config"]["epochs"] == 1


def test_a_killed_study_run_again_finishes_as_if_never_killed(tmp_path, capsys):
    reference, out = tmp_path / "reference", tmp_path / "study"
    assert main([*STUDY, "--out", str(reference)]) == 0
    # killed in its 40th file write (the second run's epoch 2, its epoch 1 saved), then run again as it was
    worker = subprocess.run([sys.executable, str(HERE / "kill_worker.py"), "40", *STUDY, "--out", str(out)],
                            capture_output=True, text=True, timeout=process_timeout(180))
    assert worker.returncode == -9, worker.stderr[-2000:]
    assert not (out / "summary.json").exists()
    capsys.readouterr()
    assert main([*STUDY, "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"{out} holds this study, unfinished (1 run done so far): going on where it stopped")
    assert "lr0.1-seed1: plain 2: lr 0.1, seed 1 (resumed)" in said and "after epoch 1" in said
    for run in ("plain-2/lr0.1-seed0", "plain-2/lr0.1-seed1", "highway-2/lr0.1-seed0", "highway-2/lr0.1-seed1"):
        ours, theirs = out / run, reference / run
        assert [{k: v for k, v in m.items() if k != "time"} for m in map(json.loads, (ours / "metrics.jsonl")
                                                                            .read_text().splitlines())] == \
            [{k: v for k, v in m.items() if k != "time"} for m in map(json.loads, (theirs / "metrics.jsonl")
                                                                        .read_text().splitlines())], run
    assert [n["test_acc"] for n in json.loads((out / "summary.json").read_text())["nets"]] == \
        [n["test_acc"] for n in json.loads((reference / "summary.json").read_text())["nets"]]


def test_every_train_and_reproduce_command_has_restart():
    from highwaynet.cli import REPRODUCE_RECIPES, TRAIN_RECIPES, build_parser

    parser = build_parser()
    for command, recipes in (("train", TRAIN_RECIPES), ("reproduce", REPRODUCE_RECIPES)):
        for recipe in recipes:
            args = parser.parse_args([command, recipe.name, "--restart"])
            assert args.restart, (command, recipe.name)
    for analysis in ("gates", "lesion"):
        assert parser.parse_args(["reproduce", analysis, "RUN", "--restart"]).restart


# -- labels and messages (issue 56, classes 3 and 4) ----------------------------------------------

def test_a_transformer_language_model_is_called_one(tmp_path, capsys, monkeypatch, shared_data):
    monkeypatch.chdir(tmp_path)
    argv = ["train", "lm", "--model", "transformer", "--residual", "highway", "--layers", "2", "--hidden", "16",
            "--heads", "2", "--bptt", "16", "--epochs", "1", "--steps-per-epoch", "2", "--batch-size", "4",
            "--eval-windows", "1", "--device", "cpu", "--data-dir", str(shared_data / "text")]
    assert main(argv) == 0
    said = capsys.readouterr().out
    folder = "runs/lm-tinyshakespeare-char-transformer-pre-highway-2-seed0"
    assert said.startswith("training a 2-block pre-LN highway Transformer language model on tinyshakespeare "
                           f"(char level); run folder: {folder}")
    assert (tmp_path / folder / "results.json").is_file()
    # An LSTM of the same corpus and seed gets its own folder (it collided with the Transformer's).
    assert main(["train", "lm", "--model", "lstm", "--hidden", "8", "--bptt", "16", "--epochs", "1",
                 "--steps-per-epoch", "2", "--batch-size", "4", "--eval-windows", "1", "--device", "cpu",
                 "--data-dir", str(shared_data / "text")]) == 0
    assert capsys.readouterr().out.startswith("training an LSTM language model on tinyshakespeare (char level); run "
                                              "folder: runs/lm-tinyshakespeare-char-lstm-seed0")
    assert (tmp_path / "runs/lm-tinyshakespeare-char-lstm-seed0/results.json").is_file()


def test_character_samples_hold_only_characters_of_the_corpus(tmp_path):
    from highwaynet.data.corpora import Corpus
    from highwaynet.models import LSTMLanguageModel
    from highwaynet.recipes import lm

    vocab = ["<unk>", "a", "b"]
    empty = torch.zeros(0, dtype=torch.long)
    corpus = Corpus("ab", "char", vocab, empty, empty, empty)
    torch.manual_seed(0)
    model = LSTMLanguageModel(3, 8, 1)
    with torch.no_grad():  # a model that likes <unk> best: drawn at once, were it allowed
        model.decoder.bias.copy_(torch.tensor([5.0, 0.0, 0.0]))
    text = lm.sample(model, corpus, "a", 300, 1.0, seed=0)
    assert "<unk>" not in text and set(text) <= {"a", "b"} and len(text) == 301
    assert "<unk>" in lm.sample(model, Corpus("ab", "word", vocab, empty, empty, empty), "a", 20, 1.0)


def test_options_and_files_to_change_are_named_and_no_folder_is_left(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split in ("train", "valid"):
        (corpus / f"{split}.txt").write_text("the cat sat on the mat\n" * 50)
    (corpus / "test.txt").write_text("")
    lm = ["train", "lm", "--corpus", str(corpus), "--level", "word", "--epochs", "1", "--device", "cpu"]
    cases = [
        ([*lm, "--out", str(tmp_path / "a")], f"{corpus / 'test.txt'} is empty"),
        ([*TRAIN, "--seed", "99999999999999999999", "--out", str(tmp_path / "b")],
         "--seed must be below 4294967296, got 99999999999999999999"),
        ([*STUDY, "--seeds", "0,99999999999999999999", "--out", str(tmp_path / "c")], "--seeds must be below"),
        (["train", "mlp", "--data", "mnist5k", "--data-dir", str(corpus / "train.txt"), "--out", str(tmp_path / "d")],
         f"the data folder {corpus / 'train.txt'} is a file, not a folder: pass to --data-dir the folder"),
        ([*STUDY[:3], "mnist5k", *STUDY[4:], "--data-dir", str(corpus / "train.txt"), "--out", str(tmp_path / "e")],
         "is a file, not a folder"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        assert message in capsys.readouterr().err, argv
    (corpus / "test.txt").write_text("the cat\n")  # 3 tokens: too few for 64 streams
    assert main([*lm, "--out", str(tmp_path / "f")]) == 2
    error = capsys.readouterr().err
    assert "the test split of corpus 'corpus' (test.txt in a corpus folder) holds 3 tokens, too few for 64 " \
           "streams" in error and "--eval-batch-size 1 or less" in error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]  # no folder left behind
    with pytest.raises(SystemExit):
        main(["generate", str(tmp_path), "--seed", "99999999999999999999"])
    assert "--seed: must be at least 0 and below 4294967296" in capsys.readouterr().err


@pytest.mark.parametrize("edit", [[], {"test": "x"}, {"final": {}, "test": {"acc": 1}}, "not JSON"])
def test_a_study_rereads_an_edited_results_file_by_running_its_run_again(tmp_path, capsys, edit):
    out = tmp_path / "study"
    assert main([*STUDY, "--seeds", "0", "--out", str(out)]) == 0
    results = out / "highway-2" / "lr0.1-seed0" / "results.json"
    kept = json.loads(results.read_text())
    results.write_text(edit if isinstance(edit, str) else json.dumps(edit))
    capsys.readouterr()
    assert main([*STUDY, "--seeds", "0", "--out", str(out)]) == 0  # no KeyError: the run goes on, writes it again
    said = capsys.readouterr().out
    assert f"{results} is not the results its run wrote" in said and "highway 2: lr 0.1, seed 0 (resumed)" in said
    assert json.loads(results.read_text())["test"] == kept["test"]
