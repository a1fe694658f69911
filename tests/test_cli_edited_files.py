"""A careless user's command line and files: a path with ``~``, an empty one, a run folder's files edited
by hand, a damaged record of verified data files, an options file of the wrong shape. Each is a clear
message naming what is wrong (or is taken as meant), never a traceback."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import SHARED_DATA

from highwaynet.cli import main, parse
from highwaynet.data import download
from highwaynet.data.download import DataFile, locate, sha256_of
from highwaynet.elmo import files as elmo_files
from highwaynet.training import files
from highwaynet.training.checkpoint import CorruptCheckpoint, read_checkpoint
from highwaynet.training.run_dir import read_results

TRAIN = ["train", "mlp", "--data", "digits", "--depth", "2", "--width", "8", "--epochs", "2", "--max-train", "100",
         "--device", "cpu"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished two-epoch run folder (copied by each test that edits it)."""
    out = tmp_path_factory.mktemp("trained") / "run"
    assert main([*TRAIN, "--out", str(out)]) == 0
    return out


def copy_run(trained: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    out.mkdir(parents=True)
    for path in trained.iterdir():  # (plain files only: the marker, config, metrics, checkpoints, results)
        (out / path.name).write_bytes(path.read_bytes())
    return out


# -- paths on the command line ------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    [*TRAIN, "--out", "~/runs/x", "--data-dir", "~/data"],
    ["reproduce", "gates", "~/runs/x", "--out", "~/gates", "--data-dir", "~/data"],
    ["generate", "~/runs/lm", "--data-dir", "~/data"],
    ["predict", "~/runs/s", "a sentence"],
    ["report", "~/runs/x", "~/runs/y"],
    ["elmo", "embed", "--options", "~/o.json", "--weights", "~/w.hdf5", "--input", "~/in.txt", "--out", "~/v.hdf5",
     "--data-dir", "~/data"],
])
def test_a_tilde_in_a_path_option_is_the_home_folder(argv, monkeypatch, tmp_path):
    # (`--out=~/runs` and a quoted "~/runs" reach the command unexpanded: a folder named "~" must not be made)
    monkeypatch.setenv("HOME", str(tmp_path))
    args, _ = parse(argv)
    given = [v for key, v in vars(args).items() if key in ("out", "data_dir", "run_dir", "options_file",
                                                             "weights_file", "input")]
    given += getattr(args, "folders", [])
    assert given and all(isinstance(v, str) and v.startswith(str(tmp_path)) and "~" not in v for v in given)


@pytest.mark.parametrize("argv, option", [
    ([*TRAIN, "--out", ""], "--out"),
    ([*TRAIN, "--data-dir", " "], "--data-dir"),
    (["report", ""], "FOLDER"),
    (["elmo", "embed", "--model", "small", "--input", "", "--out", "v.hdf5"], "--input"),
])
def test_an_empty_path_is_refused_naming_the_option(argv, option, capsys):
    # (an empty --out used to fall back silently to the default run folder)
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    error = capsys.readouterr().err
    assert f"argument {option}" in error and "must be a path" in error and "Traceback" not in error


def test_the_data_folder_variable_takes_a_tilde(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HIGHWAYNET_DATA", "~/data")
    assert download.default_data_dir() == tmp_path / "data"


# -- a run folder's files edited by hand ----------------------------------------------------------

@pytest.mark.parametrize("config", ['{"recipe": "mlp", "config": "x"}', '{"recipe": "mlp", "config": {"train": 5}}'])
def test_report_of_a_run_whose_config_json_was_edited_is_written(trained, tmp_path, config, capsys):
    out = copy_run(trained, tmp_path)
    (out / "config.json").write_text(config)
    assert main(["report", str(out)]) == 0, capsys.readouterr().err
    assert "The best epoch by val_loss" in (out / "report.md").read_text()


@pytest.mark.parametrize("line, lacks", [(1, "lr"), (2, "train_loss"), (2, "val_acc")])
def test_a_metrics_line_without_a_metric_is_named_not_a_traceback(trained, tmp_path, capsys, line, lacks):
    out = copy_run(trained, tmp_path)
    rows = [json.loads(text) for text in (out / "metrics.jsonl").read_text().splitlines()]
    del rows[line - 1][lacks]
    (out / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main(["report", str(out)]) == 2
    error = capsys.readouterr().err
    assert f"metrics.jsonl, line {line}: not a line of metrics" in error and "--restart" in error
    assert lacks in error if lacks != "lr" else "an epoch's numbers" in error


@pytest.mark.parametrize("keep", [1, 2])  # (2: the last line cut short, as a kill leaves it, but a line too few)
def test_a_metrics_file_cut_short_is_named_not_rewritten_without_its_epochs(trained, tmp_path, capsys, keep):
    out = copy_run(trained, tmp_path)
    data = (out / "metrics.jsonl").read_bytes()
    cut = data[:data.index(b"\n") + 1] if keep == 1 else data[:-20]
    (out / "metrics.jsonl").write_bytes(cut)
    assert main([*TRAIN, "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert "metrics.jsonl holds the metrics of epochs [1], not of the 2 epochs" in error and "--restart" in error
    assert (out / "metrics.jsonl").read_bytes() == cut  # (not rewritten: the epochs it lacks are not lost for good)


@pytest.mark.parametrize("device", ["garbage", 5, ""])
def test_a_checkpoint_naming_no_device_is_damaged(trained, tmp_path, device):
    path = tmp_path / "checkpoint.pt"
    state = torch.load(trained / "checkpoint.pt", weights_only=True)
    torch.save({**state, "device": device}, path)
    with pytest.raises(CorruptCheckpoint, match=r"its device is .*edited or damaged"):
        read_checkpoint(path, None)


def test_resuming_from_a_checkpoint_naming_no_device_says_it_is_damaged(trained, tmp_path, capsys):
    out = copy_run(trained, tmp_path)
    (out / "results.json").unlink()  # (an unfinished run: it resumes from its checkpoint)
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    torch.save({**state, "device": "garbage"}, out / "checkpoint.pt")
    assert main([*TRAIN, "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert "its device is 'garbage'" in error and "--restart" in error


# -- files read from elsewhere --------------------------------------------------------------------

@pytest.mark.parametrize("record", ["[1, 2]", '"x"', "3", "null", "[" * 100_000 + "]" * 100_000])  # (a RecursionError)
def test_a_damaged_record_of_verified_files_is_checked_again(tmp_path, monkeypatch, record):
    monkeypatch.setenv("HIGHWAYNET_DATA", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "verified.json").write_text(record)
    data = tmp_path / "data" / "file.txt"
    data.parent.mkdir()
    data.write_text("published\n")
    file = DataFile("file.txt", None, sha256_of(data))
    assert locate(file, [data.parent], download=False, hint="") == data
    verified = json.loads((tmp_path / "cache" / "verified.json").read_text())
    assert verified[str(data.resolve())][2] == file.sha256  # (written anew, this file in it)


@pytest.mark.parametrize("section", ["lstm", "char_cnn"])
@pytest.mark.parametrize("value", [5, "x", [1], None])
def test_an_options_section_that_is_not_an_object_is_named(tmp_path, section, value):
    from elmo_reference import options

    path = tmp_path / "options.json"
    path.write_text(json.dumps({**options(), section: value}))
    with pytest.raises(ValueError, match=rf"the options' '{section}' section must be a JSON object"):
        elmo_files.read_options(path)


def test_a_run_given_an_analysis_folder_names_it_in_english(trained, tmp_path, capsys):
    analysis = tmp_path / "gates"
    assert main(["reproduce", "gates", str(trained), "--out", str(analysis)]) == 0
    capsys.readouterr()
    assert main([*TRAIN, "--out", str(analysis)]) == 2
    assert f"{analysis} is an analysis folder of highwaynet's, not one for a run" in capsys.readouterr().err


# -- generate: its temperature and a run's vocabulary -----------------------------------------------

def test_an_infinite_temperature_is_refused_and_a_tiny_one_is_greedy():
    from highwaynet.models import RHNLanguageModel
    from highwaynet.models.lm import generate

    torch.manual_seed(0)
    model = RHNLanguageModel(20, 16, depth=2)
    prompt = torch.tensor([1, 2, 3])
    with pytest.raises(ValueError, match="temperature must be 0 .greedy. or positive, and finite, got inf"):
        generate(model, prompt, 5, float("inf"))
    for tiny in (1e-30, 1e-300, 5e-324):  # (logits / temperature overflow float32: it was a multinomial error)
        assert torch.equal(generate(model, prompt, 6, tiny, torch.Generator().manual_seed(1)),
                           generate(model, prompt, 6, 0.0))


@pytest.fixture(scope="module")
def language_model(tmp_path_factory) -> Path:
    """A tiny character-level LSTM run folder, trained two steps on a corpus folder of its own."""
    text = SHARED_DATA / "text" / "tinyshakespeare.txt"
    if not text.is_file():
        pytest.skip(f"{text} is not here")
    corpus = tmp_path_factory.mktemp("corpus")
    data = text.read_text()[:3000]
    for name, part in (("train.txt", data), ("valid.txt", data[:400]), ("test.txt", data[400:800])):
        (corpus / name).write_text(part)
    out = corpus.parent / "lm"
    assert main(["train", "lm", "--corpus", str(corpus), "--model", "lstm", "--hidden", "8", "--epochs", "1",
                 "--steps-per-epoch", "2", "--bptt", "8", "--batch-size", "2", "--eval-windows", "1", "--device",
                 "cpu", "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("edit, words", [
    (lambda v: v.update(level="word"), "its level is 'word', the run's 'char'"),
    (lambda v: v["vocab"].__setitem__(1, v["vocab"][2]), "it lists a token more than once"),
])
def test_generate_refuses_a_vocabulary_that_is_not_its_run_s(language_model, tmp_path, capsys, edit, words):
    out = copy_run(language_model, tmp_path)
    vocab = json.loads((out / "vocab.json").read_text())
    assert main(["generate", str(out), "--length", "3"]) == 0
    edit(vocab)
    (out / "vocab.json").write_text(json.dumps(vocab))
    capsys.readouterr()
    assert main(["generate", str(out), "--length", "3"]) == 2
    error = capsys.readouterr().err
    assert f"vocab.json is not the vocabulary this run wrote ({words})" in error


# -- predict: its sentences and a run's vocabulary --------------------------------------------------

def sentence_sweep(data: Path, out: Path) -> list[str]:
    return ["reproduce", "sentences", "--task", str(data), "--encoder", "cnn", "--layers", "1", "--seeds", "0",
            "--epochs", "1", "--device", "cpu", "--out", str(out)]


@pytest.fixture(scope="module")
def sentence_run(tmp_path_factory) -> Path:
    """A sentence classifier's run folder (Kim's CNN, one epoch on a tiny set of its own)."""
    data = tmp_path_factory.mktemp("sentences")
    (data / "train").write_text("".join(f"{i % 2} word{i % 5} thing {i}\n" for i in range(30)))
    (data / "test").write_text("".join(f"{i % 2} word{i % 3} {i}\n" for i in range(10)))
    out = data.parent / "sweep"
    assert main(sentence_sweep(data, out)) == 0
    (run,) = [path.parent for path in out.glob("*/*/*/config.json")]
    return run


@pytest.mark.parametrize("edit, words", [
    (lambda v: v["vocab"].__setitem__(3, v["vocab"][2]), "it lists a word more than once"),
    (lambda v: v["vocab"].__setitem__(0, "zz"), "its words do not start with '<pad>' and '<unk>'"),
    (lambda v: v.update(num_classes=True), "its num_classes is True"),
    (lambda v: v.update(num_classes=1), "its num_classes is 1"),
    (lambda v: v.update(num_words=10**30), "its num_words is 10000"),
    (lambda v: v["vocab"].pop(), "its num_words is"),
])
def test_predict_refuses_a_vocabulary_that_is_not_its_run_s(sentence_run, tmp_path, capsys, edit, words):
    out = copy_run(sentence_run, tmp_path)
    vocab = json.loads((out / "vocab.json").read_text())
    assert main(["predict", str(out), "word1 thing"]) == 0
    edit(vocab)
    (out / "vocab.json").write_text(json.dumps(vocab))
    capsys.readouterr()
    assert main(["predict", str(out), "word1 thing"]) == 2
    error = capsys.readouterr().err
    assert f"vocab.json is not the vocabulary this run wrote ({words}" in error and "put back" in error


@pytest.mark.parametrize("sentences", [[""], ["a sentence", "  "]])
def test_predict_refuses_an_empty_sentence_naming_it(sentence_run, capsys, sentences):
    assert main(["predict", str(sentence_run), *sentences]) == 2
    assert f"sentence {len(sentences)} is empty" in capsys.readouterr().err


# -- a finished run's results.json, edited: the sweep that reads it back ----------------------------------

@pytest.mark.parametrize("edit", [lambda r: r["test"].update(acc="x"), lambda r: r["test"].pop("acc"),
                                  lambda r: r["test"].update(loss=True)])
def test_a_sweep_whose_run_s_results_were_edited_runs_it_again(sentence_run, tmp_path, capsys, edit):
    sweep = tmp_path / "sweep"
    shutil.copytree(sentence_run.parents[2], sweep)
    data = json.loads((sweep / "sweep.json").read_text())["config"]["tasks"][0]
    run = sweep / sentence_run.relative_to(sentence_run.parents[2])
    results = json.loads((run / "results.json").read_text())
    edit(results)
    (run / "results.json").write_text(json.dumps(results))
    assert main(sentence_sweep(Path(data), sweep)) == 0  # (it was a TypeError or a KeyError traceback)
    assert f"{run / 'results.json'} is not the results its run wrote" in capsys.readouterr().out
    again = json.loads((run / "results.json").read_text())
    assert isinstance(again["test"]["acc"], float) and isinstance(again["test"]["loss"], float)


def test_read_results_takes_what_each_recipe_writes_and_nothing_else(trained, language_model, tmp_path):
    for folder, edits in ((trained, [("final", "train_loss"), ("test", "acc"), ("test", "loss")]),
                          (language_model, [("final", "val_bpc"), ("test", "bpc"), ("test", "loss")])):
        out = copy_run(folder, tmp_path / folder.name)
        written = json.loads((out / "results.json").read_text())
        assert read_results(out) == written
        written["test"]["loss"] = float("nan")  # (a diverged run's result: a number still)
        (out / "results.json").write_text(json.dumps(written))
        assert read_results(out) is not None
        for entry, key in edits:
            for value in (None, "1.0", False):
                edited = json.loads(json.dumps(written))
                edited[entry][key] = value
                (out / "results.json").write_text(json.dumps(edited))
                assert read_results(out) is None, (entry, key, value)
            del edited[entry][key]
            (out / "results.json").write_text(json.dumps(edited))
            assert read_results(out) is None, (entry, key)


def test_one_analysis_folder_does_not_take_the_other_analysis(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    assert main(["reproduce", "gates", str(run)]) == 0
    kept = (run / "gates" / "report.md").read_bytes()
    capsys.readouterr()
    assert main(["reproduce", "lesion", str(run), "--out", str(run / "gates")]) == 2  # (its report.md went)
    error = capsys.readouterr().err
    assert f"{run / 'gates'} holds the gates' analysis (gates.json)" in error and "another --out" in error
    assert (run / "gates" / "report.md").read_bytes() == kept and not (run / "gates" / "lesion.json").exists()
    assert main(["reproduce", "lesion", str(run), "--out", str(run / "gates"), "--restart"]) == 0
    assert sorted(p.name for p in (run / "gates").iterdir() if not p.name.startswith(".")) == \
        ["lesion.json", "lesion.png", "report.md"]


def test_an_analysis_of_a_run_does_not_take_a_choice_among_sweeps_folder(trained, tmp_path, capsys):
    """A setting chosen among sweeps (``reproduce sentences --choose-from``) is an analysis folder too, holding
    summary.json and report.md: the gates' analysis and the lesion study refuse it as they refuse each other's,
    rather than writing their report.md over the choice's (files.ANALYSES names all three)."""
    run = copy_run(trained, tmp_path)
    choice = tmp_path / "choice"
    files.claim(choice, "analysis", "the setting chosen among sweeps")
    files.write_text(choice / "summary.json", '{"recipe": "sentences-choice"}\n')
    files.write_text(choice / "report.md", "the choice's report\n")
    for analysis in ("gates", "lesion"):
        assert main(["reproduce", analysis, str(run), "--out", str(choice)]) == 2
        error = capsys.readouterr().err
        assert f"{choice} holds the setting chosen among sweeps (summary.json)" in error
        assert "another --out" in error and "--restart" in error
    assert (choice / "report.md").read_text() == "the choice's report\n"
    assert sorted(p.name for p in choice.iterdir() if not p.name.startswith(".")) == ["report.md", "summary.json"]


def test_the_folders_named_in_settings_take_a_tilde(monkeypatch, tmp_path):
    """``--corpus``, ``--task`` and ``--vectors`` are settings, not options typed as paths: their
    loaders take ``~`` as the home folder themselves."""
    from highwaynet.data import load_corpus, load_sentences
    from highwaynet.models.sentence import load_word_vectors

    monkeypatch.setenv("HOME", str(tmp_path))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split in ("train", "valid", "test"):
        (corpus / f"{split}.txt").write_text("the cat sat on the mat . " * 20 + "\n")
    assert load_corpus("~/corpus", level="word").vocab
    sentences = tmp_path / "sentences"
    sentences.mkdir()
    for split in ("train", "test"):
        (sentences / split).write_text("".join(f"{i % 2} a sentence number {i}\n" for i in range(20)))
    assert load_sentences("~/sentences").num_classes == 2
    (tmp_path / "vectors.txt").write_text("sentence 0.5 0.25\n")
    embedding = torch.nn.Embedding(3, 2)
    assert load_word_vectors("~/vectors.txt", ["<pad>", "<unk>", "sentence"], embedding) == 1
    assert embedding.weight[2].tolist() == [0.5, 0.25]
