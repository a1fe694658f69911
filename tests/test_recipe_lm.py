"""Language modelling end to end on real text, and the lm / generate / reproduce commands."""

import json
import math
import warnings

import pytest
import torch

from highwaynet import cli
from highwaynet.cli import main
from highwaynet.data.corpora import load_corpus
from highwaynet.data.download import DataFile
from highwaynet.models import CharAwareLanguageModel, LSTMLanguageModel, RHNLanguageModel
from highwaynet.models.lm import count_parameters, generate
from highwaynet.nn import CharVocab
from highwaynet.recipes import lm, rhn_depth
from highwaynet.training import TrainConfig


@pytest.mark.slow
def test_char_rhn_learns_tiny_shakespeare(shared_data, tmp_path):
    corpus = load_corpus("tinyshakespeare", "char", shared_data / "text")
    unigram = corpus.unigram_entropy_bits("valid")
    config = lm.LMConfig(depth=2, hidden=128, batch_size=64, bptt=32, steps_per_epoch=40, eval_batch_size=128,
                         input_dropout=0.0, state_dropout=0.0, output_dropout=0.0,
                         train=TrainConfig(epochs=4, optimizer="adam", lr=5e-3, grad_clip=1.0))
    results = lm.run(config, tmp_path, corpus=corpus, log=lambda s: None, progress=False)
    val_bpc = results["final"]["val_bpc"]
    assert val_bpc < unigram - 1.0, (val_bpc, unigram)   # 4.8 bits for the unigram model
    assert results["test"]["bpc"] < unigram - 1.0
    assert results["sample"].startswith("\n") and len(results["sample"]) == 301


def test_models_shapes_tying_and_equal_budget():
    rhn = RHNLanguageModel(50, 32, depth=3, num_layers=2, input_dropout=0.2, state_dropout=0.2, output_dropout=0.2)
    logits, state = rhn(torch.randint(0, 50, (7, 4)))
    assert logits.shape == (7, 4, 50) and state.shape == (2, 4, 32)
    assert rhn.decoder.weight is rhn.embedding.weight
    lstm = LSTMLanguageModel(50, 32, num_layers=2)
    logits, (h, c) = lstm(torch.randint(0, 50, (7, 4)))
    assert logits.shape == (7, 4, 50) and h.shape == c.shape == (2, 4, 32)
    with pytest.raises(ValueError, match="embed_size == hidden_size"):
        RHNLanguageModel(50, 32, depth=2, embed_size=16)
    with pytest.raises(ValueError, match=r"shape \(T, B\)"):
        rhn(torch.randint(0, 50, (7,)))
    # hidden_for_budget finds sizes of about the same parameter count for both cells.
    base = lm.LMConfig(model="rhn", depth=4)
    vocab = [chr(ord("a") + i) for i in range(66)]
    sizes = {m: lm.hidden_for_budget(lm.LMConfig(model=m, depth=4), vocab, 100_000) for m in ("rhn", "lstm")}
    counts = {m: lm.parameters_for(lm.LMConfig(model=m, depth=4), vocab, h) for m, h in sizes.items()}
    assert all(abs(c - 100_000) < 2_000 for c in counts.values()), counts
    assert lm.parameters_for(base, vocab, 64) == count_parameters(lm.build_model(
        lm.LMConfig(model="rhn", depth=4, hidden=64), vocab))


def test_one_layer_models_with_dropout_build_no_layer_that_warns():
    # Their output_dropout is also nn.LSTM's dropout between layers, which one layer has not: the models give
    # their RNN none then (RHN, as nn.LSTM, would warn of a dropout it cannot apply), and keep their own.
    from highwaynet.models import CharAwareLanguageModel
    from highwaynet.nn import CharVocab

    chars = CharVocab.from_words(["the", "cat"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        models = [RHNLanguageModel(50, 8, depth=2, output_dropout=0.3), LSTMLanguageModel(50, 8, output_dropout=0.3),
                  CharAwareLanguageModel(chars.encode(["<pad>", "the", "cat"]), len(chars), 8, 1, rnn="rhn",
                                         output_dropout=0.3)]
    for model in models:
        assert model.output_dropout == 0.3 and model.rnn.dropout == 0.0
    assert RHNLanguageModel(50, 8, 2, depth=2, output_dropout=0.3).rnn.dropout == 0.3


def test_generate_is_seeded_and_checks_arguments():
    torch.manual_seed(0)
    model = RHNLanguageModel(20, 16, depth=2)
    prompt = torch.tensor([1, 2, 3])
    a = generate(model, prompt, 30, 0.8, torch.Generator().manual_seed(1))
    b = generate(model, prompt, 30, 0.8, torch.Generator().manual_seed(1))
    assert a.shape == (30,) and torch.equal(a, b) and a.max() < 20
    # temperature 0: greedy, each token the argmax of the model's next-token logits given the ones before
    greedy = generate(model, prompt, 6, 0.0)
    assert torch.equal(greedy, generate(model, prompt, 6, 0.0, torch.Generator().manual_seed(5)))
    with torch.no_grad():
        logits, _ = model(torch.cat([prompt, greedy]).view(-1, 1))
    assert torch.equal(logits[len(prompt) - 1:-1, 0].argmax(-1), greedy)
    for bad in (-0.5, float("nan")):
        with pytest.raises(ValueError, match="temperature must be 0 .greedy. or positive"):
            generate(model, prompt, 5, bad)
    with pytest.raises(ValueError, match="prompt is empty"):
        generate(model, torch.tensor([], dtype=torch.long), 5)


def test_cli_train_lm_and_generate(shared_data, tmp_path, capsys):
    out = tmp_path / "lm"
    text = str(shared_data / "text")
    assert main(["train", "lm", "--corpus", "tinyshakespeare", "--level", "char", "--depth", "2", "--hidden", "32",
                 "--epochs", "1", "--steps-per-epoch", "3", "--batch-size", "8", "--data-dir", text,
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "val_bpc" in printed and "test_bpc" in printed
    assert json.loads((out / "results.json").read_text())["parameters"] > 0
    # the run folder keeps its vocabulary: no corpus needed (an empty data folder given)
    assert main(["generate", str(out), "--prompt", "ROMEO:", "--length", "40", "--data-dir", str(tmp_path)]) == 0
    sample = capsys.readouterr().out
    assert sample.startswith("ROMEO:") and len(sample.rstrip("\n")) >= 40
    # a run folder from before vocab.json was written: the vocabulary comes from the corpus, the same
    (out / "vocab.json").unlink()
    assert main(["generate", str(out), "--prompt", "ROMEO:", "--length", "40", "--data-dir", text]) == 0
    assert capsys.readouterr().out == sample
    assert main(["generate", str(tmp_path / "nothing")]) == 2
    assert "is not a run folder" in capsys.readouterr().err


def test_cli_train_lm_steps_per_epoch_0_reads_the_whole_text(tmp_path, monkeypatch, capsys):
    # A folder in Penn Treebank's layout: 1,000 characters of training text at batch 4 are 4 streams of
    # 250, so a whole pass from a random offset under 10 is 24 or 25 windows of 10, against 3 when asked.
    from highwaynet.training.language_model import LanguageModelTask

    windows = []
    batches = LanguageModelTask.batches

    def counted(self, split, epoch):
        for batch in batches(self, split, epoch):
            windows.append(split)
            yield batch

    monkeypatch.setattr(LanguageModelTask, "batches", counted)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, n in (("train", 1000), ("valid", 200), ("test", 200)):
        (corpus / f"{name}.txt").write_text(("the cat sat on the mat. " * 50)[:n])
    base = ["train", "lm", "--corpus", str(corpus), "--depth", "1", "--hidden", "8", "--bptt", "10",
            "--batch-size", "4", "--epochs", "1", "--device", "cpu"]
    for steps, expected in (("3", {3}), ("0", {24, 25})):
        out, windows[:] = tmp_path / f"lm{steps}", []
        assert main([*base, "--steps-per-epoch", steps, "--out", str(out)]) == 0
        assert json.loads((out / "config.json").read_text())["config"]["steps_per_epoch"] == (int(steps) or None)
        assert windows.count("train") in expected
    assert main([*base, "--steps-per-epoch", "-1"]) == 2  # the configuration's check, in the option's name
    assert "--steps-per-epoch must be at least 0, got -1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*base, "--epochs", "x"])
    assert "--epochs: invalid integer value: 'x'" in capsys.readouterr().err


def test_an_lstm_run_records_the_state_dropout_it_applies_and_an_older_folder_goes_on(tmp_path, capsys):
    """state_dropout is the RHN's: an LSTM or Transformer run records 0, what its model applies, not the
    default 0.1 it never applied. A run folder that recorded 0.1 (as highwaynet did before) goes on with
    the same command: its settings read back as 0 too, and its checkpoint agrees with its config.json."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, n in (("train", 1000), ("valid", 200), ("test", 200)):
        (corpus / f"{name}.txt").write_text(("the cat sat on the mat. " * 50)[:n])
    command = ["train", "lm", "--corpus", str(corpus), "--hidden", "8", "--heads", "2", "--bptt", "10",
               "--batch-size", "4", "--steps-per-epoch", "2", "--epochs", "1", "--eval-windows", "1", "--device", "cpu"]
    for model, recorded in (("lstm", 0.0), ("transformer", 0.0), ("rhn", 0.1)):
        assert cli.parse([*command, "--model", model])[1].state_dropout == recorded
    out = tmp_path / "lstm"
    assert main([*command, "--model", "lstm", "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["config"]["state_dropout"] == 0.0
    record = json.loads((out / "config.json").read_text())
    record["config"]["state_dropout"] = 0.1  # as an LSTM run folder of highwaynet 0.3 holds it
    (out / "config.json").write_text(json.dumps(record, indent=2) + "\n")
    checkpoint = torch.load(out / "checkpoint.pt", weights_only=True)
    checkpoint["identity"]["config"]["state_dropout"] = 0.1
    torch.save(checkpoint, out / "checkpoint.pt")
    capsys.readouterr()
    assert main([*command, "--model", "lstm", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "nothing left to train" in printed.out and printed.err == ""
    assert main([*command, "--model", "lstm", "--state-dropout", "0.3", "--out", str(out)]) == 0  # (none applied)


def test_cli_reproduce_rhn_depth_writes_report_and_resumes(shared_data, tmp_path, capsys):
    out = tmp_path / "sweep"
    args = ["reproduce", "rhn-depth", "--depths", "1,2", "--budget", "15000", "--epochs", "1",
            "--steps-per-epoch", "2", "--batch-size", "8", "--data-dir", str(shared_data / "text"), "--out", str(out),
            "--seeds", "0,1", "--eval-windows", "2"]
    assert main(args) == 0
    report = (out / "report.md").read_text()
    assert (out / "depth.png").stat().st_size > 10_000
    assert "| RHN" in report and "| LSTM, same time | - |" in report and "| LSTM, same steps | - |" in report
    summary = json.loads((out / "summary.json").read_text())
    result = summary["corpora"]["tinyshakespeare:char"]
    rows = result["rhn"]
    assert all(abs(r["parameters"] - 15_000) < 1_000 for r in rows)
    assert f"| {rows[0]['parameters']:,} |" in report  # thousands separated
    # Checked against the run folders' own results, computed here again: the depth chosen on validation
    # (mean over the seeds), the equal-time LSTM's budget (the median of that depth's times: of two, the
    # mean), and the paired differences of test bpc, seed by seed, with Student's t for 1 degree of freedom.
    folder = out / "tinyshakespeare-char"

    def ran(name):
        return json.loads((folder / name / "results.json").read_text())

    valid = {d: (ran(f"rhn-depth{d}-seed0")["best_val"] + ran(f"rhn-depth{d}-seed1")["best_val"]) / 2 for d in (1, 2)}
    best = min(valid, key=valid.get)
    assert rhn_depth.chosen(result)["depth"] == best
    times = [ran(f"rhn-depth{best}-seed{s}")["train_seconds"] for s in (0, 1)]
    assert result["lstm"]["max_seconds"] == pytest.approx((times[0] + times[1]) / 2)
    for lstm in ("lstm", "lstm_steps"):
        name = "lstm-seed" if lstm == "lstm" else "lstm-steps-seed"
        d = [ran(f"rhn-depth{best}-seed{s}")["test"]["bpc"] - ran(f"{name}{s}")["test"]["bpc"] for s in (0, 1)]
        mean, sd = (d[0] + d[1]) / 2, abs(d[0] - d[1]) / math.sqrt(2)
        half = 12.706 * sd / math.sqrt(2)
        c = rhn_depth.contrast(result, lstm)
        assert (c["n"], c["seeds"]) == (2, [0, 1])
        assert (c["mean"], c["lo"], c["hi"]) == pytest.approx((mean, mean - half, mean + half))
        assert f"{mean:+.3f} bpc [{mean - half:+.3f}, {mean + half:+.3f}] (95%, paired over 2 seeds)" in report
    # The schedule control: the best depth and an LSTM on the equal-time LSTM's schedule (set for 20
    # times the epochs), stopped after the RHNs' epochs; RHN − LSTM on it, and each against itself.
    for name in (f"rhn-depth{best}-slow-seed", "lstm-slow-seed"):
        for s in (0, 1):
            assert ran(f"{name}{s}")["epochs"] == 1
            assert json.loads((folder / f"{name}{s}" / "config.json").read_text())["config"]["train"]["epochs"] == 20
    for got, a, b in [(rhn_depth.contrast(result, "lstm_slow"), f"rhn-depth{best}-slow-seed", "lstm-slow-seed"),
                      (rhn_depth.schedule_effect(result, "rhn"), f"rhn-depth{best}-slow-seed", f"rhn-depth{best}-seed"),
                      (rhn_depth.schedule_effect(result, "lstm"), "lstm-slow-seed", "lstm-steps-seed")]:
        d = [ran(f"{a}{s}")["test"]["bpc"] - ran(f"{b}{s}")["test"]["bpc"] for s in (0, 1)]
        assert (got["seeds"], got["mean"]) == ([0, 1], pytest.approx((d[0] + d[1]) / 2))
        assert f"{got['mean']:+.3f} bpc [{got['lo']:+.3f}, {got['hi']:+.3f}] (95%, paired over 2 seeds)" in report
    # Each model's validation loss after each epoch, mean over the seeds, from its runs' metrics.
    def curve(name):
        return [json.loads(line)["val_loss"] for line in (folder / name / "metrics.jsonl").read_text().splitlines()]
    assert result["lstm_slow"]["val_curve"] == {
        "val_loss": [pytest.approx((curve("lstm-slow-seed0")[0] + curve("lstm-slow-seed1")[0]) / 2)], "seeds": [2]}
    assert "2 steps of 8 × 50 characters (800 characters), 2 seeds)" in report  # the scale
    assert main(args) == 0 and f"the study in {out} is done" in capsys.readouterr().out  # run again: done
    assert main(args + ["--resume"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("done, skipped") == 12 and "keeps the settings" not in printed
    other = args[:11] + ["3"] + args[12:]  # another batch size: refused; with --resume, the study keeps its own
    assert main(other) == 2
    assert f"{out} holds a study with other settings (--batch-size 8 there, 3 asked)" in capsys.readouterr().err
    assert main(other + ["--resume"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("done, skipped") == 12 and "keeps the settings" not in printed
    assert "not applied: --batch-size 8 (asked 3)" in printed  # (the option typed: it named base.batch_size)
    assert main(args[:3] + ["0,2"] + args[4:]) == 2
    assert "--depths must be at least 1, got 0" in capsys.readouterr().err


def test_rhn_depth_stopped_midway_goes_on_where_it_stopped(shared_data, tmp_path, monkeypatch):
    """Killed between runs, the study run again with the same settings skips the runs it finished and
    trains the rest, each seed in its own folder; a folder of the one-seed layout (0.3) is named, unused."""
    _, config = cli.parse(["reproduce", "rhn-depth", "--depths", "1", "--budget", "5000", "--epochs", "1",
                           "--steps-per-epoch", "1", "--batch-size", "4", "--eval-windows", "1", "--seeds", "0,1"])
    out, data, real, calls = tmp_path / "sweep", shared_data / "text", lm.run, []

    def killed_at_the_third(*args, **kwargs):
        calls.append(args[1].name)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(lm, "run", killed_at_the_third)
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        rhn_depth.run(config, out, data_dir=data, log=lines.append, progress=False)
    assert calls == ["rhn-depth1-seed0", "lstm-steps-seed0", "rhn-depth1-seed1"]  # seed by seed
    monkeypatch.setattr(lm, "run", real)
    lines.clear()
    (out / "tinyshakespeare-char" / "rhn-depth1").mkdir()  # (as 0.3 named seed 0's run)
    summary = rhn_depth.run(config, out, data_dir=data, log=lines.append, progress=False)
    assert any("holds runs of a one-seed study of highwaynet 0.3 or before (rhn-depth1)" in line for line in lines)
    assert any("unfinished (2 runs done so far): going on where it stopped" in line for line in lines)
    assert [line.rsplit("/", 1)[1] for line in lines if line.endswith("done, skipped")] == \
        ["rhn-depth1-seed0: done, skipped", "lstm-steps-seed0: done, skipped"]
    result = summary["corpora"]["tinyshakespeare:char"]
    assert [r["seed"] for r in result["rhn"][0]["runs"]] == [r["seed"] for r in result["lstm"]["runs"]] == [0, 1]
    assert sorted(p.name for p in (out / "tinyshakespeare-char").iterdir()) == [
        "lstm-seed0", "lstm-seed1", "lstm-slow-seed0", "lstm-slow-seed1", "lstm-steps-seed0", "lstm-steps-seed1",
        "rhn-depth1", "rhn-depth1-seed0", "rhn-depth1-seed1", "rhn-depth1-slow-seed0", "rhn-depth1-slow-seed1"]


def test_rhn_depth_run_again_trains_only_the_runs_it_lacks(shared_data, tmp_path, monkeypatch):
    """A study whose folder holds every run but the schedule control's (one of before the control) is
    finished by running its command again: the runs there are reused as they are, and only the
    control's are trained, the best depth's and the LSTM's, seed by seed."""
    _, config = cli.parse(["reproduce", "rhn-depth", "--depths", "1,2", "--budget", "5000", "--epochs", "1",
                           "--steps-per-epoch", "1", "--batch-size", "4", "--eval-windows", "1", "--seeds", "0,1"])
    out, data, real, calls = tmp_path / "sweep", shared_data / "text", lm.run, []
    first = rhn_depth.run(config, out, data_dir=data, log=lambda line: None, progress=False)
    folder = out / "tinyshakespeare-char"
    best = rhn_depth.chosen(first["corpora"]["tinyshakespeare:char"])["depth"]
    control = [f"rhn-depth{best}-slow-seed0", "lstm-slow-seed0", f"rhn-depth{best}-slow-seed1", "lstm-slow-seed1"]
    for name in control:  # (as a study of before the control left its folder)
        for path in (folder / name).iterdir():
            path.unlink()
        (folder / name).rmdir()
    kept = {p.name: (p / "results.json").read_bytes() for p in folder.iterdir()}
    assert len(kept) == 8

    def recorded(*args, **kwargs):
        calls.append((args[1].name, kwargs.get("max_epochs")))
        return real(*args, **kwargs)

    monkeypatch.setattr(lm, "run", recorded)
    lines: list[str] = []
    summary = rhn_depth.run(config, out, data_dir=data, log=lines.append, progress=False)
    assert calls == [(name, 1) for name in control]
    assert sum(line.endswith("done, skipped") for line in lines) == 8
    assert {name: (folder / name / "results.json").read_bytes() for name in kept} == kept
    result = summary["corpora"]["tinyshakespeare:char"]
    assert [r["seed"] for r in result["rhn_slow"]["runs"]] == [r["seed"] for r in result["lstm_slow"]["runs"]] == [0, 1]
    assert result["rhn_slow"]["depth"] == best and result["lstm_slow"]["schedule_epochs"] == 20


def _study(tests: dict, valid: dict, lstm_seeds=(0, 1, 2)) -> dict:
    """A depth study's summary, by hand: each model's test bpc and best validation loss, seed by seed."""
    from dataclasses import asdict

    def entry(model, depth, seeds):
        return {"model": model, "depth": depth, "hidden": 10, "parameters": 1000, "runs": [
            {"seed": s, "model": model, "depth": depth, "epochs": 8, "train_seconds": 40.0 + s,
             "best_val": valid.get((model, depth), {}).get(s, 2.0), "test": {"bpc": tests[model, depth][s]},
             "sample": "\nTo be"} for s in seeds]}

    config = asdict(rhn_depth.RHNDepthConfig(depths=[1, 2]))
    return {"config": config, "seconds": 1.0, "cuda_graph": False, "corpora": {"tinyshakespeare:char": {
        "level": "char", "vocab": 65, "rhn": [entry("rhn", d, tuple(tests["rhn", d])) for d in (1, 2)],
        "lstm": {**entry("lstm", None, lstm_seeds), "max_seconds": 41.0, "time_of": "rhn depth 2"},
        "lstm_steps": entry("lstm", None, lstm_seeds)}}}


def test_rhn_depth_chooses_on_validation_and_pairs_by_seed(tmp_path):
    # Depth 1 tests better, depth 2 validates better: depth 2 is chosen. The LSTM's runs are listed in
    # another order than the RHN's: pairs are made by seed, not by place.
    tests = {("rhn", 1): {0: 2.70, 1: 2.71, 2: 2.72}, ("rhn", 2): {0: 2.80, 1: 2.85, 2: 2.90},
             ("lstm", None): {2: 2.75, 0: 2.70, 1: 2.70}}
    valid = {("rhn", 1): {0: 1.95, 1: 1.95, 2: 1.95}, ("rhn", 2): {0: 1.90, 1: 1.90, 2: 1.98}}
    summary = _study(tests, valid, lstm_seeds=(2, 0, 1))
    result = summary["corpora"]["tinyshakespeare:char"]
    assert rhn_depth.chosen(result)["depth"] == 2  # (mean 1.9267 against 1.95)
    # Independently: differences 0.10, 0.15, 0.15 (seeds 0, 1, 2); mean 0.13333; sample sd
    # sqrt(((-1/30)^2 + 2 (1/60)^2) / 2) = 0.028868; t(0.975, 2 df) = 4.303; half 4.303 * 0.028868 / sqrt(3).
    diffs = [2.80 - 2.70, 2.85 - 2.70, 2.90 - 2.75]
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2)
    half = 4.303 * sd / math.sqrt(3)
    assert (mean, sd, half) == pytest.approx((0.133333, 0.028868, 0.071717), abs=1e-6)
    c = rhn_depth.contrast(result)
    assert (c["n"], c["seeds"]) == (3, [0, 1, 2])
    assert (c["mean"], c["lo"], c["hi"]) == pytest.approx((mean, mean - half, mean + half))
    line = rhn_depth.verdicts(summary)[0]
    assert line.startswith("tinyshakespeare:char (about 200,000 parameters, 400 steps of 128 × 50 characters "
                           "(2,560,000 characters), 3 seeds): the best RHN on validation has recurrence depth 2 "
                           "(test bpc 2.850 ± 0.050)")
    assert "trained for as long as the best RHN (41 s, the median of its runs' times; 8 epochs, on a schedule " \
           "set for 160), test bpc 2.717 ± 0.029, " \
           "RHN − LSTM = +0.133 bpc [+0.062, +0.205] (95%, paired over 3 seeds): the LSTM lower" in line
    rhn_depth.write_report(tmp_path, summary)
    report = (tmp_path / "report.md").read_text()
    assert "| RHN (best on valid) | 2 | 10 | 1,000 | 8 | 2.780 | 2.850 ± 0.050 | 40, 41, 42 |" in report
    # A seed the LSTM lacks is left out of the pairs; one pair gives no interval.
    del result["lstm"]["runs"][1:]
    assert rhn_depth.contrast(result)["seeds"] == [2]
    assert "+0.150 bpc (one seed: no interval)" in rhn_depth.verdicts(summary)[0]


def test_rhn_depth_schedule_control_pairs_each_model_by_seed(tmp_path):
    """The schedule control, from hand-made runs: the best depth (2, on validation) and an LSTM, both
    on the equal-time LSTM's slow schedule and stopped after the RHNs' steps; RHN − LSTM on it, and
    each model's slow schedule − its RHNs'-schedule run, paired by seed (runs listed out of order)."""
    tests = {("rhn", 1): {0: 2.70, 1: 2.71, 2: 2.72}, ("rhn", 2): {0: 2.80, 1: 2.85, 2: 2.90},
             ("lstm", None): {0: 2.64, 1: 2.63, 2: 2.65}}
    valid = {("rhn", 1): {0: 1.95, 1: 1.95, 2: 1.95}, ("rhn", 2): {0: 1.90, 1: 1.90, 2: 1.98}}
    summary = _study(tests, valid)
    result = summary["corpora"]["tinyshakespeare:char"]
    steps = {0: 2.93, 1: 2.92, 2: 2.94}
    rhn_slow, lstm_slow = {1: 2.77, 2: 2.83, 0: 2.74}, {2: 2.75, 0: 2.70, 1: 2.76}
    for run in result["lstm_steps"]["runs"]:
        run["test"]["bpc"] = steps[run["seed"]]
    for key, model, depth, tested in (("rhn_slow", "rhn", 2, rhn_slow), ("lstm_slow", "lstm", None, lstm_slow)):
        result[key] = {"model": model, "depth": depth, "hidden": 10, "parameters": 1000, "schedule_epochs": 160,
                       "runs": [{"seed": s, "model": model, "depth": depth, "epochs": 8, "train_seconds": 50.0,
                                 "best_val": 1.9, "test": {"bpc": b}} for s, b in tested.items()]}

    def by_hand(diffs):  # mean and 95% t-interval, t(0.975, 2 df) = 4.303
        mean = sum(diffs) / 3
        half = 4.303 * math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2) / math.sqrt(3)
        return mean, mean - half, mean + half

    # RHN − LSTM on the slow schedule: 0.04, 0.01, 0.08 (seeds 0, 1, 2); sd 0.035119, half 0.087248.
    across = by_hand([2.74 - 2.70, 2.77 - 2.76, 2.83 - 2.75])
    assert across == pytest.approx((0.043333, -0.043915, 0.130582), abs=1e-5)
    # Slow − the RHNs' schedule: the RHN -0.06, -0.08, -0.07 (half 0.024843); the LSTM -0.23, -0.16, -0.19.
    rhn_effect = by_hand([2.74 - 2.80, 2.77 - 2.85, 2.83 - 2.90])
    lstm_effect = by_hand([2.70 - 2.93, 2.76 - 2.92, 2.75 - 2.94])
    assert rhn_effect == pytest.approx((-0.07, -0.094843, -0.045157), abs=1e-5)
    assert lstm_effect == pytest.approx((-0.193333, -0.280582, -0.106085), abs=1e-5)
    # The slow-schedule RHN against the equal-time LSTM (its schedule): 0.10, 0.14, 0.18; sd 0.04, half 0.099373.
    same_time = by_hand([2.74 - 2.64, 2.77 - 2.63, 2.83 - 2.65])
    assert same_time == pytest.approx((0.14, 0.040627, 0.239373), abs=1e-5)
    for got, expected in ((rhn_depth.contrast(result, "lstm_slow"), across),
                          (rhn_depth.contrast(result, rhn="rhn_slow"), same_time),
                          (rhn_depth.schedule_effect(result, "rhn"), rhn_effect),
                          (rhn_depth.schedule_effect(result, "lstm"), lstm_effect)):
        assert (got["n"], got["seeds"]) == (3, [0, 1, 2])
        assert (got["mean"], got["lo"], got["hi"]) == pytest.approx(expected)
    line = rhn_depth.verdicts(summary)[0]
    assert line.endswith(
        "; on the equal-time LSTM's schedule (set for 160 epochs) stopped after 8, as many steps as the RHNs, the RHN "
        "tests bpc 2.780 ± 0.046 and the LSTM 2.737 ± 0.032, RHN − LSTM = +0.043 bpc [-0.044, +0.131] (95%, paired "
        "over 3 seeds): no difference resolved; against the equal-time LSTM, on its schedule too (the same work as "
        "the runs whose median time set its budget), RHN − LSTM = +0.140 bpc [+0.041, +0.239] (95%, paired over 3 "
        "seeds): the LSTM lower; that schedule − the RHNs' (cosine over 8), each model paired with "
        "itself: RHN -0.070 bpc [-0.095, -0.045] (95%, paired over 3 seeds): the slow schedule lower, LSTM -0.193 "
        "bpc [-0.281, -0.106] (95%, paired over 3 seeds): the slow schedule lower")
    # The equal-steps contrast is still the best depth on the RHNs' schedule against the LSTM on it.
    assert rhn_depth.contrast(result, "lstm_steps")["mean"] == pytest.approx((-0.13 - 0.07 - 0.04) / 3)
    rhn_depth.write_report(tmp_path, summary)
    report = (tmp_path / "report.md").read_text()
    assert "| RHN, slow schedule | 2 | 10 | 1,000 | 8 | 2.741 | 2.780 ± 0.046 | 50 |" in report
    assert "| LSTM, slow schedule | - | 10 | 1,000 | 8 | 2.741 | 2.737 ± 0.032 | 50 |" in report
    assert "| RHN depth 2 − LSTM, both on the slow schedule, as many steps | +0.043 bpc [-0.044, +0.131]" in report
    assert "| RHN depth 2, slow schedule − the RHNs' schedule, as many steps | -0.070 bpc [-0.095, -0.045]" in report
    assert "| LSTM, slow schedule − the RHNs' schedule, as many steps | -0.193 bpc [-0.281, -0.106]" in report
    assert "| RHN depth 2 on the slow schedule − LSTM, same time (its schedule) | +0.140 bpc [+0.041, +0.239]" in report
    with pytest.raises(ValueError, match="rhn must be 'rhn' or 'rhn_slow'"):
        rhn_depth.contrast(result, rhn="rhn_steps")
    # A summary without the control (0.4.0's stored one) reports as before.
    del result["rhn_slow"], result["lstm_slow"]
    assert rhn_depth.contrast(result, "lstm_slow") is None and rhn_depth.schedule_effect(result, "rhn") is None
    assert rhn_depth.contrast(result, rhn="rhn_slow") is None
    assert "slow schedule" not in rhn_depth.verdicts(summary)[0]


def test_rhn_depth_curves_draw_each_models_validation_curve_in_its_metric(tmp_path, monkeypatch):
    """``curves.png``: the best depth's and each LSTM's validation curve, in bits per character
    against the step (epochs of 50 steps), as the summary holds them in nats; none for a summary
    without curves (0.4.0's first stored one)."""
    tests = {("rhn", 1): {0: 2.70, 1: 2.71, 2: 2.72}, ("rhn", 2): {0: 2.80, 1: 2.85, 2: 2.90},
             ("lstm", None): {0: 2.64, 1: 2.63, 2: 2.65}}
    valid = {("rhn", 1): {0: 1.95, 1: 1.95, 2: 1.95}, ("rhn", 2): {0: 1.90, 1: 1.90, 2: 1.98}}
    summary = _study(tests, valid)
    result = summary["corpora"]["tinyshakespeare:char"]
    summary["config"]["base"]["steps_per_epoch"] = 50
    summary["config"]["base"]["train"]["epochs"] = 2
    result["rhn"][0]["val_curve"] = {"val_loss": [9.0, 9.0], "seeds": [3, 3]}  # depth 1: not the best, not drawn
    result["rhn"][1]["val_curve"] = {"val_loss": [2.0, 1.5], "seeds": [3, 3]}
    result["lstm"]["val_curve"] = {"val_loss": [2.1, 1.6, 1.4], "seeds": [3, 3, 1]}
    figures = {}
    real = rhn_depth.save_figure
    monkeypatch.setattr(rhn_depth, "save_figure", lambda fig, path, **kw: (figures.update({path.name: fig}),
                                                                           real(fig, path, **kw)))
    rhn_depth.write_report(tmp_path, summary)
    drawn = figures["curves.png"].axes[0].get_lines()
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
             for line in drawn if not line.get_label().startswith("_")}
    bits = [x / math.log(2) for x in (2.0, 1.5, 2.1, 1.6, 1.4)]
    assert lines == {"RHN depth 2 on the RHNs' schedule": ([50, 100], pytest.approx(bits[:2])),
                     "LSTM on the slow schedule, same time": ([50, 100, 150], pytest.approx(bits[2:])),
                     "the RHNs' last step": ([100, 100], [0, 1])}
    # The equal-time LSTM's 3rd point averages 1 seed where its first averaged 3: drawn hollow, alone.
    hollow = [(list(line.get_xdata()), list(line.get_ydata())) for line in drawn
              if line.get_markerfacecolor() == "none"]
    assert hollow == [([150], pytest.approx(bits[4:]))]
    assert figures["curves.png"].axes[0].get_xlabel() == "training step"
    report = (tmp_path / "report.md").read_text()
    assert "![validation curves](curves.png)" in report
    # How far each curve fell over the RHNs' last epoch (the equal-time LSTM's runs on past it: not said).
    assert ("- tinyshakespeare:char: over epoch 2, the RHNs' last, the validation bpc falls by: RHN depth 2 on the "
            f"RHNs' schedule, {0.5 / math.log(2):.3f}.\n") in report
    assert "a hollow point averages fewer seeds than the curve's first" in report
    for row in [*result["rhn"], result["lstm"]]:
        del row["val_curve"]
    (tmp_path / "curves.png").unlink()
    rhn_depth.write_report(tmp_path, summary)
    assert not (tmp_path / "curves.png").exists() and "curves.png" not in (tmp_path / "report.md").read_text()


def test_rhn_depth_reports_a_one_seed_summary_of_0_3(tmp_path):
    """A summary written before seeds (each row its one run, the LSTM's too) still reports: seed 0 alone."""
    summary = _study({("rhn", 1): {0: 2.83}, ("rhn", 2): {0: 2.82}, ("lstm", None): {0: 2.74}}, {}, lstm_seeds=(0,))
    result = summary["corpora"]["tinyshakespeare:char"]
    for key in ("rhn", "lstm"):
        for entry in (result[key] if key == "rhn" else [result[key]]):
            run = entry.pop("runs")[0]
            entry.update({k: v for k, v in run.items() if k != "seed"})
    del result["lstm_steps"], result["lstm"]["max_seconds"], summary["config"]["seeds"]
    result["rhn"][0]["best_val"] = 1.8  # (chosen on validation: depth 1)
    line = rhn_depth.verdicts(summary)[0]
    assert "1 seed): the best RHN on validation has recurrence depth 1 (test bpc 2.830)" in line
    assert "(40 s; 8 epochs, on a schedule set for 160), test bpc 2.740, RHN − LSTM = +0.090 bpc (one seed: no " \
           "interval)" in line
    rhn_depth.write_report(tmp_path, summary)
    assert "| LSTM, same time | - | 10 | 1,000 | 8 | 2.885 | 2.740 | 40 |" in (tmp_path / "report.md").read_text()


def test_cli_reproduce_rhn_depth_downloads_when_asked(shared_data, tmp_path, monkeypatch):
    # The public source stood in for by the shared copy (a file:// URL): fetched, sha256-checked, used.
    from highwaynet.data import corpora

    source = corpora.TINY_SHAKESPEARE
    monkeypatch.setattr(corpora, "TINY_SHAKESPEARE", DataFile(
        source.name, (shared_data / "text" / "tinyshakespeare.txt").resolve().as_uri(), source.sha256))
    args = ["reproduce", "rhn-depth", "--depths", "1", "--no-lstm", "--budget", "5000", "--epochs", "1",
            "--steps-per-epoch", "1", "--batch-size", "4", "--data-dir", str(tmp_path / "data"),
            "--out", str(tmp_path / "sweep"), "--download"]
    assert main(args) == 0
    assert (tmp_path / "data" / "tinyshakespeare.txt").is_file() and (tmp_path / "sweep" / "report.md").is_file()


class _Streams:
    level, train, valid, test = "char", torch.arange(2000) % 50, torch.arange(400) % 50, torch.arange(400) % 50


@pytest.mark.parametrize("model_cls", [RHNLanguageModel, LSTMLanguageModel])
def test_task_carries_state_in_one_buffer_across_windows(model_cls):
    """Windows read in turn give the logits of one long call; the carried state keeps its address
    (what a CUDA-graph replay needs) and is zeroed at the start of each pass."""
    from highwaynet.training.language_model import LanguageModelTask

    torch.manual_seed(0)
    kwargs = {"depth": 2} if model_cls is RHNLanguageModel else {}
    model = model_cls(50, 16, **kwargs).double().eval()
    task = LanguageModelTask(_Streams(), batch_size=4, bptt=10, eval_batch_size=2)
    windows = list(task.batches("val", 0))[:3]
    with torch.no_grad():
        whole, _ = model(torch.cat([x for x, _ in windows]))
        expected = torch.stack([torch.nn.functional.cross_entropy(whole[10 * i:10 * i + 10].reshape(-1, 50),
                                                                  y.reshape(-1)) for i, (_, y) in enumerate(windows)])
        for attempt in range(2):  # the second pass starts from a zero state again, in the same buffer
            losses = torch.stack([task.step(model, window)[0] for window in task.batches("val", 0)][:3])
            torch.testing.assert_close(losses, expected.float())
            state = task._states[2]
            addresses = [t.data_ptr() for t in ((state,) if torch.is_tensor(state) else state)]
            if attempt == 0:
                first = addresses
    assert addresses == first


def test_task_state_survives_backward():
    """The buffer is overwritten after the forward: the backward must not need the old values."""
    from highwaynet.training.language_model import LanguageModelTask

    torch.manual_seed(0)
    model = LSTMLanguageModel(50, 16)
    task = LanguageModelTask(_Streams(), batch_size=4, bptt=10)
    for x, y in list(task.batches("train", 0))[:3]:
        loss, _ = task.step(model, (x, y))
        loss.backward()  # fails if the saved initial state were modified in place
        assert all(p.grad is not None for p in model.parameters())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("model_name", ["rhn", "lstm"])
def test_cuda_graph_lm_training_equals_eager(model_name):
    """Truncated BPTT as replayed graphs: the carried state, dropout masks and Adam as eagerly."""
    from highwaynet.training import LanguageModelTask, Trainer

    histories = []
    for graphed in (False, True):
        config = lm.LMConfig(model=model_name, depth=3, hidden=32, input_dropout=0.0, state_dropout=0.0,
                             output_dropout=0.0,
                             train=TrainConfig(epochs=3, optimizer="adam", lr=3e-3, grad_clip=1.0, schedule="cosine",
                                               device="cuda", cuda_graph=graphed))
        model = lm.build_model(config, [str(i) for i in range(50)])
        # 2000 tokens in 4 streams of windows of 30: a shorter last window, a second graph shape
        task = LanguageModelTask(_Streams(), batch_size=4, bptt=30, eval_batch_size=2)
        trainer = Trainer(model, task, config.train, log=lambda s: None, progress=False)
        histories.append(trainer.fit())
        if graphed:
            assert trainer._graphed.replays > 0
    for a, b in zip(histories[0], histories[1], strict=True):
        for key in ("train_loss", "val_loss"):
            assert abs(a[key] - b[key]) < 2e-3 * max(1.0, abs(a[key])), (key, a[key], b[key])


def test_the_lstm_language_models_run_under_cpu_autocast():
    # (their nn.LSTM failed inside oneDNN under CPU autocast on a processor without AVX-512, as HighwayLSTM
    # did: `train --amp` on CPU; it is given its input and state in the autocast dtype now)
    torch.manual_seed(0)
    words = ["<unk>", "the", "cat", "sat"]
    chars, tokens = CharVocab.from_words(words), torch.randint(0, 4, (5, 2))
    for model in (LSTMLanguageModel(4, 8, num_layers=2),
                  CharAwareLanguageModel(chars.encode(words), len(chars), 8, rnn="lstm")):
        seen = []
        model.rnn.register_forward_pre_hook(lambda m, args, seen=seen: seen.append(args[0].dtype))
        expected, _ = model(tokens)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits, state = model(tokens)
            again, _ = model(tokens, state)  # (the state it gave back, in bfloat16, carries on)
        assert seen[1:] == [torch.bfloat16] * 2 and state[0].dtype == torch.bfloat16
        torch.testing.assert_close(logits.float(), expected, rtol=0, atol=0.1)
        logits.float().sum().backward()
