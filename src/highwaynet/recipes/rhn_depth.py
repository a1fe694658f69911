"""Reproduction: what recurrence depth buys an RHN at a fixed parameter budget (Zilly et al., 2017, Fig. 4),
and the RHN against an LSTM of equal parameters; or (``tune``) RHN against LSTM under equal tuning
(Melis et al., 2018: :mod:`.tuning`).

For each corpus, an RHN language model is trained at each recurrence depth, with each of the
seeds, its state size chosen so that the whole model has ``budget`` parameters. The best depth is
the one whose mean best validation loss over the seeds is lowest (the test split chooses nothing).
Two LSTM language models of the same budget are then trained with each seed: one for as long as
the best depth's runs took (the median of their measured training times: a budget that varies with
what else the machine runs), one for as many steps as every RHN (a control that depends on no clock).
The equal-time LSTM's schedule is set for ``_LONGER`` times the RHNs' epochs, so it decays little in
the epochs its time allows: to tell that schedule from the family, the best depth and an LSTM are
trained again on it, each stopped after the RHNs' epochs (as many steps). The best RHN is set against
each LSTM by the paired differences of their test metric over the seeds, with a 95% t-interval, and
each family's two schedules at equal steps against each other the same way. ``highwaynet reproduce
rhn-depth`` runs it and writes a figure, tables, generated text and a Markdown report. Finished runs
are skipped and unfinished ones resumed when the command is run again.
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
    paired_text,
    save_figure,
    seeds_cell,
    subplots,
    with_rule,
)
from ..training.cuda_graph import use_cuda_graphs
from ..training.progress import SweepProgress
from ..training.run_dir import (
    finish_sweep,
    finite_or_inf,
    mean_std,
    paired_differences,
    read_metrics,
    run_once,
    start_sweep,
    write_text,
)
from . import lm
from .tuning import tune_family

__all__ = ["RHNDepthConfig", "chosen", "contrast", "over_seeds", "run", "scale", "schedule_effect", "schedule_epochs",
           "verdicts", "write_report"]

#: The LSTM baselines a depth study trains: its key in a corpus's result, and what it is in words.
#: The equal-time LSTM's epochs, as a multiple of the RHNs': more than its time allows it.
_LONGER = 20
_LSTMS = {"lstm": "trained for as long as the best RHN", "lstm_steps": "trained for as many steps"}
#: The schedule control: its key in a corpus's result, the family, and the key of the same family at
#: equal steps on the RHNs' schedule (``"rhn"``: the chosen depth). Each trains on the equal-time
#: LSTM's schedule (set for ``_LONGER`` times the epochs), stopped after the RHNs' epochs.
_SLOW = {"rhn_slow": ("rhn", "rhn"), "lstm_slow": ("lstm", "lstm_steps")}


def run(config: RHNDepthConfig, out: str | Path, *, resume: bool = False, restart: bool = False,
        data_dir: str | Path | None = None, download: bool = False, log=print, progress: bool = True) -> dict[str, Any]:
    """Run the sweep into ``out`` (one run folder per model and seed) and write ``summary.json`` and the report."""
    out, config = start_sweep(out, "rhn-depth", config, resume=resume, restart=restart, log=log)
    summary: dict[str, Any] = {"config": asdict(config), "corpora": {}}
    start = time.perf_counter()
    graphs = summary["cuda_graph"] = use_cuda_graphs(config.cuda_graph, config.base.train.device)
    if config.tune:
        return _tune(config, out, summary, start, data_dir, download, log, progress)
    sweep = SweepProgress(len(config.corpora) * len(config.seeds) * (len(config.depths) + 4 * config.lstm))
    for entry in config.corpora:
        name, level = entry.split(":")
        corpus = load_corpus(name, level, data_dir, download=download, max_vocab=config.base.max_vocab)
        folder = out / f"{name}-{level}"
        _one_seed_layout(folder, config, log)

        model = partial(_model, config, name, level, corpus.vocab, graphs)
        summary["corpora"][entry] = _study(config, model, folder, corpus, level, log, progress, sweep)
    summary["seconds"] = round(time.perf_counter() - start, 1)
    return finish_sweep(out, summary, write_report)


def _study(config: RHNDepthConfig, model, folder: Path, corpus, level: str, log, progress: bool,
           sweep: SweepProgress) -> dict[str, Any]:
    """One corpus's study into ``folder``: its result in the summary (``model(family, depth, seed)``
    makes each model's configuration)."""
    runs: dict[tuple[str, int | None], list[dict[str, Any]]] = {}
    folders: dict[tuple[str, int | None], list[Path]] = {}

    def train(key: tuple[str, int | None], one: lm.LMConfig, name: str, max_time: float | None = None,
              max_epochs: int | None = None) -> None:
        folders.setdefault(key, []).append(folder / name)
        runs.setdefault(key, []).append(_run_one(one, folder / name, corpus, max_time, log, progress, sweep,
                                                 max_epochs))

    def entry(key: tuple[str, int | None]) -> dict[str, Any]:
        return _entry(runs[key], config.seeds, folders[key])

    epochs = config.base.train.epochs
    # Seed by seed, so that a study stopped early has whole seeds to show.
    for seed in config.seeds:
        for depth in config.depths:
            train(("rhn", depth), model("rhn", depth, seed), f"rhn-depth{depth}-seed{seed}")
        if config.lstm:  # the control that depends on no clock: as many steps as every RHN
            train(("lstm_steps", None), model("lstm", seed=seed), f"lstm-steps-seed{seed}")
    rows = [entry(("rhn", depth)) for depth in config.depths]
    result: dict[str, Any] = {"level": level, "vocab": len(corpus.vocab), "rhn": rows}
    if config.lstm:
        best = chosen(result)
        budget = statistics.median(r["train_seconds"] for r in best["runs"])
        for seed in config.seeds:
            train(("lstm", None), _slow(model("lstm", seed=seed)), f"lstm-seed{seed}", budget)  # cut by the time
        result["lstm"] = {**entry(("lstm", None)), "time_of": f"rhn depth {best['depth']}",
                          "max_seconds": budget}
        result["lstm_steps"] = entry(("lstm_steps", None))
        # The schedule control: the best depth and an LSTM on the equal-time LSTM's schedule, each stopped
        # after the RHNs' epochs (their steps), seed by seed (a study stopped early has whole pairs).
        for seed in config.seeds:
            train(("rhn_slow", None), _slow(model("rhn", best["depth"], seed)),
                  f"rhn-depth{best['depth']}-slow-seed{seed}", max_epochs=epochs)
            train(("lstm_slow", None), _slow(model("lstm", seed=seed)), f"lstm-slow-seed{seed}", max_epochs=epochs)
        for key in _SLOW:
            result[key] = {**entry((key, None)), "schedule_epochs": epochs * _LONGER}
    return result


def _slow(model: lm.LMConfig) -> lm.LMConfig:
    """``model`` on the equal-time LSTM's schedule: set for ``_LONGER`` times its epochs, of which it
    trains as many as its time, or the control's stop, allows."""
    model.train.epochs *= _LONGER
    return model


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


def _entry(runs: list[dict[str, Any]], seeds: list[int], folders: list[Path] | None = None) -> dict[str, Any]:
    """A model's row of the summary: its size, its runs, each with its seed, and (from the run
    ``folders``) its validation loss after each epoch, mean over the seeds that trained that epoch
    (``val_curve``: ``val_loss`` and ``seeds``, epoch by epoch from the first)."""
    first = runs[0]
    row = {"model": first["model"], "depth": first["depth"], "hidden": first["hidden"],
           "parameters": first["parameters"],
           "runs": [{"seed": seed, **r} for seed, r in zip(seeds, runs, strict=True)]}
    if folders is not None:
        curves = [[m["val_loss"] for m in read_metrics(f)] for f in folders]
        by_epoch = [[c[i] for c in curves if i < len(c)] for i in range(max(map(len, curves), default=0))]
        row["val_curve"] = {"val_loss": [statistics.fmean(v) for v in by_epoch], "seeds": list(map(len, by_epoch))}
    return row


def _runs(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """A model's runs; a summary of highwaynet 0.3 or before holds the one run itself, of seed 0."""
    return entry["runs"] if "runs" in entry else [{"seed": 0, **entry}]


def _best_val(entry: dict[str, Any]) -> float:
    return statistics.fmean(finite_or_inf(r["best_val"]) for r in _runs(entry))


def chosen(result: dict[str, Any]) -> dict[str, Any]:
    """A corpus's RHN depth chosen on validation: the lowest best validation loss, mean over the seeds."""
    return min(result["rhn"], key=_best_val)


def contrast(result: dict[str, Any], lstm: str = "lstm", *, rhn: str | None = None) -> dict[str, Any] | None:
    """The best RHN (:func:`chosen`) against one LSTM baseline (``lstm``: ``"lstm"``, trained for as
    long, or ``"lstm_steps"``, for as many steps), or (``"lstm_slow"``) the best depth against the
    LSTM both on the equal-time LSTM's schedule, stopped after as many steps: the paired differences
    of their test metric, RHN − LSTM, over the seeds both trained with, their mean and 95% t-interval
    (``lo``, ``hi``; NaN for one seed), ``n`` and ``seeds``; None where the study trained no such LSTM.

    ``rhn``: which runs of the best depth (``"rhn"``: on the RHNs' schedule; ``"rhn_slow"``: on the
    slow one); by default the one on ``lstm``'s schedule where the study has it. ``rhn="rhn_slow"``
    against ``"lstm"`` sets the equal-time LSTM against the best depth on its own schedule: the same
    work as the runs whose time set its budget."""
    if rhn is None:
        rhn = "rhn_slow" if lstm == "lstm_slow" else "rhn"
    if rhn not in ("rhn", "rhn_slow"):
        raise ValueError(f"rhn must be 'rhn' or 'rhn_slow', got {rhn!r}")
    if lstm not in result or rhn not in result:
        return None
    return _paired(result, rhn, lstm)


def schedule_epochs(summary: dict[str, Any]) -> int:
    """How many epochs the equal-time LSTM's learning-rate schedule is set for (the slow schedule):
    far more than it trains, so that its rate decays little."""
    return _LONGER * summary["config"]["base"]["train"]["epochs"]


def schedule_effect(result: dict[str, Any], family: str) -> dict[str, Any] | None:
    """What the equal-time LSTM's slowly decaying schedule does to ``family`` (``"rhn"``: the best
    depth, or ``"lstm"``) at equal steps: the paired differences of the test metric, on that schedule
    stopped after the RHNs' epochs − on the RHNs' schedule, as :func:`contrast`; None where the study
    trained no such control."""
    slow, usual = next((k, v) for k, (f, v) in _SLOW.items() if f == family)
    return _paired(result, slow, usual) if slow in result and usual in result else None


def _paired(result: dict[str, Any], a: str, b: str) -> dict[str, Any]:
    """Model ``a`` − model ``b`` (keys of ``result``, ``"rhn"`` the chosen depth) in the test metric,
    paired by seed: :func:`contrast`'s fields."""
    key = _metric(result["level"])[0]
    first, second = ({r["seed"]: r["test"][key] for r in _runs(chosen(result) if m == "rhn" else result[m])}
                     for m in (a, b))
    return paired_differences(first, second)


def _stats(entry: dict[str, Any], key: str) -> dict[str, float]:
    return mean_std([r["test"][key] for r in _runs(entry)])


def over_seeds(entry: dict[str, Any], key: str) -> str:
    """A model's test metric (``key``: ``bpc`` or ``ppl``) over its seeds: ``2.818 ± 0.010``, the value
    alone for one seed."""
    values = [r["test"][key] for r in _runs(entry)]
    return seeds_cell(mean_std(values), values, 3)


def scale(summary: dict[str, Any], entry: str) -> str:
    """A depth study's scale on corpus ``entry``, for a sentence that states its result (:func:`.lm.scale`):
    parameters, steps, batch, window, tokens and seeds."""
    return lm.scale(summary, "characters" if entry.endswith(":char") else "words")


def _interval(c: dict[str, Any], key: str, lower: tuple[str, str] = ("the RHN", "the LSTM")) -> str:
    """A paired difference in words (:func:`~highwaynet.report.paired_text`): its mean, 95% interval and
    which of ``lower`` (the first, the second) it puts lower."""
    return paired_text(c, key, lower)


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
             sweep: SweepProgress, max_epochs: int | None = None) -> dict[str, Any]:
    what = (f"rhn depth {config.depth}" if config.model == "rhn" else "lstm") + f", hidden {config.hidden}, " \
        + (f"for {max_time:.0f} s, " if max_time is not None else "") \
        + (f"{max_epochs} epochs of a schedule set for {config.train.epochs}, " if max_epochs is not None else "") \
        + f"seed {config.train.seed}"
    return cast(dict, run_once(run_dir, lambda resume: lm.run(config, run_dir, resume=resume, corpus=corpus,
                                                              max_time=max_time, log=log, progress=progress,
                                                              max_epochs=max_epochs),
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
                      f"for {schedule_epochs(summary)})" if lstm == "lstm" else "")
            line += (f"; against the LSTM of equal parameters {what}{budget}, test {key} "
                     f"{over_seeds(result[lstm], key)}, RHN − LSTM = {_interval(c, key)}")
        line += _schedule_control(summary, result, key)
        lines.append(line)
    return lines


#: Which schedule a schedule effect (slow − the RHNs') puts lower, in words.
_SCHEDULES = ("the slow schedule", "the RHNs' schedule")


def _schedule_control(summary: dict[str, Any], result: dict[str, Any], key: str) -> str:
    """The schedule control's part of a verdict: the best depth and the LSTM, both on the equal-time
    LSTM's schedule and stopped after the RHNs' steps, against each other and each against itself on
    the RHNs' schedule, and the best depth on that schedule against the equal-time LSTM; empty where
    the study has no such control (one stored before the recipe trained it)."""
    c = contrast(result, "lstm_slow")
    if c is None:
        return ""
    epochs = summary["config"]["base"]["train"]["epochs"]
    rhn, lstm = (schedule_effect(result, family) for family in ("rhn", "lstm"))
    return (f"; on the equal-time LSTM's schedule (set for {result['rhn_slow']['schedule_epochs']} epochs) "
            f"stopped after {epochs}, as many steps as the RHNs, the RHN tests {key} "
            f"{over_seeds(result['rhn_slow'], key)} and the LSTM {over_seeds(result['lstm_slow'], key)}, "
            f"RHN − LSTM = {_interval(c, key)}"
            + (f"; against the equal-time LSTM, on its schedule too (the same work as the runs whose median time set "
               f"its budget), RHN − LSTM = {_interval(t, key)}" if (t := contrast(result, rhn="rhn_slow")) else "")
            + "; that schedule − the RHNs' "
            f"({summary['config']['base']['train']['schedule']} over {epochs}), each model paired with itself: "
            f"RHN {_interval(rhn, key, _SCHEDULES)}, LSTM {_interval(lstm, key, _SCHEDULES)}" if rhn and lstm else "")


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
    lines), ``curves.png`` (the validation metric against the step, where the summary has curves) and
    ``report.md``; for a sweep run with ``tune``, ``tuning.png`` (each family's trials) and
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
        if "rhn_slow" in result and "lstm_slow" in result:  # the schedule control
            slow = _stats(result["rhn_slow"], key)
            ax.errorbar([result["rhn_slow"]["depth"]], [slow["mean"]], yerr=[slow["std"]], fmt="D", color="C2",
                        capsize=3, label="RHN, slow schedule")
            ax.axhline(_stats(result["lstm_slow"], key)["mean"], color="C2", ls="--", label="LSTM, slow schedule")
        ax.set(xlabel="recurrence depth", ylabel=f"{label} (lower is better)", xticks=depths,
               title=f"{entry}, {summary['config']['budget']:,} parameters")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
        best = chosen(result)
        seeds = len(_runs(best))
        spread = "mean ± sd over the seeds" if seeds > 1 else "one seed"
        names = {"lstm": "LSTM, same time", "lstm_steps": "LSTM, same steps", "rhn_slow": "RHN, slow schedule",
                 "lstm_slow": "LSTM, slow schedule"}
        table = markdown_table(
            ["model", "depth", "hidden", "parameters", "epochs", f"valid {key} (mean)", f"test {key} ({spread})",
             "train time (s), each seed"],
            [[names.get(name, "RHN") + (" (best on valid)" if r is best else ""), r["depth"] or "-", r["hidden"],
              f"{r['parameters']:,}", _per_seed(r, "epochs"), _valid(r, key), over_seeds(r, key),
              _per_seed(r, "train_seconds")]
             for name, r in [("rhn", r) for r in rows] + [(n, result[n]) for n in [*_LSTMS, *_SLOW] if n in result]])
        text = [f"## {entry}", "", with_rule(table), ""]
        differences = [[f"RHN depth {best['depth']} − LSTM, {what}", _interval(c, key)]
                       for lstm, what in _LSTMS.items() if (c := contrast(result, lstm)) is not None]
        if (c := contrast(result, "lstm_slow")) is not None:
            differences.append([f"RHN depth {best['depth']} − LSTM, both on the slow schedule, as many steps",
                                _interval(c, key)])
            if (t := contrast(result, rhn="rhn_slow")) is not None:
                differences.append([f"RHN depth {best['depth']} on the slow schedule − LSTM, same time (its schedule)",
                                    _interval(t, key)])
        differences += [[f"{name}, slow schedule − the RHNs' schedule, as many steps", _interval(e, key, _SCHEDULES)]
                         for family, name in (("rhn", f"RHN depth {best['depth']}"), ("lstm", "LSTM"))
                         if (e := schedule_effect(result, family)) is not None]
        if differences:
            text += [markdown_table([f"test {key}, paired by seed", "difference (95% t-interval)"], differences), ""]
        first = _runs(best)[0]
        text += [f"Sample from the depth-{best['depth']} RHN, seed {first['seed']} (temperature 0.8):", "", "```",
                 first["sample"].strip(), "```", ""]
        sections.append("\n".join(text))
    save_figure(fig, out / "depth.png", dpi=120)
    curves = _write_curves(out / "curves.png", summary)
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
        f"is set for {schedule_epochs(summary)} epochs, of which it trains as many as its time "
        f"allows, so its rate decays little; the equal-steps one's is the RHNs' ({config['base']['train']['schedule']} "
        f"over {config['base']['train']['epochs']} epochs)"
        + (". To tell the schedule from the family, the best depth and an LSTM are trained again with the same seeds "
           "on the equal-time LSTM's schedule (the slow schedule), each stopped after "
           f"{config['base']['train']['epochs']} epochs, as many steps as the RHNs"
           if any("rhn_slow" in result for result in corpora.values()) else "")
        + ". Differences are paired by seed (the same seed, the same "
        f"batches), with 95% t-intervals. Dropout {config['base']['state_dropout']}; training steps "
        f"{'replayed as CUDA graphs' if summary.get('cuda_graph') else 'run eagerly'}.", "",
        "![depth](depth.png)", "",
        *curves, *sections]))
    return report


#: The models whose validation curves ``curves.png`` draws (in this order: a later one is drawn over an
#: earlier), with their labels and styles: the colour says the schedule, the line the family.
_CURVES = {"lstm": ("LSTM on the slow schedule, same time", "C2", ":"),
           "rhn": ("RHN depth {depth} on the RHNs' schedule", "C0", "-"),
           "rhn_slow": ("RHN depth {depth} on the slow schedule", "C2", "-"),
           "lstm_steps": ("LSTM on the RHNs' schedule", "C0", "--"),
           "lstm_slow": ("LSTM on the slow schedule", "C2", "--")}


def _write_curves(path: Path, summary: dict[str, Any]) -> list[str]:
    """``curves.png``: each corpus's validation metric against the training step, epoch by epoch, mean
    over the seeds, for the best depth and the LSTMs (on both schedules where the study has them); and
    the report's lines that show it, with how far each curve fell over the RHNs' last epoch (a curve
    still falling there is far from converged). No lines, and nothing written, where the summary has no
    curves (a study of highwaynet 0.3 or before)."""
    corpora = {entry: result for entry, result in summary["corpora"].items()
               if "val_curve" in chosen(result) and "rhn" in result}
    if not corpora:
        return []
    steps = summary["config"]["base"].get("steps_per_epoch")
    epochs = summary["config"]["base"]["train"]["epochs"]
    fig, axes = subplots(1, len(corpora), figsize=(min(FIGURE_WIDTH, 5.5 * len(corpora)), 3.8), squeeze=False)
    falls, fewer = [], False
    for ax, (entry, result) in zip(axes[0], corpora.items(), strict=True):
        key, label = _metric(result["level"])
        best = chosen(result)
        fell, shown = [], []
        for name, (what, color, style) in _CURVES.items():
            row = best if name == "rhn" else result.get(name)
            if row is None or "val_curve" not in row:
                continue
            curve = row["val_curve"]
            x = [(i + 1) * (steps or 1) for i in range(len(curve["val_loss"]))]
            y = [loss / math.log(2) if key == "bpc" else math.exp(loss) for loss in curve["val_loss"]]
            what = what.format(depth=best["depth"])
            ax.plot(x, y, color=color, ls=style, label=what)
            # A point that averages fewer seeds than the curve's first (a seed whose time ran out) is hollow.
            ax.plot(x, y, ls="", marker="o", ms=3, color=color,
                    markevery=[i for i, n in enumerate(curve["seeds"]) if n == curve["seeds"][0]])
            thin = [i for i, n in enumerate(curve["seeds"]) if n < curve["seeds"][0]]
            if thin:
                fewer = True
                ax.plot([x[i] for i in thin], [y[i] for i in thin], ls="", marker="o", ms=5, mfc="none", color=color)
            shown += y[1:] or y
            if name != "lstm" and epochs >= 2 and len(y) >= epochs:  # (the equal-time LSTM: its own length)
                fell.append(f"{what}, {y[epochs - 2] - y[epochs - 1]:.3f}")
        ax.axvline(epochs * (steps or 1), color="0.5", lw=0.8, label="the RHNs' last step")
        if len(shown) > 1:  # (from the 2nd epoch: the 1st's high losses would flatten the rest)
            low, high = min(shown), max(shown)
            ax.set_ylim(low - 0.05 * (high - low), high + 0.05 * (high - low))
        ax.set(xlabel="training step" if steps else "epoch", ylabel=f"validation {key}, mean over the seeds",
               title=f"{entry}: {label}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
        if fell:
            falls.append(f"{entry}: over epoch {epochs}, the RHNs' last, the validation {key} falls by: "
                         f"{'; '.join(fell)}.")
    save_figure(fig, path, dpi=120)
    return ["The validation metric after each epoch, mean over the seeds, of the best depth and the LSTMs on each "
            "schedule (the axis is scaled from the 2nd epoch up); the equal-time LSTM trains as the slow-schedule "
            "LSTM does, with the same seeds and schedule, for longer"
            + ("; a hollow point averages fewer seeds than the curve's first, those whose time allowed that epoch"
               if fewer else "") + ":", "",
            "![validation curves](curves.png)", "", *(f"- {line}" for line in falls), *([""] if falls else [])]


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
