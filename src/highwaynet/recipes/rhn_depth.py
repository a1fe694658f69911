"""Reproduction: what recurrence depth buys an RHN at a fixed parameter budget (Zilly et al., 2017, Fig. 4),
and the RHN against an LSTM of equal parameters; or (``tune``) RHN against LSTM under equal tuning
(Melis et al., 2018: :mod:`.tuning`).

For each corpus, an RHN language model is trained at each recurrence depth, with each of the
seeds, its state size chosen so that the whole model has ``budget`` parameters. The best depth is
the one whose mean best validation loss over the seeds is lowest (the test split chooses nothing).
Two LSTM language models of the same budget are then trained with each seed: one for as long as
the best depth's runs took (the median of their measured training times: a budget that varies with
what else the machine runs), one for as many steps as every RHN (a control that depends on no clock).
The best RHN is set against each by the paired differences of their test metric over the seeds,
with a 95% t-interval. ``highwaynet reproduce rhn-depth`` runs it and writes a figure, tables,
generated text and a Markdown report. Finished runs are skipped and unfinished ones resumed when
the command is run again.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any, cast

from ..config import RHNDepthConfig
from ..data.corpora import load_corpus
from ..report import (
    FIGURE_WIDTH,
    compare,
    findings,
    loss_cell,
    markdown_table,
    save_figure,
    seeds_cell,
    subplots,
    with_rule,
)
from ..training.cuda_graph import use_cuda_graphs
from ..training.progress import SweepProgress
from ..training.run_dir import finish_sweep, finite_or_inf, mean_std, paired_interval, run_once, start_sweep, write_text
from . import lm
from .tuning import tune_family

__all__ = ["RHNDepthConfig", "chosen", "contrast", "over_seeds", "run", "scale", "verdicts", "write_report"]

#: The LSTM baselines a depth study trains: its key in a corpus's result, and what it is in words.
#: The equal-time LSTM's epochs, as a multiple of the RHNs': more than its time allows it.
_LONGER = 20
_LSTMS = {"lstm": "trained for as long as the best RHN", "lstm_steps": "trained for as many steps"}


def run(config: RHNDepthConfig, out: str | Path, *, resume: bool = False, restart: bool = False,
        data_dir: str | Path | None = None, download: bool = False, log=print, progress: bool = True) -> dict[str, Any]:
    """Run the sweep into ``out`` (one run folder per model and seed) and write ``summary.json`` and the report."""
    out, config = start_sweep(out, "rhn-depth", config, resume=resume, restart=restart, log=log)
    summary: dict[str, Any] = {"config": asdict(config), "corpora": {}}
    start = time.perf_counter()
    graphs = summary["cuda_graph"] = use_cuda_graphs(config.cuda_graph, config.base.train.device)
    if config.tune:
        return _tune(config, out, summary, start, data_dir, download, log, progress)
    sweep = SweepProgress(len(config.corpora) * len(config.seeds) * (len(config.depths) + 2 * config.lstm))
    for entry in config.corpora:
        name, level = entry.split(":")
        corpus = load_corpus(name, level, data_dir, download=download, max_vocab=config.base.max_vocab)
        folder = out / f"{name}-{level}"
        _one_seed_layout(folder, config, log)

        model = partial(_model, config, name, level, corpus.vocab, graphs)
        runs: dict[tuple[str, int | None], list[dict[str, Any]]] = {}
        # Seed by seed, so that a study stopped early has whole seeds to show.
        for seed in config.seeds:
            for depth in config.depths:
                runs.setdefault(("rhn", depth), []).append(
                    _run_one(model("rhn", depth, seed), folder / f"rhn-depth{depth}-seed{seed}", corpus, None, log,
                             progress, sweep))
            if config.lstm:  # the control that depends on no clock: as many steps as every RHN
                runs.setdefault(("lstm_steps", None), []).append(
                    _run_one(model("lstm", seed=seed), folder / f"lstm-steps-seed{seed}", corpus, None, log,
                             progress, sweep))
        rows = [_entry(runs["rhn", depth], config.seeds) for depth in config.depths]
        result: dict[str, Any] = {"level": level, "vocab": len(corpus.vocab), "rhn": rows}
        if config.lstm:
            best = chosen(result)
            budget = statistics.median(r["train_seconds"] for r in best["runs"])
            lstm = []
            for seed in config.seeds:
                timed = model("lstm", seed=seed)
                timed.train.epochs = config.base.train.epochs * _LONGER  # cut by the time limit
                lstm.append(_run_one(timed, folder / f"lstm-seed{seed}", corpus, budget, log, progress, sweep))
            result["lstm"] = {**_entry(lstm, config.seeds), "time_of": f"rhn depth {best['depth']}",
                              "max_seconds": budget}
            result["lstm_steps"] = _entry(runs["lstm_steps", None], config.seeds)
        summary["corpora"][entry] = result
    summary["seconds"] = round(time.perf_counter() - start, 1)
    return finish_sweep(out, summary, write_report)


def _model(config: RHNDepthConfig, name: str, level: str, vocab: list[str], graphs: bool, family: str,
           depth: int | None = None, seed: int = 0) -> lm.LMConfig:
    """One model of the study: the base's settings, ``family`` (at ``depth``) sized to the budget, ``seed``."""
    model = lm.LMConfig(**{**asdict(config.base), "corpus": name, "level": level, "model": family,
                           **({"depth": depth} if depth else {})})
    model.train.cuda_graph, model.train.seed = graphs, seed
    model.hidden = lm.hidden_for_budget(model, vocab, config.budget)
    return model


def _one_seed_layout(folder: Path, config: RHNDepthConfig, log) -> None:
    """Say so where a corpus's folder holds the runs of a study of highwaynet 0.3 or before (one seed,
    its runs named without it: ``rhn-depth4``, ``lstm``): they are left as they are, and not used."""
    old = [n for n in [*(f"rhn-depth{d}" for d in config.depths), "lstm"] if (folder / n).is_dir()]
    if old:
        log(f"{folder} holds runs of a one-seed study of highwaynet 0.3 or before ({', '.join(old)}): they are left "
            f"as they are and not used; each model now trains with each seed, in a folder named for it "
            f"(rhn-depth{config.depths[0]}-seed{config.seeds[0]})")


def _entry(runs: list[dict[str, Any]], seeds: list[int]) -> dict[str, Any]:
    """A model's row of the summary: its size, and its runs, each with its seed."""
    first = runs[0]
    return {"model": first["model"], "depth": first["depth"], "hidden": first["hidden"],
            "parameters": first["parameters"],
            "runs": [{"seed": seed, **r} for seed, r in zip(seeds, runs, strict=True)]}


def _runs(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """A model's runs; a summary of highwaynet 0.3 or before holds the one run itself, of seed 0."""
    return entry["runs"] if "runs" in entry else [{"seed": 0, **entry}]


def _best_val(entry: dict[str, Any]) -> float:
    return statistics.fmean(finite_or_inf(r["best_val"]) for r in _runs(entry))


def chosen(result: dict[str, Any]) -> dict[str, Any]:
    """A corpus's RHN depth chosen on validation: the lowest best validation loss, mean over the seeds."""
    return min(result["rhn"], key=_best_val)


def contrast(result: dict[str, Any], lstm: str = "lstm") -> dict[str, Any] | None:
    """The best RHN (:func:`chosen`) against one LSTM baseline (``lstm``: ``"lstm"``, trained for as
    long, or ``"lstm_steps"``, for as many steps): the paired differences of their test metric,
    RHN − LSTM, over the seeds both trained with, their mean and 95% t-interval (``lo``, ``hi``; NaN
    for one seed), ``n`` and ``seeds``; None where the study trained no such LSTM."""
    if lstm not in result:
        return None
    key = _metric(result["level"])[0]
    rhn = {r["seed"]: r["test"][key] for r in _runs(chosen(result))}
    other = {r["seed"]: r["test"][key] for r in _runs(result[lstm])}
    seeds = sorted(set(rhn) & set(other))
    return {"seeds": seeds, **paired_interval([rhn[s] - other[s] for s in seeds])}


def _stats(entry: dict[str, Any], key: str) -> dict[str, float]:
    return mean_std([r["test"][key] for r in _runs(entry)])


def over_seeds(entry: dict[str, Any], key: str) -> str:
    """A model's test metric (``key``: ``bpc`` or ``ppl``) over its seeds: ``2.818 ± 0.010``, the value
    alone for one seed."""
    values = [r["test"][key] for r in _runs(entry)]
    return seeds_cell(mean_std(values), values, 3)


def scale(summary: dict[str, Any], entry: str) -> str:
    """A depth study's scale on corpus ``entry``, for a sentence that states its result: parameters,
    steps, batch, window, tokens and seeds."""
    config, base = summary["config"], summary["config"]["base"]
    unit = "characters" if entry.endswith(":char") else "words"
    steps = base.get("steps_per_epoch")
    if steps:
        steps *= base["train"]["epochs"]
        trained = (f"{steps:,} steps of {base['batch_size']} × {base['bptt']} {unit} "
                   f"({steps * base['batch_size'] * base['bptt']:,} {unit})")
    else:
        trained = f"{base['train']['epochs']} epochs of batch {base['batch_size']} × {base['bptt']} {unit}"
    seeds = len(config.get("seeds", [0]))
    return f"about {config['budget']:,} parameters, {trained}, {seeds} seed{'s' if seeds > 1 else ''}"


def _interval(c: dict[str, Any], key: str) -> str:
    if c["n"] < 2:
        return f"{c['mean']:+.3f} {key} (one seed: no interval)"
    verdict = ("the RHN lower" if c["hi"] < 0 else "the LSTM lower" if c["lo"] > 0 else "no difference resolved")
    return f"{c['mean']:+.3f} {key} [{c['lo']:+.3f}, {c['hi']:+.3f}] (95%, paired over {c['n']} seeds): {verdict}"


def _tune(config: RHNDepthConfig, out: Path, summary: dict[str, Any], start: float, data_dir, download: bool, log,
          progress: bool) -> dict[str, Any]:
    """RHN against LSTM under equal tuning, on each corpus: ``config.tune`` trials per family."""
    families = ("rhn", "lstm")
    sweep = SweepProgress(len(config.corpora) * len(families) * (config.tune + config.tune_seeds - 1))
    for entry in config.corpora:
        name, level = entry.split(":")
        corpus = load_corpus(name, level, data_dir, download=download, max_vocab=config.base.max_vocab)
        result: dict[str, Any] = {"level": level, "vocab": len(corpus.vocab), "tuning": {}}
        for family in families:
            base = lm.LMConfig(**{**asdict(config.base), "corpus": name, "level": level, "model": family})
            base.train.cuda_graph = summary["cuda_graph"]
            seeds = [base.train.seed + k for k in range(config.tune_seeds)]
            result["tuning"][family] = tune_family(family, base, corpus, config.budget, config.tune, seeds,
                                                   out / f"{name}-{level}" / f"tune-{family}", log, progress, sweep)
        summary["corpora"][entry] = result
    summary["seconds"] = round(time.perf_counter() - start, 1)
    return finish_sweep(out, summary, write_report)


def _run_one(config: lm.LMConfig, run_dir: Path, corpus, max_time: float | None, log, progress,
             sweep: SweepProgress) -> dict[str, Any]:
    what = (f"rhn depth {config.depth}" if config.model == "rhn" else "lstm") + f", hidden {config.hidden}, " \
        + (f"for {max_time:.0f} s, " if max_time is not None else "") + f"seed {config.train.seed}"
    return cast(dict, run_once(run_dir, lambda resume: lm.run(config, run_dir, resume=resume, corpus=corpus,
                                                              max_time=max_time, log=log, progress=progress),
                               log, what, config=config, progress=sweep, required=True))


def _metric(level: str) -> tuple[str, str]:
    return ("bpc", "bits per character") if level == "char" else ("ppl", "perplexity")


def verdicts(summary: dict[str, Any]) -> list[str]:
    """What the sweep found, a sentence per corpus (the report's first lines, and the docs' results
    page's), with the study's scale: the depth chosen on validation and its test metric over the
    seeds, then the paired difference of each LSTM baseline's against it, with its 95% interval; with
    ``tune``, which family leads under equal tuning, against the seeds' spread."""
    lines = []
    for entry, result in summary["corpora"].items():
        key = _metric(result["level"])[0]
        if "tuning" in result:
            (a, a_tuned), (b, b_tuned) = list(result["tuning"].items())[:2]
            lines.append(f"{entry}: under equal tuning, in test {key}, "
                         + compare(a.upper(), a_tuned["test"], b.upper(), b_tuned["test"]))
            continue
        best = chosen(result)
        line = (f"{entry} ({scale(summary, entry)}): the best RHN on validation has recurrence depth "
                f"{best['depth']} (test {key} {over_seeds(best, key)})")
        for lstm, what in _LSTMS.items():
            c = contrast(result, lstm)
            if c is None:
                continue
            # (the equal-time LSTM's epochs and schedule said where its result is: both differ from the RHNs')
            budget = (f" ({_seconds(result[lstm])}; {_per_seed(result[lstm], 'epochs')} epochs, on a schedule set "
                      f"for {_LONGER * summary['config']['base']['train']['epochs']})" if lstm == "lstm" else "")
            line += (f"; against the LSTM of equal parameters {what}{budget}, test {key} "
                     f"{over_seeds(result[lstm], key)}, RHN − LSTM = {_interval(c, key)}")
        lines.append(line)
    return lines


def _seconds(lstm: dict[str, Any]) -> str:
    """The equal-time LSTM's budget in words (a summary of 0.3 or before: its one run's time)."""
    if "max_seconds" in lstm:
        return f"{lstm['max_seconds']:.0f} s, the median of its runs' times"
    return f"{_runs(lstm)[0]['train_seconds']:.0f} s"


def _per_seed(entry: dict[str, Any], field: str, digits: int = 0) -> str:
    """A field of each of a model's runs, ``"8"`` where all agree, else ``"9, 10, 9"``."""
    values = [f"{r[field]:.{digits}f}" if isinstance(r[field], float) else str(r[field]) for r in _runs(entry)]
    return values[0] if len(set(values)) == 1 else ", ".join(values)


def _valid(entry: dict[str, Any], key: str) -> str:
    """A model's best validation loss as its metric (bits per character or perplexity), mean over the seeds."""
    loss = _best_val(entry)
    return f"{loss / math.log(2) if key == 'bpc' else math.exp(loss):.3f}"


def write_report(out: Path, summary: dict[str, Any]) -> Path:
    """``depth.png`` (test metric against recurrence depth, mean and sd over the seeds, the LSTMs as
    lines) and ``report.md``; for a sweep run with ``tune``, ``tuning.png`` (each family's trials) and
    the equal-tuning tables."""
    corpora = summary["corpora"]
    if any("tuning" in result for result in corpora.values()):
        return _write_tuning_report(out, summary)
    fig, axes = subplots(1, len(corpora), figsize=(min(FIGURE_WIDTH, 5 * len(corpora)), 3.6), squeeze=False)
    sections = []
    for ax, (entry, result) in zip(axes[0], corpora.items(), strict=True):
        key, label = _metric(result["level"])
        rows = result["rhn"]
        depths = [r["depth"] for r in rows]
        tests = [_stats(r, key) for r in rows]
        ax.errorbar(depths, [t["mean"] for t in tests], yerr=[t["std"] for t in tests], fmt="o-", capsize=3,
                    label="RHN (test)")
        ax.plot(depths, [float(_valid(r, key)) for r in rows], "s--", alpha=0.6, label="RHN (valid)")
        for (lstm, what), style in zip(_LSTMS.items(), (":", "-."), strict=True):
            if lstm in result:
                ax.axhline(_stats(result[lstm], key)["mean"], color="C3" if lstm == "lstm" else "C4", ls=style,
                           label=f"LSTM, {what.replace('trained for ', '').replace('the best RHN', 'best RHN')}")
        ax.set(xlabel="recurrence depth", ylabel=f"{label} (lower is better)", xticks=depths,
               title=f"{entry}, {summary['config']['budget']:,} parameters")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
        best = chosen(result)
        seeds = len(_runs(best))
        spread = "mean ± sd over the seeds" if seeds > 1 else "one seed"
        names = {"lstm": "LSTM, same time", "lstm_steps": "LSTM, same steps"}
        table = markdown_table(
            ["model", "depth", "hidden", "parameters", "epochs", f"valid {key} (mean)", f"test {key} ({spread})",
             "train time (s), each seed"],
            [[names.get(name, "RHN") + (" (best on valid)" if r is best else ""), r["depth"] or "-", r["hidden"],
              f"{r['parameters']:,}", _per_seed(r, "epochs"), _valid(r, key), over_seeds(r, key),
              _per_seed(r, "train_seconds")]
             for name, r in [("rhn", r) for r in rows] + [(n, result[n]) for n in _LSTMS if n in result]])
        text = [f"## {entry}", "", with_rule(table), ""]
        differences = [[f"RHN depth {best['depth']} − LSTM, {what}", _interval(c, key)]
                       for lstm, what in _LSTMS.items() if (c := contrast(result, lstm)) is not None]
        if differences:
            text += [markdown_table([f"test {key}, paired by seed", "difference (95% t-interval)"], differences), ""]
        first = _runs(best)[0]
        text += [f"Sample from the depth-{best['depth']} RHN, seed {first['seed']} (temperature 0.8):", "", "```",
                 first["sample"].strip(), "```", ""]
        sections.append("\n".join(text))
    save_figure(fig, out / "depth.png", dpi=120)
    config = summary["config"]
    report = out / "report.md"
    timed = [f"{result['lstm']['max_seconds']:.0f} s" for result in corpora.values() if "max_seconds" in
             result.get("lstm", {})]
    write_text(report, "\n".join([
        "# RHN: recurrence depth at a fixed parameter budget", "",
        *findings(verdicts(summary)),
        f"Total time {summary['seconds']:.0f} s. Each RHN's state size is chosen so that the whole model "
        f"(embedding tied to the decoder) has about {config['budget']:,} parameters; every RHN trains for the same "
        f"number of steps ({config['base']['train']['epochs']} epochs of "
        f"{config['base'].get('steps_per_epoch') or 'a whole pass'} steps, batch {config['base']['batch_size']}, "
        f"{config['base']['bptt']} tokens a window), with seeds {config.get('seeds', [0])}. The best depth is the "
        "one with the lowest best validation loss, mean over the seeds; the test split chooses nothing. Two LSTMs "
        "of the same budget train with the same seeds: one for as many steps as the RHNs, and one for as long as "
        "the best depth's runs took, the median of their measured training times"
        + (f" ({'; '.join(timed)})" if timed else "")
        + ". A time measured on a machine shared with other work varies, and so does that budget; the equal-steps "
        "LSTM depends on no clock. The two LSTMs also differ in their learning-rate schedule: the equal-time one's "
        f"is set for {_LONGER * config['base']['train']['epochs']} epochs, of which it trains as many as its time "
        f"allows, so its rate decays little; the equal-steps one's is the RHNs' ({config['base']['train']['schedule']} "
        f"over {config['base']['train']['epochs']} epochs). Differences are paired by seed (the same seed, the same "
        f"batches), with 95% t-intervals. Dropout {config['base']['state_dropout']}; training steps "
        f"{'replayed as CUDA graphs' if summary.get('cuda_graph') else 'run eagerly'}.", "",
        "![depth](depth.png)", "", *sections]))
    return report


def _tuning_rows(tuned: dict[str, Any]) -> list[list[Any]]:
    shape = "depth" if "depth" in tuned["trials"][0] else "layers"
    return [["**best**" if i == tuned["best"] else i + 1, f"{t['lr']:.2g}", f"{t['dropout']:.2f}",
             f"{shape} {t[shape]}", t["hidden"], f"{t['parameters']:,}", loss_cell(t["best_val"]),
             f"{t['train_seconds']:.0f}"]
            for i, t in enumerate(tuned["trials"])]


def _write_tuning_report(out: Path, summary: dict[str, Any]) -> Path:
    """RHN against LSTM under equal tuning: each family's trials (validation), and the best's test."""

    corpora = summary["corpora"]
    fig, axes = subplots(1, len(corpora), figsize=(min(FIGURE_WIDTH, 4.5 * len(corpora)), 3.6), squeeze=False)
    sections = []
    for ax, (entry, result) in zip(axes[0], corpora.items(), strict=True):
        key, label = _metric(result["level"])
        tuning = result["tuning"]
        for i, (family, tuned) in enumerate(tuning.items()):
            vals = [t["best_val"] for t in tuned["trials"]]
            ax.scatter([i] * len(vals), vals, alpha=0.6, label=f"{family.upper()} trials (validation loss)")
            ax.scatter([i], [vals[tuned["best"]]], marker="*", s=160, color="k")
        ax.set(xticks=range(len(tuning)), xticklabels=[f.upper() for f in tuning], ylabel="validation loss (nats)",
               title=f"{entry}: {len(next(iter(tuning.values()))['trials'])} trials each")
        ax.grid(alpha=0.3)
        table = markdown_table(["family (best of its trials)", "settings", f"test {key}, mean ± std over seeds",
                                "seeds"],
                               [[f.upper(), ", ".join(f"{k} {v}" for k, v in t["best_settings"].items()
                                                      if k in ("lr", "dropout", "depth", "layers", "hidden")),
                                 seeds_cell(t["test"], t["test"]["values"], 3), len(t["test"]["values"])]
                                for f, t in tuning.items()])
        sections.append("\n".join([f"## {entry}", "", with_rule(table), "",
                                    *[f"### {f.upper()} trials\n\n" + with_rule(markdown_table(
                                        ["trial", "lr", "dropout", "shape", "hidden", "parameters",
                                         "best validation loss", "train time (s)"], _tuning_rows(t))) + "\n"
                                      for f, t in tuning.items()]]))
    save_figure(fig, out / "tuning.png", dpi=120)
    config = summary["config"]
    report = out / "report.md"
    write_text(report, "\n".join([
        "# RHN against LSTM under equal tuning", "",
        *findings(verdicts(summary)),
        f"Total time {summary['seconds']:.0f} s. Each family (RHN, LSTM) gets {config['tune']} random-search trials "
        f"at about {config['budget']:,} parameters (Melis, Dyer & Blunsom, 2018): a learning rate, one dropout rate "
        "and its shape (the RHN's recurrence depth, the LSTM's layers), the state size following from the budget; "
        f"each trains {config['base']['train']['epochs']} epochs. The best trial on validation is then trained with "
        f"{config['tune_seeds']} seeds and tested.", "", "![trials](tuning.png)", "", *sections]))
    return report
