"""``reproduce char-lm`` and equal tuning, end to end on a small slice of real text: every model at
the budget, the ablation's models built as named, validation alone picking the tuned settings, and
a second call resuming to the same summary without training again."""

import json
import math
from dataclasses import replace

import pytest
import torch

from highwaynet.config import CharLMConfig, LMConfig, TrainConfig
from highwaynet.data.corpora import load_corpus
from highwaynet.nn import CharCNNHighway
from highwaynet.recipes import char_lm, lm
from highwaynet.recipes.tuning import draw_trials, trial_config, tune_family


@pytest.fixture
def small_corpus(shared_data, tmp_path):
    """The first 40,000 words of Austen's *Emma* as a PTB-format folder (train, valid, test)."""
    words = (shared_data / "text" / "austen" / "emma.txt").read_text(encoding="utf-8").split()[:40_000]
    folder = tmp_path / "austen-slice"
    folder.mkdir()
    for name, part in (("train", words[:32_000]), ("valid", words[32_000:36_000]), ("test", words[36_000:])):
        lines = [" ".join(part[i:i + 20]) for i in range(0, len(part), 20)]
        (folder / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def tiny_base(**settings) -> LMConfig:
    return LMConfig(**{"level": "word", "model": "lstm", "input": "chars", "layers": 1, "char_encoder": "compact",
                       "max_vocab": 400, "batch_size": 4, "bptt": 12, "steps_per_epoch": 6, "eval_batch_size": 8,
                       "train": TrainConfig(epochs=1, optimizer="adam", lr=3e-3, grad_clip=1.0), **settings})


def test_char_lm_ablation_at_one_budget_and_resume(small_corpus, tmp_path):
    config = CharLMConfig(corpus=str(small_corpus), highway=[0, 1], mlp=[1], seeds=[0, 1], budget=150_000,
                          base=tiny_base())
    out = tmp_path / "char-lm"
    summary = char_lm.run(config, out, progress=False, log=lambda s: None)
    rows = {r["model"]: r for r in summary["rows"]}
    assert list(rows) == ["chars, 0 highway", "chars, 1 highway", "chars, 1 MLP", "words (LSTM)"]
    for row in rows.values():
        assert abs(row["parameters"] - 150_000) < 0.05 * 150_000, row  # equal budgets, by the LSTM's size
        assert len(row["test_ppl"]["values"]) == 2 and all(math.isfinite(v) for v in row["test_ppl"]["values"])
    assert (out / "report.md").is_file() and (out / "char-lm.png").is_file()

    # The models are the ones named: the encoder's highway layers, or MLP layers in their place.
    corpus = load_corpus(str(small_corpus), "word", max_vocab=400)
    for _, settings in char_lm.variants(config):
        model = lm.build_model(replace(tiny_base(), **settings, hidden=32), corpus.vocab)
        encoders = [m for m in model.modules() if isinstance(m, CharCNNHighway)]
        if settings["input"] == "words":
            assert not encoders
            continue
        (encoder,) = encoders
        assert encoder.num_highway == settings["char_layers"] and encoder.highway == (not settings["char_mlp"])

    # Run again: every run is found finished, nothing trains, the summary is the same.
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("checkpoint.pt")}
    again = char_lm.run(config, out, resume=True, progress=False, log=lambda s: None)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("checkpoint.pt")} == mtimes
    assert [r["test_ppl"] for r in again["rows"]] == [r["test_ppl"] for r in summary["rows"]]


def test_trials_are_seeded_per_family_and_within_the_search_space():
    a = draw_trials("rhn", "rhn", 5, seed=0)
    assert a == draw_trials("rhn", "rhn", 5, seed=0) and a != draw_trials("rhn", "rhn", 5, seed=1)
    assert draw_trials("lstm", "lstm", 3, seed=0) == draw_trials("lstm", "lstm", 5, seed=0)[:3]  # a prefix
    for trial in a:
        assert 3e-4 <= trial["lr"] <= 1e-2 and 0.0 <= trial["dropout"] <= 0.5
        assert trial["depth"] in (1, 2, 3, 4, 6, 8, 10)
    config = trial_config(tiny_base(model="rhn"), a[0], seed=7)
    assert (config.train.lr, config.input_dropout, config.state_dropout, config.output_dropout, config.depth,
            config.train.seed) == (a[0]["lr"], a[0]["dropout"], a[0]["dropout"], a[0]["dropout"], a[0]["depth"], 7)


def test_tuning_picks_on_validation_and_reruns_the_best_with_every_seed(small_corpus, tmp_path):
    corpus = load_corpus(str(small_corpus), "word", max_vocab=400)
    base = tiny_base(input="words", model="lstm")
    tuned = tune_family("lstm", base, corpus, 100_000, 3, [0, 1], tmp_path / "lstm", lambda s: None, False)
    vals = [t["best_val"] for t in tuned["trials"]]
    assert tuned["best"] == vals.index(min(vals))  # validation alone decides
    assert len(tuned["test"]["values"]) == 2 and tuned["test"]["values"][0] == tuned["trials"][tuned["best"]]["test"]
    assert (tmp_path / "lstm" / f"trial{tuned['best']}-seed1" / "checkpoint.pt").is_file()

    # More trials, resumed: the first three are found done; the seeds follow the best, whichever it is.
    more = tune_family("lstm", base, corpus, 100_000, 5, [0, 1], tmp_path / "lstm", lambda s: None, False)
    assert more["trials"][:3] == tuned["trials"]
    assert (tmp_path / "lstm" / f"trial{more['best']}-seed1" / "checkpoint.pt").is_file()
    assert all(abs(t["parameters"] - 100_000) < 5_000 for t in tuned["trials"])
    torch.testing.assert_close(torch.tensor(tuned["test"]["mean"]), torch.tensor(vals and
                               sum(tuned["test"]["values"]) / 2))
    json.dumps(tuned)  # what the summary stores is JSON


def test_the_report_says_what_beats_what_against_the_seeds_spread():
    from highwaynet.report import compare

    assert compare("a", {"mean": 2.0, "std": 0.1}, "b", {"mean": 1.0, "std": 0.1}) == \
        "b beats a by 1.000, beyond the seeds' spread"
    assert compare("a", {"mean": 1.0, "std": 0.3}, "b", {"mean": 1.5, "std": 0.3}, 1) == \
        "a beats b by 0.5, within the seeds' spread"
