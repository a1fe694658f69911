import dataclasses
import json
import os
import socket
import warnings

import pytest
import torch

from highwaynet.cli import main
from highwaynet.data import sentences as sentence_files
from highwaynet.data.sentences import load_sentences
from highwaynet.models.sentence import ENCODERS, SentenceClassifier, load_word_vectors
from highwaynet.recipes import sentences
from highwaynet.training import TrainConfig
from highwaynet.training.run_dir import (
    RunFolderBusy,
    count,
    format_mean_std,
    load_run_config,
    release_lock,
    start_sweep,
    take_lock,
)


@pytest.mark.parametrize("encoder", ENCODERS)
def test_padding_never_changes_a_sentence(encoder):
    torch.manual_seed(0)
    model = SentenceClassifier(30, 3, encoder=encoder, embed_dim=8, hidden_size=4, num_layers=2, feature_maps=5).eval()
    lengths = torch.tensor([2, 7, 4])
    tokens = torch.randint(2, 30, (3, 7)) * (torch.arange(7)[None] < lengths[:, None])
    logits = model(tokens, lengths)
    assert logits.shape == (3, 3)
    wider = torch.cat([tokens, torch.zeros(3, 5, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(wider, lengths), logits)
    for b, n in enumerate(lengths.tolist()):
        alone = model(tokens[b:b + 1, :max(n, model.min_length)], lengths[b:b + 1])
        torch.testing.assert_close(alone[0], logits[b], rtol=1e-5, atol=1e-6)


def test_one_block_classifier_with_dropout_builds_no_layer_that_warns():
    # The default, one block and dropout 0.5: HighwayLSTM's dropout is between blocks (nn.LSTM's), which one
    # block has not; the classifier gives it none then, and keeps its own on the sentence vector.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = SentenceClassifier(30, 2)
    assert model.lstm.dropout_p == 0.0 and model.dropout.p == 0.5
    assert SentenceClassifier(30, 2, num_layers=2).lstm.dropout_p == 0.5


def test_encoder_choices():
    with pytest.raises(ValueError, match="unknown encoder 'gru'"):
        SentenceClassifier(10, 2, encoder="gru")
    cnn = SentenceClassifier(10, 2, encoder="cnn-highway")
    assert cnn.highway.num_layers == 2 and cnn.min_length == 5


def test_a_cnn_highway_encoder_without_highway_layers_is_refused_by_that_name():
    # (it was refused by Highway, as "num_layers must be positive": another of the model's arguments)
    with pytest.raises(ValueError, match="highway_layers must be positive for encoder 'cnn-highway'"):
        SentenceClassifier(9, 2, encoder="cnn-highway", highway_layers=0)
    assert SentenceClassifier(9, 2, encoder="cnn", highway_layers=0).highway is None  # (no highway layers to count)


def test_embed_dropout_drops_word_vectors_in_training_only():
    torch.manual_seed(0)
    model = SentenceClassifier(50, 3, encoder="cnn", embed_dim=64, feature_maps=5, embed_dropout=0.25)
    tokens, lengths = torch.randint(1, 50, (8, 9)), torch.full((8,), 9)
    seen = []
    model.convs[0].register_forward_pre_hook(lambda module, args: seen.append(args[0].transpose(1, 2)))
    words = model.embedding(tokens).detach()
    model.eval()
    torch.testing.assert_close(model(tokens, lengths), model(tokens, lengths))
    torch.testing.assert_close(seen[-1], words)
    model.train()
    model(tokens, lengths)
    kept = seen[-1] != 0
    assert 0.65 < kept.float().mean() < 0.85  # a quarter of the entries dropped
    torch.testing.assert_close(seen[-1][kept], words[kept] / 0.75)  # the rest scaled up


def test_load_word_vectors(tmp_path):
    path = tmp_path / "vectors.txt"
    path.write_text("3 2\nfilm 0.5 -1.0\nzzz 9 9\ngood 1 2\n")
    embedding = torch.nn.Embedding(4, 2)
    assert load_word_vectors(path, ["<pad>", "<unk>", "good", "film"], embedding) == 2
    assert embedding.weight[3].tolist() == [0.5, -1.0] and embedding.weight[2].tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="2 values, but the embedding has 3 dimensions"):
        load_word_vectors(path, ["film"], torch.nn.Embedding(1, 3))


@pytest.mark.slow
def test_sst2_hbilstm_beats_majority_class(shared_data, tmp_path):
    data = load_sentences("sst2", shared_data / "sentence")
    majority = max(data.test[1].float().mean().item(), 1 - data.test[1].float().mean().item())
    config = sentences.SentenceConfig(encoder="hbilstm", layers=2, hidden=32, embed_dim=64, dropout=0.3,
                                      train=TrainConfig(epochs=2, optimizer="adam", lr=3e-3, monitor="val_acc"))
    results = sentences.run(config, tmp_path, data=data, log=lambda s: None, progress=False)
    assert results["test"]["acc"] > majority + 0.12, (results["test"]["acc"], majority)


def test_cli_sweep_report_and_predict(shared_data, tmp_path, capsys):
    out = tmp_path / "sweep"
    args = ["reproduce", "sentences", "--task", "trec", "--encoder", "bilstm,hbilstm,cnn", "--layers", "1,2",
            "--seeds", "0", "--epochs", "1", "--hidden", "8", "--embed-dim", "16", "--batch-size", "25",
            "--gate-bias", "-1",
            "--data-dir", str(shared_data / "sentence"), "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "trec  hbilstm        2 layers  " in printed and "trec  bilstm          1 layer  " in printed
    assert "trec  cnn                   -  " in printed  # a CNN has no depth to show
    assert "(1 run)" in printed and "±" not in printed  # one seed: a mean, no spread
    report = (out / "report.md").read_text()
    assert "| hbilstm | 2 | 1 |" in report and "| cnn | - | 1 |" in report
    assert "Kim (2014) CNN-rand, published | - | - | 91.2" in report
    assert "Encoders: `bilstm`, a plain BiLSTM stack of the same depth and width; `cnn`, Kim's CNN " in report
    assert "\n5 runs, " in report
    assert (out / "depth-trec.png").stat().st_size > 10_000
    summary = json.loads((out / "summary.json").read_text())
    assert summary["recipe"] == "sentences" and len(summary["runs"]) == 5  # (docs/results/store.py reads the recipe)
    config = load_run_config(out / "trec" / "hbilstm-L2" / "seed0")["config"]
    assert config["batch_size"] == 25 and config["gate_bias"] == -1
    assert "`hidden=8`" in report and "`gate_bias=-1.0`" in report and "`batch_size=25`" in report
    assert "Differing" not in report
    assert main(args + ["--resume"]) == 0  # everything finished: nothing retrained, nothing differs
    printed = capsys.readouterr().out
    assert printed.count("done, skipped") == 5 and "keeps the settings" not in printed
    # Asked for another gate bias, the study is refused, naming it; with --resume it goes on with its own
    # settings, says which asked one it does not take, and the report gives the runs' own settings.
    other = args[:args.index("--gate-bias") + 1] + ["0"] + args[args.index("--gate-bias") + 2:]
    assert main(other) == 2
    assert f"{out} holds a study with other settings (--gate-bias -1.0 there, 0.0 asked)" in capsys.readouterr().err
    assert main(other + ["--resume"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("done, skipped") == 5 and "keeps the settings" not in printed
    assert "--resume goes on with its own; not applied: --gate-bias -1.0 (asked 0.0)" in printed
    assert "`gate_bias=-1.0`" in (out / "report.md").read_text()
    # A report of what is finished, training nothing: seed 1 never ran, layers 4 never ran.
    assert main(args[:-2] + ["--out", str(out), "--seeds", "0,1", "--layers", "1,4", "--report-only"]) == 0
    assert not (out / "trec" / "bilstm-L1" / "seed1").exists() and not (out / "trec" / "bilstm-L4").exists()
    assert len(json.loads((out / "summary.json").read_text())["runs"]) == 3  # bilstm, hbilstm at 1; cnn
    capsys.readouterr()
    assert main(args[:-2] + ["--out", str(tmp_path / "none"), "--report-only"]) == 2
    assert "does not exist" in capsys.readouterr().err
    run_dir = out / "trec" / "cnn-L1" / "seed0"
    assert main(["predict", str(run_dir), "Who wrote Hamlet ?", "How far is Denver ?"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and lines[0].split("\t")[2] == "Who wrote Hamlet ?"
    label, probs, _ = lines[0].split("\t")
    named = dict(pair.split("=") for pair in probs.split())
    assert list(named) == list(sentences.LABEL_NAMES["trec"])  # six classes, each named, in order
    assert label == max(named, key=lambda name: float(named[name]))
    assert abs(sum(float(p) for p in named.values()) - 1) < 5e-3
    # The sweep's folder where one run is wanted: the error names the runs inside (sorted, four of five)
    assert main(["predict", str(out), "Who wrote Hamlet ?"]) == 2
    err = capsys.readouterr().err
    assert f"{out} is not a run folder" in err and "'highwaynet reproduce sentences --out OUT' writes" in err
    assert f"it holds 5 run folders: {out / 'trec' / 'bilstm-L1' / 'seed0'}, " in err and err.rstrip().endswith(", ...")
    assert main(["reproduce", "sentences", "--task", "imdb", "--out", str(tmp_path / "x")]) == 2
    assert "unknown task 'imdb'" in capsys.readouterr().err


def test_cli_sweep_of_a_users_own_set(shared_data, tmp_path, capsys):
    # A folder of one's own (here 800 TREC questions to train, 100 to test, no dev file: carved from
    # train), named by the folder: in the run folders, the report (no published figure) and predict.
    own = tmp_path / "questions"
    own.mkdir()
    # (a set of your own is UTF-8; TREC is published in Latin-1)
    lines = (shared_data / "sentence" / "TREC.train.all").read_text(encoding="latin-1").encode() \
        .splitlines(keepends=True)
    (own / "train").write_bytes(b"".join(lines[:800]))
    (own / "test").write_bytes(b"".join(lines[-100:]))
    out = tmp_path / "sweep"
    assert main(["reproduce", "sentences", "--task", str(own), "--encoder", "cnn", "--epochs", "1",
                 "--embed-dim", "16", "--ema", "0.99", "--adversarial", "0.5", "--out", str(out)]) == 0
    assert "questions cnn                   -  " in capsys.readouterr().out
    run_dir = out / "questions" / "cnn-L1" / "seed0"
    saved = json.loads((run_dir / "config.json").read_text())["config"]
    assert saved["train"]["ema"] == 0.99 and saved["adversarial"] == 0.5
    assert json.loads((run_dir / "results.json").read_text())["task"] == "questions"
    report = (out / "report.md").read_text()
    assert "## questions\n\n| encoder |" in report and "Kim (2014)" not in report
    assert main(["predict", str(run_dir), "Who wrote Hamlet ?"]) == 0
    label, probs, _ = capsys.readouterr().out.strip().split("\t")
    assert [name for name, _ in (p.split("=") for p in probs.split())] == [str(i) for i in range(6)]
    assert main(["reproduce", "sentences", "--task", str(tmp_path / "none"), "--out", str(tmp_path / "x")]) == 2
    assert "or a folder of your own set (files train, test and optionally dev" in capsys.readouterr().err


def test_summary_shows_a_diverged_run_instead_of_crashing():
    runs = [{"task": "sst2", "encoder": "hbilstm", "layers": 2, "test": {"acc": a}} for a in (0.8, float("nan"))]
    runs.append({"task": "sst2", "encoder": "cnn", "layers": 1, "test": {"acc": 0.75}})
    (cnn, hbilstm) = sentences.summarize(runs)
    assert hbilstm["runs"] == 2 and hbilstm["mean"] != hbilstm["mean"]  # NaN, not an exception
    assert cnn == {"task": "sst2", "encoder": "cnn", "layers": 1, "runs": 1, "mean": 75.0, "std": 0.0}


def test_a_table_shows_no_spread_for_one_run():
    # One run's spread is unknown, not zero: the mean alone; NaN (a diverged run) stays visible.
    assert format_mean_std({"mean": 75.0, "std": 0.0}, runs=1) == "75.0"
    assert format_mean_std({"mean": 88.53, "std": 0.81}, runs=3) == "88.5 ± 0.8"
    assert format_mean_std({"mean": 0.05432, "std": 0.00811}, runs=3, digits=4) == "0.0543 ± 0.0081"
    assert format_mean_std({"mean": float("nan"), "std": float("nan")}, runs=2) == "nan ± nan"
    assert (count(1, "run"), count(0, "run"), count(5, "layer")) == ("1 run", "0 runs", "5 layers")


def test_sweep_downloads_missing_files_when_asked(shared_data, tmp_path, monkeypatch, capsys):
    # The public source stood in for by the shared folder (file:// URLs): fetched, sha256-checked, used.
    monkeypatch.setattr(sentence_files, "_URL", (shared_data / "sentence").resolve().as_uri() + "/")
    data_dir, out = tmp_path / "data", tmp_path / "out"
    args = ["reproduce", "sentences", "--task", "trec", "--encoder", "cnn", "--epochs", "1", "--embed-dim", "8",
            "--data-dir", str(data_dir), "--out", str(out)]
    assert main(args) == 2
    assert f"the data folder {data_dir} does not exist" in capsys.readouterr().err
    data_dir.mkdir()
    assert main(args) == 2
    assert "TREC.train.all not found" in capsys.readouterr().err
    assert main(args + ["--download"]) == 0  # (the failed call left nothing that needs --resume)
    assert sorted(p.name for p in data_dir.iterdir()) == ["TREC.test.all", "TREC.train.all"]
    assert json.loads((out / "trec" / "cnn-L1" / "seed0" / "results.json").read_text())["test"]["acc"] > 0.3


def test_character_features_spell_words_the_training_split_lacks(shared_data, tmp_path):
    """``word_features`` chars and words+chars: every word id has a spelling, words only the test split
    has keep theirs (a words-only model reads them as <unk>), the results give the accuracy on the
    sentences holding one, and ``predict`` spells a word it has never seen."""
    data = load_sentences("trec", shared_data / "sentence", spellings=True)
    train_ids = torch.cat(data.train[0])
    assert int(train_ids.max()) < data.num_words < len(data.vocab)
    unseen = sorted({int(i) for ids in data.test[0] for i in ids if i >= data.num_words})
    assert unseen, "TREC's test questions hold words its training questions lack"

    def features(word_features: str) -> torch.Tensor:
        config = sentences.SentenceConfig(task="trec", word_features=word_features, embed_dim=16, hidden=8)
        model = sentences.build_model(config, data.vocab, 6, data.num_words)
        return model.embed(torch.tensor([[unseen[0], unseen[1], 1]])).detach()[0]

    words, chars, both = features("words"), features("chars"), features("words+chars")
    torch.testing.assert_close(words[0], words[2])  # an unseen word is <unk> to a words-only model...
    assert not torch.allclose(chars[0], chars[1])    # ...and spelt by a model that reads characters
    assert both.shape[-1] == words.shape[-1] + chars.shape[-1]

    config = sentences.SentenceConfig(task="trec", word_features="words+chars", encoder="hbilstm", hidden=16,
                                      embed_dim=32, train=TrainConfig(epochs=1, optimizer="adam", lr=3e-3))
    # (a tenth of the training questions: what is checked is the plumbing, not what it learns; the
    # vocabulary, and so every unseen word, is the whole split's)
    data = dataclasses.replace(data, train=(data.train[0][:500], data.train[1][:500]))
    results = sentences.run(config, tmp_path / "run", data=data, log=lambda s: None, progress=False)
    assert results["test_unseen"]["n"] == sum(1 for ids in data.test[0] if bool((ids >= data.num_words).any())
                                              or bool((ids == 1).any()))
    assert 0.0 <= results["test_unseen"]["acc"] <= 1.0 and results["word_features"] == "words+chars"
    (label, probs), (label2, probs2) = sentences.predict(tmp_path / "run", ["What is a qwertyzoid ?",
                                                                            "What is a zzzzzzzzzzzzzz ?"])
    assert abs(sum(probs.values()) - 1) < 1e-5 and probs != probs2  # the two new words read differently


def _split_sweep(shared_data):
    """A two-run sweep (trec, cnn, seeds 0 and 1, one small epoch), and its seed 1 run's folder in ``out``."""
    base = sentences.SentenceConfig(task="trec", encoder="cnn", embed_dim=16, batch_size=50,
                                    train=TrainConfig(epochs=1, optimizer="adam", lr=3e-3, monitor="val_acc"))
    config = sentences.SweepConfig(tasks=["trec"], encoders=["cnn"], layers=[1], seeds=[0, 1], base=base)
    return config, dict(data_dir=shared_data / "sentence", progress=False)


def test_a_split_sweep_takes_a_run_the_other_process_finished_before_its_end(shared_data, tmp_path):
    """Two processes of one sweep: the run one left to the other (it held it) is looked at again at the end;
    finished by then, it is in the summary (it was left out: each process summed only its own runs)."""
    config, options = _split_sweep(shared_data)
    out = tmp_path / "sweep"
    start_sweep(out, "sentences", config, log=lambda line: None)  # (the first process to start made the folder)
    held = out / "trec" / "cnn-L1" / "seed1"
    held.mkdir(parents=True)
    lock = take_lock(held / ".lock", RunFolderBusy)  # (the other process holds seed 1's folder: a real flock)
    printed = []

    def log(line: str) -> None:
        printed.append(line)
        if f"{held}: " in line and "held by another process" in line:  # the other process trains it, and ends
            release_lock(lock)
            sentences.sweep(config, out, log=lambda line: None, **options)

    summary = sentences.sweep(config, out, log=log, **options)
    assert not any("(resumed)" in line for line in printed)  # (it resumed nothing: it held nothing)
    assert any(line.startswith(f"{held}: finished by the process that held it") for line in printed)
    assert sorted(r["seed"] for r in summary["runs"]) == [0, 1] and "left_out" not in summary
    assert len(json.loads((out / "summary.json").read_text())["runs"]) == 2
    assert "Partial" not in (out / "report.md").read_text()


def test_a_split_sweep_with_a_run_still_being_written_writes_a_partial_summary_its_readers_refuse(
        shared_data, tmp_path, capsys):
    config, options = _split_sweep(shared_data)
    out = tmp_path / "sweep"
    start_sweep(out, "sentences", config, log=lambda line: None)  # (the first process to start made the folder)
    held = out / "trec" / "cnn-L1" / "seed1"
    held.mkdir(parents=True)
    lock = take_lock(held / ".lock", RunFolderBusy)
    printed = []
    try:
        summary = sentences.sweep(config, out, log=printed.append, **options)
        who = f"process {os.getpid()} on {socket.gethostname()}"
        assert any(line.startswith(f"{held}: trec cnn 1 layer(s), seed 1: held by another process ({who})")
                   for line in printed)
        assert not any(line.startswith(f"{held}: trec cnn") and "(resumed)" in line for line in printed)
        said = [line for line in printed if "hold only the finished runs" in line]
        assert len(said) == 1 and f"{held} (being written by {who})" in said[0]
        assert "Run the same command again once that process has ended" in said[0]
        assert [r["seed"] for r in summary["runs"]] == [0]
        stored = json.loads((out / "summary.json").read_text())
        assert stored["left_out"] == [{"run": str(held), "held_by": who}]
        assert "> **Partial:** the summary and report of" in (out / "report.md").read_text()
        # A report of what is finished, while the run is still being written: partial too.
        assert "left_out" in sentences.sweep(config, out, log=lambda line: None, report_only=True, **options)
        # A reader of the summary refuses it, saying how to get the whole one.
        assert main(["reproduce", "sentences", "--choose-from", f"one={out}", "--out", str(tmp_path / "choice"),
                     "--data-dir", str(shared_data / "sentence")]) == 2
        error = capsys.readouterr().err
        assert f"{out / 'summary.json'} is a partial summary" in error and str(held) in error
        assert "Run the sweep's command again once the process writing it has ended" in error
    finally:
        release_lock(lock)
    # That process ended: the same command again writes the whole summary.
    summary = sentences.sweep(config, out, log=lambda line: None, **options)
    assert len(summary["runs"]) == 2 and "left_out" not in json.loads((out / "summary.json").read_text())
    assert "Partial" not in (out / "report.md").read_text()
