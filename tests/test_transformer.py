"""The causal Transformer: causal in fact, its connections and norms where the settings put them, its
initialisation, training with the Trainer's language-model task, sampling, compiling; and the
transformer-depth study end to end on a small corpus."""

import json
import math
import statistics

import pytest
import torch
from conftest import reference_combine

from highwaynet.analysis import gate_modules, lesion, record_gates
from highwaynet.cli import main
from highwaynet.data.corpora import Corpus
from highwaynet.models import CausalTransformer
from highwaynet.models.lm import generate
from highwaynet.models.transformer import CONNECTIONS, CausalSelfAttention, TransformerBlock
from highwaynet.training import LanguageModelTask, TrainConfig, Trainer


@pytest.mark.parametrize("norm, residual", [(norm, residual) for norm in ("pre", "post", "none")
                                             for residual in CONNECTIONS if residual != "deepnorm" or norm == "post"])
def test_a_position_never_sees_what_comes_after_it(norm, residual):
    torch.manual_seed(0)
    model = CausalTransformer(11, 16, 2, heads=2, context=12, residual=residual, norm=norm).eval()
    with torch.no_grad():  # (ReZero starts at the identity, LayerScale near it: let their branches in)
        for block in model.blocks:
            for connection in (block.attn, block.mlp):
                for p in connection.combine.parameters():
                    if p.dim() < 2 and residual in ("rezero", "layerscale"):
                        p.fill_(0.5)
    tokens = torch.randint(0, 11, (10, 3))
    changed = tokens.clone()
    changed[6:] = (changed[6:] + 1) % 11
    a, _ = model(tokens)
    b, _ = model(changed)
    assert torch.allclose(a[:6], b[:6], atol=1e-6) and not torch.allclose(a[6:], b[6:])


F64 = torch.float64


def layer_norm(v, norm):
    mean, var = v.mean(-1, keepdim=True), v.var(-1, unbiased=False, keepdim=True)
    return (v - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def attention(v, a):
    """Causal multi-head self-attention written out: (B, T, D) -> (B, T, D)."""
    b, t, d = v.shape
    q, k, w = (v @ a.qkv.weight.t() + a.qkv.bias).split(d, dim=-1)
    heads = lambda z: z.view(b, t, a.heads, d // a.heads).transpose(1, 2)  # noqa: E731
    q, k, w = heads(q), heads(k), heads(w)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d // a.heads)
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), -math.inf)
    y = (scores.softmax(-1) @ w).transpose(1, 2).reshape(b, t, d)
    return y @ a.proj.weight.t() + a.proj.bias


def mlp(v, m):
    hidden = v @ m[0].weight.t() + m[0].bias
    return (0.5 * hidden * (1 + torch.erf(hidden / math.sqrt(2)))) @ m[2].weight.t() + m[2].bias


def reference_logits(model, tokens, norm, final):
    """The model's logits written out for its placement: pre-LN x ⊕ F(LN(x)), post-LN LN(x ⊕ F(x)),
    none x ⊕ F(x); then the final LayerNorm where ``final``, then the tied decoder."""
    x = tokens.t()
    h = model.embed.weight[x] + model.position.weight[:x.shape[1]]
    for block in model.blocks:
        for connection, sublayer, post_norm in ((block.attn, attention, block.norm_attn),
                                                (block.mlp, mlp, block.norm_mlp)):
            inner = connection.sublayer
            if norm == "pre":
                h = reference_combine(connection.combine, sublayer(layer_norm(h, inner[0]), inner[1]), h)
            elif norm == "post":
                h = layer_norm(reference_combine(connection.combine, sublayer(h, inner), h), post_norm)
            else:
                h = reference_combine(connection.combine, sublayer(h, inner), h)
    if final:
        h = layer_norm(h, model.final_norm)
    return (h @ model.embed.weight.t()).transpose(0, 1)


PLACEMENTS = [("pre", "residual", None), ("post", "residual", None), ("none", "residual", None),
              ("none", "rezero", None), ("none", "rezero", True), ("pre", "highway", None), ("pre", "gtrxl", None),
              ("pre", "fixed", None), ("pre", "layerscale", None), ("pre", "rezero", None), ("post", "deepnorm", None),
              ("pre", "residual", False)]


@pytest.mark.parametrize("norm, residual, final_norm", PLACEMENTS)
def test_each_placement_is_its_reference_forward(norm, residual, final_norm):
    torch.manual_seed(0)
    model = CausalTransformer(13, 8, 2, heads=2, context=6, residual=residual, norm=norm, final_norm=final_norm,
                              mlp_hidden=12).double().eval()
    with torch.no_grad():  # away from the initialisation: every norm, gain, bias, α and γ shows in the output
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    final = norm != "none" if final_norm is None else final_norm
    assert isinstance(model.final_norm, torch.nn.LayerNorm) == final
    tokens = torch.randint(0, 13, (6, 3))
    logits, _ = model(tokens)
    assert (logits - reference_logits(model, tokens, norm, final)).abs().max() < 1e-10


def test_initialised_as_documented():
    torch.manual_seed(0)
    layers, bias = 8, -3.0
    scaled = 0.02 / math.sqrt(2 * layers)
    for residual in ("highway", "gtrxl", "fixed", "layerscale", "rezero", "residual"):
        model = CausalTransformer(50, 64, layers, heads=4, context=32, residual=residual,
                                  gate_bias=bias if residual in ("highway", "gtrxl", "fixed") else None)
        for name, p in model.named_parameters():
            if name.endswith(("attn.sublayer.1.proj.weight", "mlp.sublayer.1.2.weight")):  # GPT-2's output projections
                assert abs(p.std().item() - scaled) < 0.1 * scaled, name
            elif p.dim() == 2:  # every other matrix, the gates' included: N(0, 0.02)
                assert abs(p.std().item() - 0.02) < 0.1 * 0.02 and abs(p.mean().item()) < 2e-3, name
            elif name.endswith("combine.proj.bias") or name.endswith("combine.z_bias"):
                assert p.eq(bias).all(), name
            elif name.endswith("combine.alpha"):
                assert p.item() == 0.0
            elif name.endswith("combine.gamma"):
                assert p.eq(0.1).all()  # Touvron et al.'s ε for 8 blocks
            elif ".norm" in name or "sublayer.0." in name or name.startswith("final_norm"):
                assert p.eq(1.0 if name.endswith("weight") else 0.0).all(), name  # LayerNorms: the identity
            else:
                assert name.endswith("bias") and p.eq(0).all(), name
        assert model.decoder.weight is model.embed.weight  # tied
    deep = CausalTransformer(50, 64, 48, heads=4, context=32, residual="layerscale")
    assert deep.blocks[0].attn.combine.gamma.eq(1e-6).all()  # ε for deeper than 24 blocks


def test_deepnorm_up_weights_the_stream_and_down_scales_its_branches():
    torch.manual_seed(0)
    layers = 6
    model = CausalTransformer(50, 64, layers, heads=4, context=32, residual="deepnorm", norm="post")
    beta = (8 * layers) ** -0.25
    for block in model.blocks:
        assert block.attn.combine.alpha == pytest.approx((2 * layers) ** 0.25)
        qkv = block.attn.sublayer.qkv.weight
        assert abs(qkv[:128].std().item() - 0.02) < 2e-3  # queries and keys: not scaled
        for weight in (qkv[128:], block.attn.sublayer.proj.weight, block.mlp.sublayer[0].weight,
                       block.mlp.sublayer[2].weight):  # values, output projection, both MLP layers: β
            assert abs(weight.std().item() - 0.02 * beta) < 0.1 * 0.02 * beta
    with pytest.raises(ValueError, match="deepnorm.*needs norm='post'"):
        CausalTransformer(50, 8, 2, heads=2, residual="deepnorm", norm="pre")


def test_the_gates_start_near_their_bias_and_a_lesion_carries_the_embeddings():
    torch.manual_seed(0)
    model = CausalTransformer(50, 64, 8, heads=4, context=32, residual="highway")
    gates = gate_modules(model)
    assert len(gates) == 16  # attention and MLP of each block
    tokens = torch.randint(0, 50, (16, 2))
    with record_gates(model) as record:
        model(tokens)
    assert record.mean_per_gate().sub(0.12).abs().max() < 0.02  # σ(−2), the gates' matrices small (N(0, 0.02))
    with lesion(model, range(16)):  # every branch shut: the blocks carry the embeddings through
        shut, _ = model(tokens)
    assert not torch.allclose(shut, model(tokens)[0])


def test_an_optimiser_of_nanogpts_decays_matrices_only():
    corpus = small_corpus()
    model = CausalTransformer(len(corpus.vocab), 8, 2, heads=2, context=16, residual="highway")
    task = LanguageModelTask(corpus, batch_size=8, bptt=16, seed=0, eval_batch_size=4, carry_state=False)
    config = TrainConfig(epochs=1, optimizer="adamw", lr=1e-3, weight_decay=0.1, weight_decay_on="matrices",
                         beta2=0.99, device="cpu")
    groups = Trainer(model, task, config, progress=False, log=lambda line: None).optimizer.param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = sorted(names[id(p)] for p in groups[0]["params"])
    kept = sorted(names[id(p)] for p in groups[1]["params"])
    assert groups[0]["weight_decay"] == 0.1 and groups[1]["weight_decay"] == 0.0
    assert all(g["betas"] == (0.9, 0.99) for g in groups)
    assert "embed.weight" in decayed and "blocks.0.attn.combine.proj.weight" in decayed
    assert all(model.get_parameter(n).dim() >= 2 for n in decayed)
    assert {"blocks.0.attn.combine.proj.bias", "blocks.0.attn.sublayer.0.weight", "blocks.1.mlp.sublayer.1.0.bias",
            "final_norm.weight"} <= set(kept) and all(model.get_parameter(n).dim() < 2 for n in kept)
    assert len(decayed) + len(kept) == len(names)
    default = Trainer(model, task, TrainConfig(optimizer="adamw", device="cpu"), progress=False,
                      log=lambda line: None).optimizer.param_groups  # (PyTorch's: one group, β2 0.999)
    assert len(default) == 1 and default[0]["betas"] == (0.9, 0.999)


@pytest.mark.parametrize("make, error, message", [
    (lambda: CausalSelfAttention(8, 0), ValueError, "heads must be positive"),  # (was a ZeroDivisionError)
    (lambda: CausalSelfAttention(8, True), TypeError, "heads must be an int"),  # (was taken as one head)
    (lambda: CausalSelfAttention(8, 2, dropout=1.5), ValueError, "dropout must be a probability"),
    (lambda: CausalSelfAttention(8, 2)(torch.randn(3, 8)), ValueError, r"expects x of shape \(B, T, 8\)"),
    (lambda: CausalSelfAttention(8, 2)(torch.ones(1, 3, 8, dtype=torch.long)), TypeError, "floating-point"),
    (lambda: TransformerBlock(8.0, 2), TypeError, "dim must be an int"),
    (lambda: TransformerBlock(8, 2, norm=None), ValueError, "norm must be one of"),
    (lambda: TransformerBlock(8, 2, residual="highway", gate_bias=math.nan), ValueError, "gate_bias must be finite"),
    (lambda: TransformerBlock(8, 2, residual="layerscale", num_layers=0), ValueError, "num_layers must be positive"),
])
def test_the_blocks_refuse_bad_arguments_by_name(make, error, message):
    with pytest.raises(error, match=message):
        make()


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


def test_gtrxl_is_the_papers_gate_with_its_relu_and_its_bias():
    from highwaynet.nn import GRUGate

    model = CausalTransformer(20, 8, 2, heads=2, context=6, residual="gtrxl", gate_bias=-1.5)
    combines = [c for block in model.blocks for c in (block.attn.combine, block.mlp.combine)]
    assert len(combines) == 4 and all(isinstance(c, GRUGate) and c.relu is True for c in combines)
    assert all(c.z_bias.eq(-1.5).all() for c in combines)


def test_compiles_to_eagers_outputs():
    torch.manual_seed(0)
    model = CausalTransformer(20, 16, 2, heads=2, context=8, residual="gtrxl").eval()
    tokens = torch.randint(0, 20, (8, 3))
    torch.testing.assert_close(torch.compile(model, fullgraph=True)(tokens)[0], model(tokens)[0], rtol=1e-5,
                               atol=1e-5)


def test_the_transformer_depth_study_end_to_end(tmp_path, capfd, shared_data):
    """A tiny study on Tiny Shakespeare: three variants at two depths, the grid extended at its edge, the
    test split, the contrasts, the gates over training, its report, a run sampled from, and the sweep
    run again going on without training again. (Two runs side by side, then one process: capfd sees
    what the worker processes print too.)"""
    out = tmp_path / "study"
    argv = ["reproduce", "transformer-depth", "--depths", "1,2", "--variants",
            "pre-residual,pre-highway,pre-residual-matched-highway", "--lrs", "0.0001,0.0002", "--extend", "1",
            "--seeds", "1,2", "--epochs", "2", "--steps-per-epoch", "3", "--hidden", "16", "--bptt", "16",
            "--batch-size", "4", "--eval-batch-size", "512", "--device", "cpu", "--data-dir", str(shared_data / "text"),
            "--out", str(out)]
    assert main(argv) == 0
    printed = capfd.readouterr().out
    assert printed.count("blocks  ") == 2 * 3 and "wrote" in printed
    summary = json.loads((out / "summary.json").read_text())
    rows = {(r["depth"], r["variant"]): r for r in summary["rows"]}
    assert len(rows) == 6
    for row in rows.values():  # rates this small: the pick sits at the upper edge, and the grid grows by its ratio
        assert list(row["search"]) == ["0.0001", "0.0002", "0.0004"] and row["extended"] == 1 and row["lr"] == 4e-4
        assert len(row["test_loss"]) == 2 and all(math.isfinite(v) for v in row["test_loss"])
        assert all(len(c) == 2 for c in row["curves"])
    highway, matched = rows[2, "pre-highway"], rows[2, "pre-residual-matched-highway"]
    assert abs(matched["parameters"] - highway["parameters"]) <= 33 * 2  # (a hidden unit: 33 parameters a block)
    assert matched["mlp_hidden"] > 4 * 16
    assert highway["gate_bias"] == pytest.approx(-1.665, abs=1e-3)  # (1 − σ(b))^4 = 1/2
    gates = highway["gates"]
    assert len(gates["init"]["attention"]) == 2 and len(gates["epochs"]) == 2 and len(gates["epochs"][1]["mlp"]) == 2
    assert all(0 < g < 0.3 for g in gates["init"]["mlp"])
    assert rows[2, "pre-residual"]["gates"] is None
    kinds = {(c["kind"], c["a"], c["a_depth"], c["b_depth"]) for c in summary["contrasts"]}
    assert ("learned gate vs parameter-matched sum", "pre-highway", 2, 2) in kinds
    assert ("vs pre-LN sum at 1 blocks", "pre-highway", 2, 1) in kinds
    assert all(c["n"] == 2 and c["lo"] <= c["mean"] <= c["hi"] for c in summary["contrasts"])
    assert summary["cpu_seconds"] > 0 and summary["tokens_per_run"] == 6 * 4 * 16
    report = (out / "report.md").read_text()
    assert "## The pre-registered contrasts" in report and "**What it found:**" in report
    assert report.index("**What it found:**") < report.index("## Test loss by depth and variant")
    assert (out / "depth.png").stat().st_size > 10_000 and (out / "gates.png").is_file()
    run = out / "depth2" / "pre-highway" / "lr0.0004-seed1"
    assert json.loads((run / "config.json").read_text())["config"]["train"]["weight_decay_on"] == "matrices"
    assert main(["generate", str(run), "--length", "20", "--prompt", "ROMEO:"]) == 0
    assert capfd.readouterr().out.startswith("ROMEO:")
    assert main([*argv, "--resume", "--workers", "1"]) == 0
    assert capfd.readouterr().out.count("done, skipped") == 2 * 3 * 5


def test_paired_intervals_and_verdicts():
    from highwaynet.recipes.transformer_depth import contrasts, paired_interval

    # t(0.975, 4) = 2.776: mean 0.1, sd 0.0158..., half-width 2.776 × sd / √5
    differences = [0.08, 0.10, 0.12, 0.09, 0.11]
    interval = paired_interval(differences)
    half = 2.776 * statistics.stdev(differences) / math.sqrt(5)
    assert interval["mean"] == pytest.approx(0.1) and interval["hi"] - interval["mean"] == pytest.approx(half)

    def row(depth, variant, losses, diverged=None):
        return {"depth": depth, "variant": variant, "test_loss": losses, "diverged": diverged or [False] * 5}

    base = [2.50, 2.52, 2.49, 2.51, 2.50]
    summary = {"config": {"depths": [2], "variants": ["pre-residual", "pre-highway", "pre-fixed"]},
               "rows": [row(2, "pre-residual", base), row(2, "pre-highway", [v - 0.05 for v in base]),
                        row(2, "pre-fixed", [v - 0.05 + d for v, d in zip(base, [0.02, -0.03, 0.01, 0.02, -0.01],
                                                                            strict=True)],
                            [False, False, False, False, True])]}
    found = {(c["a"], c["b"]): c for c in contrasts(summary)}
    assert found["pre-highway", "pre-residual"]["verdict"] == "pre-highway lower"
    fixed = found["pre-highway", "pre-fixed"]
    assert fixed["n"] == 4 and fixed["verdict"] == "no difference resolved"  # (the diverged seed left out)


def test_contrasts_across_depths_name_the_depth_and_the_planned_ones_are_there():
    from highwaynet.recipes.transformer_depth import contrast_text, contrasts, verdicts

    def row(depth, variant, losses):
        return {"depth": depth, "variant": variant, "test_loss": losses, "diverged": [False] * len(losses)}

    base = [2.50, 2.52, 2.49, 2.51, 2.50]
    variants = ["pre-residual", "none-rezero", "none-rezero-final-norm"]
    summary = {"config": {"depths": [2, 12], "variants": variants}, "unigram_nats": 3.3,
               "rows": [row(2, "pre-residual", base), row(12, "pre-residual", [v + 0.1 for v in base]),
                        row(2, "none-rezero", [v + 0.4 for v in base]),
                        row(2, "none-rezero-final-norm", [v + 0.1 for v in base]),
                        row(12, "none-rezero", [3.25, 3.15, 3.22, 3.3, 3.24]),
                        row(12, "none-rezero-final-norm", [v + 0.2 for v in base])]}
    found = {(c["a"], c["a_depth"], c["b"], c["b_depth"]): c for c in contrasts(summary)}
    # deeper is worse for the same variant: the verdict says which depth, not just "pre-residual lower"
    deeper = found["pre-residual", 12, "pre-residual", 2]
    assert deeper["verdict"] == "pre-residual at 2 blocks lower"
    assert contrast_text(deeper).endswith("nats: pre-residual at 2 blocks lower")
    assert found["none-rezero", 12, "pre-residual", 2]["verdict"] == "pre-residual at 2 blocks lower"
    # issue 55's ReZero story: the final LayerNorm added to ReZero, at each depth
    final = found["none-rezero-final-norm", 2, "none-rezero", 2]
    assert final["kind"] == "final LayerNorm added to ReZero" and final["verdict"] == "none-rezero-final-norm lower"
    assert ("none-rezero-final-norm", 12, "none-rezero", 12) in found
    summary["contrasts"] = contrasts(summary)
    lines = verdicts(summary)
    # 12 blocks of ReZero: 4 of 5 seeds within 0.1 nats below the characters' frequencies (3.3), none above
    assert ("12 blocks, none-rezero: did not train on 4 of 5 seeds (0 diverged, 4 tested less than 0.1 nats better "
            "than the characters' frequencies, 3.300)") in lines


def test_the_gates_means_over_training_are_in_each_epochs_metrics():
    torch.manual_seed(0)
    corpus = small_corpus()
    model = CausalTransformer(len(corpus.vocab), 8, 2, heads=2, context=16, residual="rezero", norm="pre")
    task = LanguageModelTask(corpus, batch_size=8, bptt=16, seed=0, eval_batch_size=4, carry_state=False)
    trainer = Trainer(model, task, TrainConfig(epochs=2, optimizer="adam", lr=1e-2, device="cpu"), progress=False,
                      log=lambda line: None, gate_means=True)
    history = trainer.fit()
    gates = {k: v for k, v in history[-1].items() if k.startswith("gate/")}
    assert list(gates) == [f"gate/blocks.{b}.{part}.combine.gate" for b in range(2) for part in ("attn", "mlp")]
    alphas = [model.blocks[b].get_submodule(part).combine.alpha.item() for b in range(2) for part in ("attn", "mlp")]
    assert list(gates.values()) == pytest.approx(alphas, abs=1e-6) and all(a != 0 for a in alphas)  # α moved
    plain = Trainer(model, task, TrainConfig(epochs=1, device="cpu"), progress=False, log=lambda line: None)
    assert not any(k.startswith("gate/") for k in plain.fit()[-1])  # (only where asked)


def test_a_validation_reads_its_windows_and_the_test_split_is_read_whole():
    corpus = small_corpus()
    task = LanguageModelTask(corpus, batch_size=8, bptt=16, seed=0, eval_batch_size=4, carry_state=False,
                             eval_windows=2)
    assert len(list(task.batches("val", 0))) == 2
    assert len(list(task.batches("test", 0))) == math.ceil((len(corpus.test) // 4 - 1) / 16)


def test_a_study_refuses_what_it_cannot_run():
    from highwaynet.config import TransformerDepthConfig
    from highwaynet.config.text import parse_variant

    assert parse_variant("post-deepnorm") == {"norm": "post", "residual": "deepnorm", "matched": None,
                                              "final_norm": None}
    assert parse_variant("none-rezero-final-norm")["final_norm"] is True
    with pytest.raises(ValueError, match="variants are NORM-KIND"):
        parse_variant("pre-dense")
    with pytest.raises(ValueError, match="write post-deepnorm"):
        parse_variant("pre-deepnorm")
    with pytest.raises(ValueError, match="widens a plain residual model"):
        parse_variant("pre-highway-matched-gtrxl")
    with pytest.raises(ValueError, match="which the variants must include"):
        TransformerDepthConfig(variants=["pre-residual", "pre-residual-matched-gtrxl"])
    with pytest.raises(ValueError, match="search_seed 1 is one of the seeds"):
        TransformerDepthConfig(search_seed=1)
    with pytest.raises(ValueError, match="two or more different positive rates"):
        TransformerDepthConfig(lrs=[1e-3])
