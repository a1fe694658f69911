"""Language modelling end to end on real text, and the lm / generate / reproduce commands."""

import json

import pytest
import torch

from highwaynet.cli import main
from highwaynet.data.corpora import load_corpus
from highwaynet.models import LSTMLanguageModel, RHNLanguageModel
from highwaynet.models.lm import count_parameters, generate
from highwaynet.recipes import lm
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
        RHNLanguageModel(50, 32, 2, embed_size=16)
    with pytest.raises(ValueError, match=r"shape \(T, B\)"):
        rhn(torch.randint(0, 50, (7,)))
    # hidden_for_budget finds sizes of about the same parameter count for both cells.
    base = lm.LMConfig(model="rhn", depth=4)
    sizes = {m: lm.hidden_for_budget(lm.LMConfig(model=m, depth=4), 66, 100_000) for m in ("rhn", "lstm")}
    counts = {m: lm.parameters_for(lm.LMConfig(model=m, depth=4), 66, h) for m, h in sizes.items()}
    assert all(abs(c - 100_000) < 2_000 for c in counts.values()), counts
    assert lm.parameters_for(base, 66, 64) == count_parameters(lm.build_model(
        lm.LMConfig(model="rhn", depth=4, hidden=64), 66))


def test_generate_is_seeded_and_checks_arguments():
    torch.manual_seed(0)
    model = RHNLanguageModel(20, 16, 2)
    prompt = torch.tensor([1, 2, 3])
    a = generate(model, prompt, 30, 0.8, torch.Generator().manual_seed(1))
    b = generate(model, prompt, 30, 0.8, torch.Generator().manual_seed(1))
    assert a.shape == (30,) and torch.equal(a, b) and a.max() < 20
    with pytest.raises(ValueError, match="temperature must be positive"):
        generate(model, prompt, 5, 0.0)
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
    assert main(["generate", str(out), "--prompt", "ROMEO:", "--length", "40", "--data-dir", text]) == 0
    sample = capsys.readouterr().out
    assert sample.startswith("ROMEO:") and len(sample.rstrip("\n")) >= 40
    assert main(["generate", str(tmp_path / "nothing")]) == 2
    assert "is not a run folder" in capsys.readouterr().err


def test_cli_reproduce_rhn_depth_writes_report_and_resumes(shared_data, tmp_path, capsys):
    out = tmp_path / "sweep"
    args = ["reproduce", "rhn-depth", "--depths", "1,2", "--budget", "15000", "--epochs", "1",
            "--steps-per-epoch", "2", "--batch-size", "8", "--data-dir", str(shared_data / "text"), "--out", str(out)]
    assert main(args) == 0
    report = (out / "report.md").read_text()
    assert (out / "depth.png").stat().st_size > 10_000
    assert "| RHN | 1 |" in report and "| RHN | 2 |" in report and "| LSTM | - |" in report
    summary = json.loads((out / "summary.json").read_text())
    rows = summary["corpora"]["tinyshakespeare:char"]["rhn"]
    assert all(abs(r["parameters"] - 15_000) < 1_000 for r in rows)
    assert main(args) == 2 and "already holds a sweep" in capsys.readouterr().err
    assert main(args + ["--resume"]) == 0
    assert capsys.readouterr().out.count("done, skipped") == 3
    assert main(args[:3] + ["0,2"] + args[4:]) == 2
    assert "--depths takes positive integers" in capsys.readouterr().err
