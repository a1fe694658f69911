"""The causal Transformer: causal in fact, its connections and norms where the settings put them, its
initialisation, training with the Trainer's language-model task, sampling, compiling; and the
transformer-depth study end to end on a small corpus."""

import json
import math

import pytest
import torch

from highwaynet.analysis import gate_modules, lesion, record_gates
from highwaynet.cli import main
from highwaynet.data.corpora import Corpus
from highwaynet.models import CausalTransformer
from highwaynet.models.lm import generate
from highwaynet.training import LanguageModelTask, TrainConfig, Trainer


@pytest.mark.parametrize("residual", ["residual", "highway", "gtrxl", "rezero"])
@pytest.mark.parametrize("norm", ["pre", "post", "none"])
def test_a_position_never_sees_what_comes_after_it(residual, norm):
    torch.manual_seed(0)
    model = CausalTransformer(11, 16, 2, heads=2, context=12, residual=residual, norm=norm).eval()
    with torch.no_grad():
        for block in model.blocks:  # (ReZero starts at the identity: let its branches in)
            for connection in (block.attn, block.mlp):
                if residual == "rezero":
                    connection.alpha.fill_(0.5)
    tokens = torch.randint(0, 11, (10, 3))
    changed = tokens.clone()
    changed[6:] = (changed[6:] + 1) % 11
    a, _ = model(tokens)
    b, _ = model(changed)
    assert torch.allclose(a[:6], b[:6], atol=1e-6) and not torch.allclose(a[6:], b[6:])


def test_layer_norms_sit_where_the_setting_says():
    def norms(model):
        return sorted(name for name, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm))

    pre = norms(CausalTransformer(11, 8, 1, heads=2, context=4, norm="pre"))
    assert pre == ["blocks.0.attn.sublayer.0", "blocks.0.mlp.sublayer.0", "final_norm"]
    assert norms(CausalTransformer(11, 8, 1, heads=2, context=4, norm="post")) == ["blocks.0.norm_attn",
                                                                                   "blocks.0.norm_mlp"]
    assert norms(CausalTransformer(11, 8, 1, heads=2, context=4, norm="none")) == []


def test_initialised_as_gpt2_and_its_gates_as_built():
    torch.manual_seed(0)
    model = CausalTransformer(50, 64, 8, heads=4, context=32, residual="highway")
    std = {name: p.std().item() for name, p in model.named_parameters() if p.dim() == 2}
    assert abs(std["embed.weight"] - 0.02) < 2e-3 and abs(std["position.weight"] - 0.02) < 3e-3
    scaled = 0.02 / math.sqrt(2 * 8)
    assert abs(std["blocks.3.attn.sublayer.1.proj.weight"] - scaled) < 1e-3
    assert abs(std["blocks.3.mlp.sublayer.1.2.weight"] - scaled) < 1e-3
    assert model.decoder.weight is model.embed.weight  # tied
    assert all(block.attn.gate_proj.bias.eq(-2.0).all() for block in model.blocks)
    gates = gate_modules(model)
    assert len(gates) == 16  # attention and MLP of each block
    tokens = torch.randint(0, 50, (16, 2))
    with record_gates(model) as record:
        model(tokens)
    assert record.mean_per_gate().sub(0.12).abs().max() < 0.05
    with lesion(model, range(16)):  # every branch shut: the blocks carry the embeddings through
        shut, _ = model(tokens)
    assert not torch.allclose(shut, model(tokens)[0])


def test_state_is_the_context_and_a_long_prompt_goes_in_pieces():
    torch.manual_seed(0)
    model = CausalTransformer(11, 16, 2, heads=2, context=8).eval()
    tokens = torch.randint(0, 11, (6, 2))
    whole, state = model(tokens)
    assert torch.equal(state, tokens[-7:])  # the last context - 1 tokens
    first, carried = model(tokens[:4])
    rest, _ = model(tokens[4:], carried)  # the rest, attending to what came before
    torch.testing.assert_close(torch.cat([first, rest]), whole, rtol=1e-5, atol=1e-6)
    long, state = model(torch.randint(0, 11, (30, 2)))
    assert long.shape == (30, 2, 11) and state.shape == (7, 2)
    assert generate(model, torch.tensor([1, 2, 3]), 20, 0.8, torch.Generator().manual_seed(0)).shape == (20,)
    with pytest.raises(ValueError, match="multiple of heads"):
        CausalTransformer(11, 10, 1, heads=4)
    with pytest.raises(ValueError, match="residual must be one of"):
        CausalTransformer(11, 8, 1, heads=2, residual="dense")


def small_corpus() -> Corpus:
    text = "the cat sat on the mat. " * 200
    vocab = sorted(set(text))
    ids = torch.tensor([vocab.index(c) for c in text])
    return Corpus("cats", "char", vocab, ids[:4000], ids[4000:4400], ids[4400:])


def test_trains_with_the_language_model_task_each_window_alone():
    torch.manual_seed(0)
    corpus = small_corpus()
    model = CausalTransformer(len(corpus.vocab), 32, 2, heads=4, context=16, residual="highway")
    task = LanguageModelTask(corpus, batch_size=8, bptt=16, seed=0, eval_batch_size=4, carry_state=False)
    trainer = Trainer(model, task, TrainConfig(epochs=3, optimizer="adamw", lr=3e-3, device="cpu", warmup_steps=20),
                      progress=False, log=lambda line: None)
    history = trainer.fit()
    assert history[-1]["val_loss"] < 0.5 * history[0]["train_loss"]  # a repeating sentence: learnt
    assert task._states == {}  # nothing carried from window to window
    assert trainer.steps == sum(1 for _ in task.batches("train", 0)) * 3


def test_the_warm_up_by_steps_ramps_the_rate_then_holds_it():
    corpus = small_corpus()
    model = CausalTransformer(len(corpus.vocab), 8, 1, heads=2, context=16)
    task = LanguageModelTask(corpus, batch_size=8, bptt=16, seed=0, eval_batch_size=4, carry_state=False)
    trainer = Trainer(model, task, TrainConfig(epochs=1, optimizer="adam", lr=1e-2, device="cpu", warmup_steps=4),
                      progress=False, log=lambda line: None)
    seen = []
    step = trainer._train_step
    trainer._train_step = lambda batch, weight=1.0: seen.append(trainer.optimizer.param_groups[0]["lr"]) or \
        step(batch, weight)
    trainer.fit()
    assert seen[:6] == pytest.approx([2.5e-3, 5e-3, 7.5e-3, 1e-2, 1e-2, 1e-2])


def test_compiles_to_eagers_outputs():
    torch.manual_seed(0)
    model = CausalTransformer(20, 16, 2, heads=2, context=8, residual="gtrxl").eval()
    tokens = torch.randint(0, 20, (8, 3))
    torch.testing.assert_close(torch.compile(model, fullgraph=True)(tokens)[0], model(tokens)[0], rtol=1e-5,
                               atol=1e-5)


def test_the_transformer_depth_study_end_to_end(tmp_path, capsys, shared_data):
    """A tiny study on Tiny Shakespeare: every variant at two depths, its report, a run sampled from,
    and the sweep resumed without training again."""
    out = tmp_path / "study"
    argv = ["reproduce", "transformer-depth", "--depths", "1,3", "--lrs", "0.003", "--seeds", "0,1", "--epochs", "2",
            "--steps-per-epoch", "3", "--hidden", "16", "--bptt", "16", "--batch-size", "4", "--eval-batch-size", "512",
            "--device", "cpu", "--data-dir", str(shared_data / "text"), "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.count("blocks  ") == 2 * 5 and "wrote" in printed
    summary = json.loads((out / "summary.json").read_text())
    rows = summary["rows"]
    assert len(rows) == 10 and {r["variant"] for r in rows} == {"post-residual", "pre-residual", "pre-highway",
                                                               "pre-gtrxl", "none-rezero"}
    highway = next(r for r in rows if r["variant"] == "pre-highway" and r["depth"] == 3)
    assert len(highway["gates"]["attention"]) == 3 and all(0 < g < 1 for g in highway["gates"]["mlp"])
    assert next(r for r in rows if r["variant"] == "pre-residual")["gates"] is None
    assert all(len(c) == 2 for r in rows for c in r["curves"])
    report = (out / "report.md").read_text()
    assert "![validation loss against steps](depth.png)" in report and "**What it found:**" in report
    assert (out / "depth.png").stat().st_size > 10_000 and (out / "gates.png").is_file()
    run = out / "depth3" / "pre-gtrxl" / "lr0.003-seed1"
    assert main(["generate", str(run), "--length", "20", "--prompt", "ROMEO:"]) == 0
    assert capsys.readouterr().out.startswith("ROMEO:")
    assert main([*argv, "--resume"]) == 0
    assert capsys.readouterr().out.count("done, skipped") == 2 * 5 * 2
