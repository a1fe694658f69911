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


def _hand_made_study() -> dict:
    """A char-lm summary made by hand: each model's test perplexity by seed, listed in its row in the order of
    its own ``seeds`` (which differs between models), its validation perplexity (mean over the seeds)."""
    def row(model: str, tests: dict[int, float], valid: float, order: tuple[int, ...] = (0, 1, 2)) -> dict:
        values = [tests[s] for s in order]
        finite = [v for v in values if math.isfinite(v)]
        return {"model": model, "settings": {}, "hidden": 100, "parameters": 1000, "seeds": list(order),
                "test_ppl": {"mean": sum(values) / len(values), "std": float(len(finite) > 1), "values": values},
                "val_ppl": valid, "train_seconds": 10.0}

    rows = [row("chars, 0 highway", {0: 200.0, 1: 210.0, 2: 205.0}, 190.0),
            row("chars, 1 highway", {0: 190.0, 1: 196.0, 2: 201.0}, 185.0, (2, 0, 1)),   # the best on validation,
            row("chars, 2 highway", {0: 180.0, 1: 182.0, 2: 184.0}, 195.0),             # the best on test
            row("chars, 1 MLP", {0: 199.0, 1: math.nan, 2: 207.0}, math.nan),           # seed 1 diverged
            row("chars, 2 MLP", {0: 200.0, 1: 199.0, 2: 204.0}, 198.0),
            row("words (LSTM)", {0: 170.0, 1: 172.0, 2: 180.0}, 160.0, (1, 0, 2))]
    base = {"char_encoder": "compact", "layers": 2, "max_vocab": 5000, "batch_size": 20, "bptt": 35,
            "steps_per_epoch": 200, "train": {"epochs": 3}}
    return {"recipe": "char-lm", "corpus": "Corpus('hand-made')", "seconds": 60.0, "rows": rows,
            "config": {"corpus": "austen", "budget": 1_200_000, "seeds": [0, 1, 2], "tune": 0, "base": base}}


def test_char_lm_contrasts_pair_by_seed_and_choose_on_validation(tmp_path):
    """Each contrast of test perplexity is paired by seed (the rows list their seeds in different orders),
    leaves a diverged seed out of its pairs, and takes the best highway and the best character model on
    validation, where the test split would choose another; one pair gives no interval. The expected
    intervals are worked out here: mean ± t × sd / √n, t(0.975) = 12.706 for 1 degree of freedom, 4.303 for 2."""
    summary = _hand_made_study()

    def by_hand(differences, t):
        n = len(differences)
        mean = sum(differences) / n
        sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
        return mean, mean - t * sd / math.sqrt(n), mean + t * sd / math.sqrt(n)

    # 1 highway − 1 MLP over seeds 0 and 2 (the MLP's seed 1 diverged): -9, -6; sd 3 / √2, half 12.706 × 1.5.
    one = by_hand([190.0 - 199.0, 201.0 - 207.0], 12.706)
    assert one == pytest.approx((-7.5, -7.5 - 19.059, -7.5 + 19.059))
    # 2 highway − 2 MLP: -20, -17, -20; sd √3, half 4.303 × √3 / √3.
    two = by_hand([180.0 - 200.0, 182.0 - 199.0, 184.0 - 204.0], 4.303)
    assert two == pytest.approx((-19.0, -23.303, -14.697))
    # The best highway model on validation is 1 highway (185 against 195; on test 2 highway would win, 182
    # against 195.7): 1 highway − 0 highway = -10, -14, -4 (seed 2's 201 listed first in its row).
    none = by_hand([190.0 - 200.0, 196.0 - 210.0, 201.0 - 205.0], 4.303)
    # (sd = √(((-2/3)² + (-14/3)² + (16/3)²) / 2) = 5.033223, half 4.303 × 5.033223 / √3 = 12.504228)
    assert none == pytest.approx((-9.333333, -21.837561, 3.170895), abs=1e-6)
    # The best character model on validation is 1 highway too (the MLP's NaN mean is not chosen): 1 highway −
    # words = 20, 24, 21 (the words' seeds listed 1, 0, 2).
    # Each other highway model against none too, not chosen: 2 highway − 0 highway = -20, -28, -21.
    two_none = by_hand([180.0 - 200.0, 182.0 - 210.0, 184.0 - 205.0], 4.303)
    # (sd = √((3² + (-5)² + 2²) / 2) = 4.358899, half 4.303 × 4.358899 / √3 = 10.828979)
    assert two_none == pytest.approx((-23.0, -33.828979, -12.171021), abs=1e-6)
    words = by_hand([190.0 - 170.0, 196.0 - 172.0, 201.0 - 180.0], 4.303)
    # (sd = √(((-5/3)² + (7/3)² + (-2/3)²) / 2) = 2.081666, half 4.303 × 2.081666 / √3 = 5.171562)
    assert words == pytest.approx((21.666667, 16.495104, 26.838229), abs=1e-6)

    found = char_lm.contrasts(summary)
    assert [(c["a"], c["b"], c["seeds"], c["n"]) for c in found] == [
        ("chars, 1 highway", "chars, 1 MLP", [0, 2], 2), ("chars, 2 highway", "chars, 2 MLP", [0, 1, 2], 3),
        ("chars, 1 highway", "chars, 0 highway", [0, 1, 2], 3), ("chars, 2 highway", "chars, 0 highway", [0, 1, 2], 3),
        ("chars, 1 highway", "words (LSTM)", [0, 1, 2], 3)]
    for c, expected in zip(found, (one, two, none, two_none, words), strict=True):
        assert (c["mean"], c["lo"], c["hi"]) == pytest.approx(expected)
    assert found[2]["among"] == ["chars, 1 highway", "chars, 2 highway"] and found[3]["among"] == []

    lines = char_lm.verdicts(summary)
    scale = "(about 1,200,000 parameters, 600 steps of 20 × 35 words (420,000 words), 3 seeds)"
    assert lines == [
        f"highway layers against MLP layers in their place {scale}: in test perplexity, chars, 1 highway − chars, 1 "
        "MLP = -7.5 ppl [-26.6, +11.6] (95%, paired over 2 seeds): no difference resolved (left out of the pairs: "
        "chars, 1 MLP diverged with seed 1)",
        f"highway layers against MLP layers in their place {scale}: in test perplexity, chars, 2 highway − chars, 2 "
        "MLP = -19.0 ppl [-23.3, -14.7] (95%, paired over 3 seeds): the highway model lower",
        f"highway layers against none {scale}: on validation, the best model with highway layers is chars, 1 highway "
        "(valid perplexity 185.0; chars, 2 highway 195.0); in test perplexity, chars, 1 highway − chars, 0 highway "
        "= -9.3 ppl [-21.8, +3.2] (95%, paired over 3 seeds): no difference resolved",
        f"highway layers against none {scale}: in test perplexity, chars, 2 highway − chars, 0 highway = -23.0 ppl "
        "[-33.8, -12.2] (95%, paired over 3 seeds): the highway model lower",
        f"characters against words {scale}: on validation, the best character model is chars, 1 highway (valid "
        "perplexity 185.0; chars, 0 highway 190.0, chars, 2 highway 195.0, chars, 1 MLP diverged, chars, 2 MLP "
        "198.0); in test perplexity, chars, 1 highway − words (LSTM) = +21.7 ppl [+16.5, +26.8] (95%, paired over "
        "3 seeds): the word model lower"]

    char_lm.write_report(tmp_path, summary)
    report = (tmp_path / "report.md").read_text()
    assert "| chars, 1 highway − chars, 1 MLP | -7.5 | [-26.6, +11.6] | 0, 2 | no difference resolved |" in report
    assert "| chars, 2 highway − chars, 2 MLP | -19.0 | [-23.3, -14.7] | 0, 1, 2 | the highway model lower |" in report
    assert ("| chars, 1 highway − chars, 0 highway (the first chosen on validation) | -9.3 | [-21.8, +3.2] | 0, 1, 2 "
            "| no difference resolved |") in report
    assert ("| chars, 2 highway − chars, 0 highway | -23.0 | [-33.8, -12.2] | 0, 1, 2 "
            "| the highway model lower |") in report
    assert ("| chars, 1 highway − words (LSTM) (the first chosen on validation) | +21.7 | [+16.5, +26.8] | 0, 1, 2 "
            "| the word model lower |") in report
    assert "the test split chooses nothing" in report

    # One pair: the word model trained with seed 1 alone; 1 highway − words = 196 − 172, and no interval.
    summary["rows"][-1].update(seeds=[1], test_ppl={"mean": 172.0, "std": 0.0, "values": [172.0]})
    c = char_lm.contrasts(summary)[-1]
    assert (c["seeds"], c["n"], c["mean"]) == ([1], 1, 24.0)
    assert char_lm.verdicts(summary)[-1].endswith(
        "in test perplexity, chars, 1 highway − words (LSTM) = +24.0 ppl (one seed: no interval) (left out of the "
        "pairs: seeds 0, 2 trained by one of the two only)")
    char_lm.write_report(tmp_path, summary)
    assert ("| chars, 1 highway − words (LSTM) (the first chosen on validation) | +24.0 | none | 1 "
            "| one seed: no interval |") in (tmp_path / "report.md").read_text()


def _t_quantile(degrees: int) -> float:
    """Student's two-sided 95% quantile for 1, 2 or 4 degrees of freedom, from the t distribution's closed-form
    CDF (F(t) = 0.975), solved by bisection: worked out here, not read from the package's table."""
    cdf = {1: lambda t: 0.5 + math.atan(t) / math.pi,
           2: lambda t: 0.5 + t / (2 * math.sqrt(2 + t * t)),
           4: lambda t: 0.5 + 0.375 * t / math.sqrt(1 + t * t / 4) * (1 - t * t / (12 * (1 + t * t / 4)))}[degrees]
    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < 0.975 else (lo, mid)
    return lo


def test_the_report_names_the_t_of_the_seeds_its_contrasts_pair(tmp_path):
    """The report's note on its intervals said t is 12.71 for two seeds and 4.30 for three whatever the seeds:
    a study of five seeds was told of quantiles none of its intervals took. It names the t of the numbers of
    seeds its contrasts pair (the t its intervals take), here worked out from the t distribution itself."""
    assert [f"{_t_quantile(d):.2f}" for d in (1, 2, 4)] == ["12.71", "4.30", "2.78"]

    def row(model: str, tests: list[float], valid: float) -> dict:
        return {"model": model, "settings": {}, "hidden": 100, "parameters": 1000, "seeds": [0, 1, 2, 3, 4],
                "test_ppl": {"mean": sum(tests) / 5, "std": 1.0, "values": tests}, "val_ppl": valid,
                "train_seconds": 10.0}

    summary = _hand_made_study()
    summary["config"]["seeds"] = [0, 1, 2, 3, 4]
    summary["rows"] = [row("chars, 0 highway", [200.0, 210.0, 205.0, 207.0, 203.0], 190.0),
                       row("chars, 1 highway", [190.0, 196.0, 201.0, 199.0, 192.0], 185.0),
                       row("words (LSTM)", [170.0, 172.0, 180.0, 175.0, 171.0], 160.0)]
    found = char_lm.contrasts(summary)
    assert [c["n"] for c in found] == [5, 5]
    differences = [-10.0, -14.0, -4.0, -8.0, -11.0]  # 1 highway − 0 highway, seed by seed
    sd = math.sqrt(sum((d + 9.4) ** 2 for d in differences) / 4)
    assert found[0]["hi"] - found[0]["mean"] == pytest.approx(_t_quantile(4) * sd / math.sqrt(5), rel=1e-3)
    char_lm.write_report(tmp_path, summary)
    report = (tmp_path / "report.md").read_text()
    assert f"where t (Student's, for n − 1 degrees of freedom) is {_t_quantile(4):.2f} for 5 seeds paired, so" \
        in report
    assert "12.71" not in report and "4.30" not in report

    # Pairs of two and three seeds (a diverged seed left out): each t named, as each interval takes it.
    char_lm.write_report(tmp_path, _hand_made_study())
    assert (f"is {_t_quantile(1):.2f} for 2 seeds paired and {_t_quantile(2):.2f} for 3, so that a few seeds give a "
            "wide interval") in (tmp_path / "report.md").read_text()
    # One seed each: no interval, and no t.
    summary["rows"] = [{**r, "seeds": [0], "test_ppl": {"mean": r["test_ppl"]["values"][0], "std": 0.0,
                                                         "values": r["test_ppl"]["values"][:1]}}
                       for r in summary["rows"]]
    char_lm.write_report(tmp_path, summary)
    report = (tmp_path / "report.md").read_text()
    assert "with its 95% t-interval where two seeds or more pair" in report and "here none does" in report
