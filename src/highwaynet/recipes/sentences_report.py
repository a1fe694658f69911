"""The sentence-classification sweep's report: its tables by task, each encoder against Kim's CNN
paired by seed (or fold), and accuracy against stack depth beside Kim's published CNN-rand figure;
and the report of a setting chosen on validation among several sweeps (:func:`choose`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..models.sentence import ENCODER_DESCRIPTIONS, STACKED_ENCODERS
from ..report import compare, findings, markdown_table, save_figure, subplots
from ..training.run_dir import count, format_mean_std, mean_std, paired_differences, write_text
from .analyses import CHOICE_RECIPE

__all__ = ["KIM_CNN_RAND", "KIM_WITH_PHRASES", "TASK_NAMES", "choice_scale", "choice_verdicts", "choose",
           "difference_text", "paired_contrasts", "paired_difference", "plot_depth", "published", "resolved",
           "verdicts", "write_choice_report", "write_report"]

#: Kim (2014)'s CNN-rand test accuracy (%) on each of the five sets, as published.
KIM_CNN_RAND = {"mr": 76.1, "sst1": 45.0, "sst2": 82.7, "subj": 89.6, "trec": 91.2}

#: The sets on which Kim's runs trained on the treebank's phrases too, where ours train on sentences only.
KIM_WITH_PHRASES = frozenset({"sst1", "sst2"})

#: Each of the five sets' name as papers write it (a user's own set keeps its folder's name).
TASK_NAMES = {"trec": "TREC", "sst2": "SST-2", "sst1": "SST-1", "mr": "MR", "subj": "Subj"}

#: What every sentence report says of how its runs differ from Kim's.
_AS_KIM = ("Embeddings are randomly initialised, as in Kim's CNN-rand; SST is trained on sentences only "
           "(Kim's SST runs also train on the treebank's phrases).")


def published(task: str) -> str:
    """Kim (2014)'s CNN-rand figure for ``task`` in words, saying where his runs trained on more than ours
    (SST: the treebank's phrases too); empty for a user's own set."""
    if task not in KIM_CNN_RAND:
        return ""
    phrases = ", trained on the treebank's phrases too" if task in KIM_WITH_PHRASES else ""
    return f"Kim's CNN-rand, published{phrases}: {KIM_CNN_RAND[task]:.1f}%"


def plot_depth(series: dict[str, list[dict[str, Any]]], task: str, path: Path) -> None:
    """Test accuracy against stack depth: one line per label, each point ``{"layers", "mean", "std"}``
    (error bars: ``std``), and Kim's published CNN-rand accuracy for ``task`` as a dotted line."""

    fig, ax = subplots(figsize=(5.5, 3.6))
    for label, points in series.items():
        points = sorted(points, key=lambda r: r["layers"])
        ax.errorbar([r["layers"] for r in points], [r["mean"] for r in points], yerr=[r["std"] for r in points],
                    marker="o", capsize=3, label=label)
    if task in KIM_CNN_RAND:  # (not for a user's own set)
        ax.axhline(KIM_CNN_RAND[task], color="gray", ls=":", label="Kim CNN-rand (published)")
    ax.set(xlabel="layers in the stack", ylabel="test accuracy (%)", title=f"{task}: accuracy vs depth",
           xticks=sorted({r["layers"] for points in series.values() for r in points}))
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, path, dpi=120)


def _accuracy(runs: list[dict[str, Any]]) -> dict[tuple[int, int], float]:
    """Test accuracy (%) of each run by its (seed, fold)."""
    return {(r["seed"], r["fold"]): 100 * r["test"]["acc"] for r in runs}


def paired_difference(runs: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> dict[str, Any]:
    """Test accuracy of ``runs`` minus that of ``baseline`` in points, paired by seed and fold (the
    pairs both ran: ``pairs``, ``[seed, fold]`` each): the differences' mean, its 95% t-interval
    (``lo``, ``hi``; NaN for one pair) and ``n``; ``differences``, one a pair, so that a stored result
    can be checked without its run folders."""
    c = paired_differences(_accuracy(runs), _accuracy(baseline))
    return {"pairs": [list(p) for p in c.pop("seeds")], **c}


def paired_contrasts(summary: dict[str, Any], baseline: str = "cnn") -> list[dict[str, Any]]:
    """Each other encoder (at each depth) against ``baseline`` on each task where both ran with some
    seeds (folds) in common: ``{"task", "encoder", "layers", "baseline"}`` and :func:`paired_difference`,
    in the order of the summary's table."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in summary["runs"]:
        groups.setdefault((r["task"], r["encoder"], r["layers"]), []).append(r)
    contrasts = []
    for row in summary["table"]:
        key = (row["task"], row["encoder"], row["layers"])
        base = groups.get((row["task"], baseline, 1))
        if row["encoder"] == baseline or base is None:
            continue
        c = paired_difference(groups[key], base)
        if c["n"]:
            contrasts.append({"task": row["task"], "encoder": row["encoder"], "layers": row["layers"],
                              "baseline": baseline, **c})
    return contrasts


def difference_text(c: dict[str, Any]) -> str:
    """``"+1.8 [+0.9, +2.7] (95%, 5 pairs)"`` for a :func:`paired_difference` in points; one pair has no interval."""
    if c["n"] < 2:
        return f"{c['mean']:+.1f} (one pair: no interval)"
    return f"{c['mean']:+.1f} [{c['lo']:+.1f}, {c['hi']:+.1f}] (95%, {c['n']} pairs)"


def resolved(c: dict[str, Any], a: str, b: str) -> str:
    """Which side a paired interval (``a`` − ``b``) puts ahead, or that it resolves none."""
    if c["n"] < 2 or math.isnan(c["lo"]):
        return "one pair: nothing resolved"
    return f"{a} ahead" if c["lo"] > 0 else f"{b} ahead" if c["hi"] < 0 else "no difference resolved"


def verdicts(summary: dict[str, Any]) -> list[str]:
    """What the sweep found, a sentence per task (the report's first lines, and the docs' results page's):
    its best encoder against Kim's published CNN-rand, and at the deepest stack both kinds of stack
    against each other, against the spread over seeds (or folds)."""
    lines = []
    for task in dict.fromkeys(row["task"] for row in summary["table"]):
        rows = [r for r in summary["table"] if r["task"] == task]
        best = max(rows, key=lambda r: r["mean"])
        layers = f", {count(best['layers'], 'layer')}" if best["encoder"] in STACKED_ENCODERS else ""
        line = f"{task}: the best encoder, {best['encoder']}{layers}, reaches {format_mean_std(best, best['runs'])}%"
        if task in KIM_CNN_RAND:
            line += f" test accuracy (Kim's CNN-rand, published: {KIM_CNN_RAND[task]:.1f}%)"
        stacks = {e: {r["layers"]: r for r in rows if r["encoder"] == e} for e in STACKED_ENCODERS}
        shared = set.intersection(*(set(by_layers) for by_layers in stacks.values()))
        deepest = max(shared, default=None)
        if deepest is not None and deepest > 1:
            (a, b) = STACKED_ENCODERS[:2]
            line += f"; at {deepest} layers, " + compare(a, stacks[a][deepest], b, stacks[b][deepest], 1,
                                                        higher_is_better=True)
        lines.append(line)
    return lines


def write_report(out: Path, summary: dict[str, Any]) -> Path:
    """``depth-<task>.png`` (test accuracy against stack depth, BiLSTM vs HBiLSTM, error bars) and ``report.md``."""
    table = summary["table"]
    encoders = dict.fromkeys(row["encoder"] for row in table)
    lines = ["# Sentence classification", "", *findings(verdicts(summary)),
             "Encoders: " + "; ".join(f"`{e}`, {ENCODER_DESCRIPTIONS[e]}" for e in encoders) + ".", "",
             f"{count(len(summary['runs']), 'run')}, {sum(r['seconds'] for r in summary['runs']):.0f} s of "
             "training summed over them (runs of a sweep may have run side by side). Test accuracy (%), mean ± std "
             "over seeds (SST, TREC) or cross-validation folds (MR, Subj); the best validation epoch's weights are "
             "tested. " + _AS_KIM, ""]
    settings = summary.get("settings")
    if settings:  # each run's own, from its config.json (a resumed sweep keeps what its runs started with)
        varying = "; ".join(f"`{k}` " + ", ".join(map(str, v)) for k, v in settings["varying"].items())
        lines += ["Settings of these runs: " + ", ".join(f"`{k}={v}`" for k, v in settings["shared"].items())
                  + "." + (f" Differing between runs: {varying}." if varying else ""), ""]
    for task in dict.fromkeys(row["task"] for row in table):
        rows = [r for r in table if r["task"] == task]
        lines += [f"## {task}", "", markdown_table(
            ["encoder", "layers", "runs", "test accuracy (%)"],
            [[r["encoder"], r["layers"] if r["encoder"] in STACKED_ENCODERS else "-", r["runs"],
              format_mean_std(r, r["runs"])] for r in rows]
            + ([["Kim (2014) CNN-rand, published", "-", "-", f"{KIM_CNN_RAND[task]:.1f}"]]
               if task in KIM_CNN_RAND else [])), ""]  # (no published figure for a user's own set)
        contrasts = [c for c in paired_contrasts(summary) if c["task"] == task]
        if contrasts:
            lines += [markdown_table(
                ["encoder", "layers", "test accuracy − cnn, paired by seed or fold (points)", "verdict"],
                [[c["encoder"], c["layers"] if c["encoder"] in STACKED_ENCODERS else "-", difference_text(c),
                  resolved(c, c["encoder"], "cnn")] for c in contrasts]), ""]
        stacks = {e: [r for r in rows if r["encoder"] == e] for e in STACKED_ENCODERS}
        if all(len(v) > 1 for v in stacks.values()):
            plot_depth({"BiLSTM stack": stacks["bilstm"], "highway BiLSTM stack": stacks["hbilstm"]},
                       task, out / f"depth-{task}.png")
            lines += [f"![{task} depth](depth-{task}.png)", ""]
    report = out / "report.md"
    write_text(report, "\n".join(lines))
    return report


def _setting_keys(sweeps: dict[str, dict[str, Any]]) -> list[str]:
    """The run settings in which the sweeps differ (those their runs share within each sweep)."""
    shared = [s.get("settings", {}).get("shared", {}) for s in sweeps.values()]
    keys = dict.fromkeys(k for one in shared for k in one)
    return [k for k in keys if len({repr(one.get(k)) for one in shared}) > 1]


def choose(sweeps: dict[str, dict[str, Any]], encoder: str = "hbilstm", baseline: str = "cnn",
           sentences: dict[str, dict[str, int]] | None = None) -> dict[str, Any]:
    """``encoder``'s setting chosen on validation, task by task, among finished sweeps (``sweeps``: a
    label for each sweep's summary), and tested against ``baseline``'s, chosen on validation the same way.

    On each task, over the seeds (folds) that every candidate of either side (a sweep's runs of one
    encoder at one depth) finished (those some lack: ``left_out``, said in the scale; a task where none
    is finished by all is refused, naming what each finished), each side's candidate with the highest
    mean best validation accuracy is chosen (the first of equals); the chosen encoder's test accuracy is
    set against the chosen baseline's, paired by seed: :func:`paired_difference`. The test split chooses
    nothing. A side's candidates show the settings in which its sweeps differ, and both sides show the
    training settings (``train.*``, which apply to any model) in which the sweeps of both sides differ,
    so that what one side has and the other lacks (an average of the weights, say) is in both rows, one
    sweep a side included. ``sentences`` (each task's ``train``, ``val`` and ``test`` sizes) is kept for
    the report's scale. Returns the summary :func:`write_choice_report` and :func:`choice_verdicts` read
    (``recipe``: :data:`~highwaynet.recipes.analyses.CHOICE_RECIPE`, ``"sentences-choice"``; each task's
    ``baseline`` is the chosen one of its ``baselines``)."""
    keys = _candidate_keys(sweeps, (encoder, baseline))
    tasks = dict.fromkeys(r["task"] for s in sweeps.values() for r in s["runs"])
    results = []
    for task in tasks:
        sides = {e: _groups(sweeps, task, e) for e in (encoder, baseline)}
        if not all(sides.values()):
            continue
        finished = {(e, key): set(_accuracy(runs)) for e, groups in sides.items() for key, runs in groups.items()}
        pairs = set.intersection(*finished.values())
        if not pairs:  # (the task left out without a word, where a sweep was run with other seeds, was no choice)
            raise ValueError(f"on {TASK_NAMES.get(task, task)} no seed (fold) was finished by every candidate: "
                             + "; ".join(f"{e} at {label} ({count(layers, 'block')}) finished {_seeds_text(done)}"
                                         for (e, (label, layers)), done in finished.items())
                             + ": give sweeps run with seeds in common, or leave out the one run with others")
        left_out = sorted(set.union(*finished.values()) - pairs)
        kept = {e: {key: [r for r in runs if (r["seed"], r["fold"]) in pairs] for key, runs in groups.items()}
                for e, groups in sides.items()}
        candidates = {e: [_candidate(label, layers, runs, sweeps[label], keys[e]) for (label, layers), runs
                          in groups.items()] for e, groups in kept.items()}
        chosen = {e: max(range(len(c)), key=lambda i: (_or_low(c[i]["val"]["mean"]), -i))  # noqa: B023
                  for e, c in candidates.items()}
        base = candidates[baseline][chosen[baseline]]
        contrast = paired_difference(*(list(kept[e].values())[chosen[e]] for e in (encoder, baseline)))
        results.append({"task": task, "candidates": candidates[encoder], "chosen": chosen[encoder],
                        "baseline": {**base, "encoder": baseline}, "baselines": candidates[baseline],
                        "contrast": contrast, "left_out": [list(p) for p in left_out],
                        **({"sentences": sentences[task]} if sentences and task in sentences else {})})
    if not results:
        missing = [e for e in (encoder, baseline)
                   if not any(r["encoder"] == e for s in sweeps.values() for r in s["runs"])]
        raise ValueError(f"none of the sweeps ran {' or '.join(missing)}: give a sweep that did" if missing else
                         f"no task on which the sweeps ran both {encoder} and {baseline}: give sweeps run on a task "
                         f"in common")
    config = next(iter(sweeps.values()))["config"]
    return {"recipe": CHOICE_RECIPE, "encoder": encoder, "baseline": baseline, "settings": keys[encoder],
            "baseline_settings": keys[baseline], "epochs": config["base"]["train"]["epochs"], "tasks": results,
            "seconds": round(sum(r["seconds"] for s in sweeps.values() for r in s["runs"]), 1)}


def _groups(sweeps: dict[str, dict[str, Any]], task: str, encoder: str) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """``encoder``'s runs on ``task`` by (sweep's label, depth): the candidates of one side of a choice."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for label, summary in sweeps.items():
        for r in summary["runs"]:
            if r["task"] == task and r["encoder"] == encoder:
                groups.setdefault((label, r["layers"]), []).append(r)
    return groups


def _candidate(label: str, layers: int, runs: list[dict[str, Any]], sweep: dict[str, Any],
               keys: list[str]) -> dict[str, Any]:
    """One candidate of a choice: its sweep's label, depth, epochs, settings (``keys`` of the sweep's shared
    ones), validation and test accuracy (%) over ``runs``, and each run's values."""
    return {"setting": label, "layers": layers, "runs": len(runs), "epochs": sweep["config"]["base"]["train"]["epochs"],
            "settings": {k: sweep["settings"]["shared"].get(k) for k in keys},
            "val": mean_std([100 * r["best_val_acc"] for r in runs]),
            "test": mean_std([100 * r["test"]["acc"] for r in runs]), "each": _each(runs)}


def _each(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each run's seed, fold and accuracies (%), in seed and fold order: what a stored choice's means,
    choice and pairs are worked out from, kept beside them."""
    return [{"seed": r["seed"], "fold": r["fold"], "val": 100 * r["best_val_acc"], "test": 100 * r["test"]["acc"]}
            for r in sorted(runs, key=lambda r: (r["seed"], r["fold"]))]


def _or_low(value: float) -> float:
    return -math.inf if math.isnan(value) else value


def _settings_text(candidate: dict[str, Any]) -> str:
    return ", ".join(f"`{k}={v}`" for k, v in candidate["settings"].items()) or "-"


def choice_scale(summary: dict[str, Any], task: dict[str, Any]) -> str:
    """A chosen setting's scale on one task (an entry of the summary's ``tasks``), for the sentence that
    states its result: width, epochs, training sentences (and those validated and tested on), seeds."""
    chosen = task["candidates"][task["chosen"]]
    hidden, layers = chosen["settings"].get("hidden"), chosen.get("layers")
    size = task.get("sentences")
    return ((f"{count(layers, 'block')}, " if layers else "")
            + (f"{hidden} units per direction, " if hidden is not None else "")
            + f"{chosen.get('epochs', summary['epochs'])} epochs"  # (its sweep's; stored before: the first's)
            + (f", {size['train']:,} training sentences ({size['val']:,} to validate, {size['test']:,} to test)"
               if size else "") + f", {count(task['contrast']['n'], 'seed')}"
            + (f" ({_seeds_text(left)} left out: not every candidate finished {'it' if len(left) == 1 else 'them'})"
               if (left := task.get("left_out")) else ""))


def _seeds_text(pairs: Iterable[Sequence[int]]) -> str:
    """``"seeds 3, 4"`` for (seed, fold) pairs all of fold 0; ``"folds 2 (seed 1), 3 (seed 1)"`` for
    cross-validation."""
    pairs = sorted(tuple(p) for p in pairs)
    if all(fold == 0 for _, fold in pairs):
        return ("seed " if len(pairs) == 1 else "seeds ") + ", ".join(str(seed) for seed, _ in pairs)
    return ("fold " if len(pairs) == 1 else "folds ") + ", ".join(f"{fold} (seed {seed})" for seed, fold in pairs)


def _name(candidate: dict[str, Any], candidates: list[dict[str, Any]]) -> str:
    """A candidate's name: its sweep's label, with its depth where another candidate of its side comes from
    the same sweep (``"deep (2 blocks)"``): a sweep's runs at several depths are candidates each."""
    twins = sum(o["setting"] == candidate["setting"] for o in candidates)
    layers = candidate.get("layers")
    return candidate["setting"] + (f" ({count(layers, 'block')})" if twins > 1 and layers else "")


def _validation_margin(best: dict[str, Any], other: dict[str, Any], candidates: list[dict[str, Any]]) -> str:
    """How far the chosen candidate leads another on validation: paired by seed (fold), with its 95%
    interval, where the summary keeps each run's values (``each``); else (a choice stored before it
    did) against the seeds' spread."""
    a, b = _name(best, candidates), _name(other, candidates)
    if "each" not in best or "each" not in other:
        return compare(a, best["val"], b, other["val"], 1, higher_is_better=True)
    c = paired_differences(*({(r["seed"], r["fold"]): r["val"] for r in x["each"]} for x in (best, other)))
    return f"{a} − {b} on validation {difference_text(c)}: " + resolved(c, a, b)


def _side_text(encoder: str, best: dict[str, Any], candidates: list[dict[str, Any]]) -> str:
    """One side of a choice in words: ``"cnn at ema (`train.ema=0.995`; validation 80.1 ± 0.5%, against
    defaults …) tests at 80.9 ± 0.7%"``; a baseline stored without its validation (a choice stored before
    the baseline was chosen too): ``"cnn at defaults 80.3 ± 0.8%"``."""
    if "val" not in best:
        return f"{encoder} at {best['setting']} {format_mean_std(best['test'], best['runs'])}%"
    others = "; ".join(f"{_name(o, candidates)} {format_mean_std(o['val'], o['runs'])}% "
                       f"({_validation_margin(best, o, candidates)})" for o in candidates if o is not best)
    equals = [_name(o, candidates) for o in _equals(best, candidates)]
    return (f"{encoder} at {_name(best, candidates)} ({_settings_text(best)}; validation "
            f"{format_mean_std(best['val'], best['runs'])}%"
            + (f", the same mean as {' and '.join(equals)}'s: the first given of equals is taken" if equals else "")
            + (f", against {others}" if others else "")
            + f") tests at {format_mean_std(best['test'], best['runs'])}%")


def _equals(best: dict[str, Any], candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The other candidates whose mean validation accuracy is the chosen one's: validation did not choose
    between them, the order the sweeps were given in did (:func:`choose` takes the first of equals)."""
    return [o for o in candidates if o is not best and "val" in o and o["val"]["mean"] == best["val"]["mean"]]


def _baselines(task: dict[str, Any]) -> list[dict[str, Any]]:
    """A task's baseline candidates, the chosen one (``task["baseline"]``) in its place among them; the
    baseline alone for a choice stored before the baseline was chosen too."""
    base = task["baseline"]
    return [base if (c["setting"], c.get("layers")) == (base["setting"], base.get("layers")) else c
            for c in task.get("baselines", [base])]


def choice_verdicts(summary: dict[str, Any]) -> list[str]:
    """A sentence per task: each side's setting chosen on validation and its test accuracy, their
    difference paired by seed with its 95% interval, the scale (width, epochs, sentences, seeds), and
    Kim's published CNN-rand figure where there is one."""
    lines = []
    for t in summary["tasks"]:
        best, base, c = t["candidates"][t["chosen"]], t["baseline"], t["contrast"]
        baselines = _baselines(t)
        several = len(t["candidates"]) > 1  # (one setting given is no choice: not said to be chosen)
        line = (f"{TASK_NAMES.get(t['task'], t['task'])} ({choice_scale(summary, t)}): "
                + ("chosen on validation, " if several else "the one setting given, ")
                + _side_text(summary["encoder"], best, t["candidates"]) + "; "
                + (("chosen the same way, " if several else "chosen on validation, ") if len(baselines) > 1 else "")
                + _side_text(base["encoder"], base, baselines) + "; "
                f"{summary['encoder']} − {base['encoder']} {difference_text(c)}"
                + (f": {resolved(c, summary['encoder'], base['encoder'])}" if c["n"] > 1 else ""))
        if t["task"] in KIM_CNN_RAND:
            line += f" ({published(t['task'])})"
        lines.append(line)
    return lines


def write_choice_report(out: Path, summary: dict[str, Any]) -> Path:
    """``report.md`` of a :func:`choose` summary: the verdicts, and a table per task of both sides'
    candidates (validation and test accuracy) and the paired difference."""
    lines = ["# A setting chosen on validation", "", *findings(choice_verdicts(summary)),
             "Accuracy (%), mean ± std over seeds (folds); each run's best validation epoch's weights are "
             "tested. On each side the setting with the highest mean best validation accuracy is chosen (of "
             "equals, the first given); the test split chooses nothing. Differences are paired by seed (fold), "
             "with a 95% t-interval. "
             + _AS_KIM, ""]
    for t in summary["tasks"]:
        base, c = t["baseline"], t["contrast"]
        rows = []
        for encoder, candidates, chosen in ((summary["encoder"], t["candidates"], t["candidates"][t["chosen"]]),
                                            (base["encoder"], _baselines(t), base)):
            rows += [[f"{encoder}, {_name(o, candidates)}"
                      + ((" (chosen: the first given of equals)" if _equals(o, candidates) else " (chosen)")
                         if len(candidates) > 1 and o is chosen else ""),
                      _settings_text(o) if "settings" in o else "-",
                      format_mean_std(o["val"], o["runs"]) if "val" in o else "-",
                      format_mean_std(o["test"], o["runs"])] for o in candidates]
        if t["task"] in KIM_CNN_RAND:
            rows.append(["Kim (2014) CNN-rand, published", "-", "-", f"{KIM_CNN_RAND[t['task']]:.1f}"])
        lines += [f"## {TASK_NAMES.get(t['task'], t['task'])}", "",
                  markdown_table(["model", "settings", "validation", "test"], rows), "",
                  f"Chosen {summary['encoder']} − chosen {base['encoder']}, test accuracy paired by seed: "
                  f"{difference_text(c)}.", ""]
    report = out / "report.md"
    write_text(report, "\n".join(lines))
    return report


def _candidate_keys(sweeps: dict[str, dict[str, Any]], encoders: tuple[str, ...]) -> dict[str, list[str]]:
    """Each encoder's candidates' settings shown in a choice: those in which the sweeps that ran it
    differ (:func:`_setting_keys`), then the training settings (``train.*``) in which the sweeps that ran
    any of them do, so that one a side differs in from the other is shown on both, one sweep a side
    included."""
    ran = {e: {label: s for label, s in sweeps.items() if any(r["encoder"] == e for r in s["runs"])} for e in encoders}
    either = _setting_keys({label: s for by_label in ran.values() for label, s in by_label.items()})
    trainer = [k for k in either if k.startswith("train.")]
    return {e: list(dict.fromkeys([*_setting_keys(by_label), *trainer])) for e, by_label in ran.items()}
