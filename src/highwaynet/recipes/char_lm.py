"""Reproduction: character-aware language models (Kim, Jernite, Sontag & Rush, AAAI 2016) and their
ablation on a word-level corpus: words read by a character CNN with 0, 1 or 2 highway layers, with
the same numbers of MLP layers in the highway layers' place, and a word-level LSTM; every model at
about the same parameter count (its LSTM's state size chosen to fit the budget), several seeds.

``highwaynet reproduce char-lm`` runs it (default: Jane Austen's novels, CPU-sized; ``--full`` the
paper's sizes) and writes ``char-lm.png``, ``report.md`` and ``summary.json``. With ``tune``, each
model's settings are first chosen by an equal random search (:mod:`.tuning`).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from ..config import CharLMConfig, LMConfig
from ..data.corpora import load_corpus
from ..report import (
    FIGURE_WIDTH,
    diverged,
    findings,
    loss_cell,
    markdown_table,
    paired_resolves,
    paired_text,
    save_figure,
    seeds_cell,
    subplots,
)
from ..training.progress import SweepProgress
from ..training.run_dir import finish_sweep, paired_differences, run_once, start_sweep, t95, write_text
from . import lm
from .tuning import trial_config, tune_family

__all__ = ["CharLMConfig", "contrasts", "run", "variants", "verdicts", "write_report"]


def variants(config: CharLMConfig) -> list[tuple[str, dict[str, Any]]]:
    """``(name, settings)`` of each model the study trains: ``base`` with these settings replaced."""
    chars = [(f"chars, {n} highway", {"input": "chars", "char_layers": n, "char_mlp": False}) for n in config.highway]
    chars += [(f"chars, {n} MLP", {"input": "chars", "char_layers": n, "char_mlp": True}) for n in config.mlp if n]
    return chars + ([("words (LSTM)", {"input": "words", "tie_weights": True})] if config.word_lstm else [])


def _slug(name: str) -> str:
    return name.replace(" (LSTM)", "-lstm").replace(", ", "-").replace(" ", "-")


def run(config: CharLMConfig, out: str | Path = "runs/char-lm", *, resume: bool = False, restart: bool = False,
        data_dir: str | Path | None = None, download: bool = False, log=print, progress: bool = True
        ) -> dict[str, Any]:
    """Train every model into ``out/<model>/seed<S>`` (and ``out/<model>/tune-*`` when tuning), then
    write ``summary.json``, ``char-lm.png`` and ``report.md``."""
    config = config.resolved()
    out, config = start_sweep(out, "char-lm", config, resume=resume, restart=restart, log=log)
    start = time.perf_counter()
    corpus = load_corpus(config.corpus, "word", data_dir, download=download, max_vocab=config.base.max_vocab)
    models = variants(config)
    runs_each = (config.tune + len(config.seeds) - 1) if config.tune else len(config.seeds)
    sweep = SweepProgress(len(models) * runs_each)
    rows = []
    for name, settings in models:
        base = LMConfig(**{**asdict(config.base), **settings, "corpus": config.corpus})
        base.train.seed = config.seeds[0]
        folder = out / _slug(name)
        if config.tune:
            tuned = tune_family(name, base, corpus, config.budget, config.tune, config.seeds, folder, log,
                                progress, sweep)
            base = trial_config(base, tuned["best_settings"])
        base.hidden = lm.hidden_for_budget(base, corpus.vocab, config.budget)
        results = []
        for seed in config.seeds:
            one = LMConfig(**asdict(base))
            one.train.seed = seed
            run_dir = folder / f"seed{seed}"
            if config.tune:  # the tuned settings' runs: the search's own for its seed
                best = tuned["best"]
                run_dir = folder / (f"trial{best}" if seed == config.seeds[0] else f"trial{best}-seed{seed}")
            results.append(cast(dict, run_once(
                run_dir, lambda resume, one=one, run_dir=run_dir: lm.run(one, run_dir, resume=resume, corpus=corpus,
                                                                         log=log, progress=progress),
                log, f"{name}, seed {seed}", config=one, progress=sweep, required=True)))
        tests = [r["test"]["ppl"] for r in results]
        rows.append({"model": name, "settings": settings, "hidden": base.hidden,
                     "parameters": results[0]["parameters"], "seeds": config.seeds,
                     "test_ppl": {"mean": statistics.fmean(tests), "std": statistics.stdev(tests) if len(tests) > 1
                                  else 0.0, "values": tests},
                     "val_ppl": statistics.fmean(r["final"]["val_ppl"] for r in results),
                     "train_seconds": statistics.fmean(r["train_seconds"] for r in results),
                     **({"tuning": tuned} if config.tune else {})})
    summary = {"recipe": "char-lm", "config": asdict(config), "corpus": repr(corpus), "rows": rows,
               "seconds": round(time.perf_counter() - start, 1)}
    return finish_sweep(out, summary, write_report)


def write_report(out: Path, summary: dict[str, Any]) -> Path:
    """``char-lm.png`` (test perplexity of each model, error bars over seeds) and ``report.md``."""

    rows, config = summary["rows"], summary["config"]
    fig, ax = subplots(figsize=(min(FIGURE_WIDTH, max(5.0, 1.1 * len(rows))), 3.6))
    names = [r["model"] for r in rows]
    colors = ["C1" if "highway" in n else "C0" if "MLP" in n else "C2" for n in names]
    ax.bar(range(len(rows)), [r["test_ppl"]["mean"] for r in rows], yerr=[r["test_ppl"]["std"] for r in rows],
           color=colors, capsize=4)
    ax.set(xticks=range(len(rows)), ylabel="test perplexity (lower is better)",
           title=f"{config['corpus']}, about {config['budget']:,} parameters each")
    ax.set_xticklabels(names, rotation=20, ha="right")
    low = min(r["test_ppl"]["mean"] - 2 * r["test_ppl"]["std"] for r in rows)
    ax.set_ylim(bottom=max(0.0, 0.9 * low))
    ax.grid(alpha=0.3, axis="y")
    save_figure(fig, out / "char-lm.png", dpi=120)
    table = markdown_table(["model", "LSTM state", "parameters", "test perplexity", "valid perplexity (last epoch)",
                            "train time (s)"],
                           [[r["model"], r["hidden"], f"{r['parameters']:,}",
                             seeds_cell(r["test_ppl"], r["test_ppl"]["values"], 1), loss_cell(r["val_ppl"], digits=1),
                             f"{r['train_seconds']:.0f}"] for r in rows])
    found = contrasts(summary)
    differences = markdown_table(
        ["test perplexity, paired by seed", "difference", "95% t-interval", "seeds paired", "what it resolves"],
        [[f"{c['a']} − {c['b']}" + (" (the first chosen on validation)" if len(c["among"]) > 1 else ""),
          f"{c['mean']:+.1f}" if c["n"] else "-",
          f"[{c['lo']:+.1f}, {c['hi']:+.1f}]" if c["n"] > 1 else "none",
          ", ".join(map(str, c["seeds"])) or "none", paired_resolves(c, c["lower"])] for c in found])
    base = config["base"]
    report = out / "report.md"
    write_text(report, "\n".join([
        "# Character-aware language models: highway layers, MLP layers, or words", "",
        *findings(verdicts(summary)),
        f"{summary['corpus']}. Total time {summary['seconds']:.0f} s. Each word is read by its characters "
        f"(Kim et al., 2016: a `{base['char_encoder']}` character CNN, then highway or MLP layers) or by its own "
        f"vector (the word LSTM); then a {base['layers']}-layer LSTM and a softmax over the "
        f"{base['max_vocab']:,} words. Every model has about {config['budget']:,} parameters (its LSTM's state "
        f"size chosen to fit); {base['train']['epochs']} epochs of {base['steps_per_epoch'] or 'all'} windows of "
        f"{base['bptt']} words x {base['batch_size']} streams; seeds {config['seeds']}"
        + (f"; each model's learning rate, dropout and layers chosen by {config['tune']} random-search trials"
           if config.get("tune") else "") + ".", "",
        "![test perplexity](char-lm.png)", "", table, "",
        *([differences, "",
           "Each difference is the first model's test perplexity − the second's, seed by seed (the same seed gives "
           "both models the same batches), over the seeds both trained without diverging, with its 95% t-interval"
           f"{_t_note(found)}. The best highway model and the best character model are the ones with the lowest "
           "validation perplexity (the last epoch's, mean over the seeds); the test split chooses nothing.", ""]
          if found else [])]))
    return report


def _t_note(found: list[dict[str, Any]]) -> str:
    """What the report says of its intervals' t, for the numbers of seeds its contrasts pair (``n``): the t of
    :func:`~highwaynet.training.run_dir.t95` (the one :func:`~highwaynet.training.run_dir.paired_interval`
    takes) for each, as ``: the mean ± t × sd / √n, where t is 12.71 for 2 seeds paired and 4.30 for 3, ...``."""
    counts = sorted({c["n"] for c in found if c["n"] > 1})
    if not counts:
        return (" where two seeds or more pair (the mean ± t × sd / √n, t Student's for n − 1 degrees of freedom): "
                "here none does")
    each = [f"{t95(n):.2f} for {n}" + (" seeds paired" if i == 0 else "") for i, n in enumerate(counts)]
    listed = each[0] if len(each) == 1 else ", ".join(each[:-1]) + " and " + each[-1]
    return (f": the mean ± t × sd / √n, where t (Student's, for n − 1 degrees of freedom) is {listed}, so that a "
            f"few seeds give a wide interval")


def _test(row: dict[str, Any]) -> dict[int, float]:
    """A model's test perplexity by seed (its row lists ``seeds`` and the values in the same order), the
    seeds whose run diverged (:func:`~highwaynet.report.diverged`) left out."""
    return {seed: v for seed, v in zip(row["seeds"], row["test_ppl"]["values"], strict=True) if not diverged(v)}


def _best_on_valid(rows: dict[str, dict[str, Any]], names: list[str]) -> str | None:
    """Of ``names``, the model with the lowest validation perplexity (the last epoch's, mean over the
    seeds); one whose mean is not finite (a seed diverged) is not chosen. None where none is left."""
    finite = [n for n in names if not diverged(rows[n]["val_ppl"])]
    return min(finite, key=lambda n: rows[n]["val_ppl"], default=None)


def contrasts(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The ablation's contrasts, each model ``a``'s test perplexity − model ``b``'s, paired by seed over the
    seeds both trained without diverging (:func:`~highwaynet.training.run_dir.paired_differences`:
    ``seeds``, ``differences``, ``mean``, its 95% t-interval ``lo``, ``hi``, and ``n``; no interval for
    one pair): highway against MLP layers of the same count; the best highway model against none, then
    each other highway model against none; the best character model against words. The best are chosen
    on validation perplexity, never on test: ``among``, the models ``a`` was chosen among (empty where
    it was not chosen), ``kind``, what they are in words. ``what``: the contrast in words; ``lower``:
    each side in words (what an interval puts lower)."""
    rows = {r["model"]: r for r in summary["rows"]}
    found = []

    def add(what: str, a: str, b: str, lower: tuple[str, str], among: list[str] | None = None, kind: str = "") -> None:
        found.append({"what": what, "a": a, "b": b, "lower": lower, "among": among or [], "kind": kind,
                      **paired_differences(_test(rows[a]), _test(rows[b]))})

    for name in rows:
        if "highway" in name and (mlp := name.replace("highway", "MLP")) in rows:
            add("highway layers against MLP layers in their place", name, mlp, ("the highway model", "the MLP model"))
    highway = [n for n in rows if "highway" in n and not n.startswith("chars, 0 ")]
    if "chars, 0 highway" in rows and (best := _best_on_valid(rows, highway)):
        # The one chosen on validation first; then each other, so that none is left unreported.
        for name in [best, *(n for n in highway if n != best)]:
            add("highway layers against none", name, "chars, 0 highway",
                ("the highway model", "the model without highway layers"), highway if name == best else None,
                "model with highway layers" if name == best else "")
    chars = [n for n in rows if n.startswith("chars")]
    words = [n for n in rows if n.startswith("words")]
    if words and (best := _best_on_valid(rows, chars)):
        add("characters against words", best, words[0], ("the character model", "the word model"), chars,
            "character model")
    return found


def verdicts(summary: dict[str, Any]) -> list[str]:
    """The ablation's :func:`contrasts` in words, with the study's scale (the report's first lines,
    and the docs' results page's): each paired difference of test perplexity with its 95% interval
    and what it resolves; for a model chosen on validation, that it was, and its validation perplexity
    against the others'; the seeds left out of the pairs, and why."""
    rows = {r["model"]: r for r in summary["rows"]}
    scale = lm.scale(summary, "words")
    lines = []
    for c in contrasts(summary):
        a, b, line = c["a"], c["b"], f"{c['what']} ({scale}): "
        if len(c["among"]) > 1:
            others = ", ".join(f"{n} {loss_cell(rows[n]['val_ppl'], digits=1)}" for n in c["among"] if n != a)
            line += (f"on validation, the best {c['kind']} is {a} (valid perplexity {rows[a]['val_ppl']:.1f}; "
                     f"{others}); ")
        elif c["among"]:
            line += f"the only {c['kind']} is {a}; "
        line += f"in test perplexity, {a} − {b} = {paired_text(c, 'ppl', c['lower'], 1)}"
        left = [f"{name} diverged with {_seeds(bad)}" for name in (a, b)
                if (bad := set(rows[name]["seeds"]) - set(_test(rows[name])))]
        if alone := set(rows[a]["seeds"]) ^ set(rows[b]["seeds"]):
            left.append(f"{_seeds(alone)} trained by one of the two only")
        lines.append(line + (f" (left out of the pairs: {'; '.join(left)})" if left else ""))
    return lines


def _seeds(seeds: set[int]) -> str:
    """``"seed 2"``, ``"seeds 0, 2"``."""
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, sorted(seeds)))
