"""The results and performance pages' tables and figures, made at build time from stored JSON.

Each ``docs/results/NAME.json`` (written by ``docs/results/store.py`` from a finished run folder)
becomes ``docs/_generated/NAME/report.md`` and its figures, drawn by the same code that wrote the
run's own report (:mod:`highwaynet.report`), with where and how it ran above it; each
``benchmarks/*.json`` (written by a benchmark script) becomes a table in
``docs/_generated/performance/NAME.md``, the latest ``benchmarks/gpu_suite_*.json`` the testing
page's GPU record, and ``benchmarks/torch_compat_*.json`` its records on other PyTorch releases. The
pages include these files: no number on them is typed by hand.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1]
GENERATED = DOCS / "_generated"
BENCHMARKS = DOCS.parent / "benchmarks"
DATA_NAMES = {"mnist5k": "MNIST 5k", "fashion-mnist": "Fashion-MNIST"}
NOT_RUN = "*Not stored yet: run the command above and store its folder with docs/results/store.py.*\n"
#: Studies whose stored numbers were withdrawn and whose rerun is not stored yet: what their pages say meanwhile.
NOT_RUN_YET: dict[str, str] = {}


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "not recorded"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def version_of(record: dict[str, Any]) -> str:
    """The highwaynet version that produced a stored result (every record carries it: a run's
    ``environment``, or, for a record assembled by hand, an ``environment`` with the version alone)."""
    version = record.get("environment", {}).get("highwaynet")
    if not isinstance(version, str) or not version:
        raise ValueError("a stored result without the version that produced it (environment.highwaynet): store it "
                         "with docs/results/store.py, or add the version by hand to a record assembled by hand")
    return version


def _provenance(record: dict[str, Any]) -> str:
    from highwaynet.report import environment_text

    lines = ["```{admonition} How this was made", ":class: note", "",
             f"- Made by: highwaynet {version_of(record)}, `{record['command']}`",
             f"- Machine and versions: {environment_text(record.get('environment', {}))}",
             f"- Wall time: {_minutes(record.get('seconds'))}"]
    if record.get("note"):
        lines.append(f"- Note: {record['note']}")
    return "\n".join(lines + ["```", ""])


def _sst2_depth(out: Path, record: dict[str, Any]) -> None:
    """The SST-2 depth series (summaries and single runs), as the sentence recipe plots them."""
    from highwaynet.recipes.sentences_report import plot_depth
    from highwaynet.report import markdown_table
    from highwaynet.training.run_dir import format_mean_std, mean_std

    series = {label: [{"layers": p["layers"], **(mean_std(p["values"]) if "values" in p else p),
                       "runs": len(p["values"]) if "values" in p else p["runs"]} for p in points]
              for label, points in record["series"].items()}
    plot_depth(series, "sst2", out / "depth-sst2.png")
    depths = sorted({p["layers"] for points in series.values() for p in points})
    rows = [[label, *(next((format_mean_std(p, p["runs"]) for p in points if p["layers"] == d), "-") for d in depths)]
            for label, points in series.items()]
    (out / "report.md").write_text("\n".join([
        "# SST-2 test accuracy as the stacks deepen", "", _made_by_hand(record), record["about"], "",
        "![depth](depth-sst2.png)", "",
        markdown_table(["stack", *(f"{d} layers" for d in depths)], rows), ""]))


def _recipe(name: str) -> tuple[Any, Any]:
    """A recipe's report writer and its verdicts (the sentences its report opens with), by the recipe's name."""
    from highwaynet.recipes import char_lm, depth, gates, rhn_depth, sentences_report, transformer_depth

    return {"depth": (depth.write_report, depth.verdicts),
            "gates": (gates.write_gates_report, gates.gates_verdicts),
            "lesion": (gates.write_lesion_report, gates.lesion_verdicts),
            "rhn-depth": (rhn_depth.write_report, rhn_depth.verdicts),
            "char-lm": (char_lm.write_report, char_lm.verdicts),
            "sentences": (sentences_report.write_report, sentences_report.verdicts),
            "sentences-choice": (sentences_report.write_choice_report, sentences_report.choice_verdicts),
            "transformer-depth": (transformer_depth.write_report, transformer_depth.verdicts)}[name]


def _report(out: Path, record: dict[str, Any]) -> None:
    """The stored result's report, written by its recipe's own code (as the run's own report was), and its
    verdicts alone in ``verdicts.md`` (for a guide page to quote: the same sentences the report opens with)."""
    write, verdicts = _recipe(record["recipe"])
    write(out, record["result"])
    from highwaynet.report import bullets

    (out / "verdicts.md").write_text("".join(line + "\n" for line in bullets(verdicts(record["result"]))))


def _made_by_hand(record: dict[str, Any]) -> str:
    """The line that opens a record assembled by hand from several runs' reports: the version they ran."""
    return f"*Made by highwaynet {version_of(record)}; assembled by hand from the runs' reports.*\n"


def _five_sets(out: Path, record: dict[str, Any]) -> None:
    """The sentence recipe's settings on Kim's five sets, and what each change did."""
    from highwaynet.report import markdown_table

    table = markdown_table(["setting", *record["columns"]],
                           [[r["encoder"], *(r[k] or "" for k in ("sst1", "sst2", "mr", "subj", "trec"))]
                            for r in record["rows"]])
    effects = markdown_table(["change (one block, on top of the rows before it)", "effect on the test accuracy (%)",
                              "seeds"], [[e["change"], e["effect"], e["seeds"]] for e in record["effects"]])
    (out / "report.md").write_text("\n".join([_made_by_hand(record), record["about"], "", table, "",
                                              "What each change did:", "", effects, ""]))


def _threads(env: dict[str, Any]) -> str:
    threads = env.get("cpu_threads", "?")
    return f"{threads} thread" + ("" if threads == 1 else "s")


def _runs_by_features(records: dict[str, dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The ``sentences-features-*`` sweeps' runs, pooled by (task, word features), in table order."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records.values():
        for run in record["result"]["runs"]:
            groups.setdefault((run["task"], run["word_features"]), []).append(run)
    order = ["words", "chars", "words+chars"]
    return dict(sorted(groups.items(), key=lambda item: (_task_name(item[0][0]),
                                                         order.index(item[0][1]))))


def _features(records: dict[str, dict[str, Any]]) -> str:
    """One table from the ``sentences-features-*`` sweeps: accuracy by task and word features."""
    from highwaynet.report import markdown_table
    from highwaynet.training.run_dir import format_mean_std, mean_std

    rows = []
    for (task, features), runs in _runs_by_features(records).items():
        test = mean_std([100 * r["test"]["acc"] for r in runs])
        unseen = mean_std([100 * r["test_unseen"]["acc"] for r in runs])
        rows.append([_task_name(task), features, len(runs), format_mean_std(test, len(runs)),
                     f"{format_mean_std(unseen, len(runs))} ({runs[0]['test_unseen']['n']} sentences)"])
    commands = [f"`{record['command']}` ({_minutes(record.get('seconds'))} of training, summed over its runs)"
                for record in records.values()]
    env = next(iter(records.values())).get("environment", {})
    return "\n".join([
        markdown_table(["task", "word features", "seeds", "test accuracy (%)",
                        "test accuracy (%), sentences with a word unseen in training"], rows), "",
        "Made by " + "; ".join(commands) + f", on {env.get('cpu', 'a CPU')} ({_threads(env)}), "
        f"torch {env.get('torch', '?')}.", ""])


def _task_name(task: str) -> str:
    """A sentence set's name as papers write it (``SST-2``), from the recipe's own table."""
    from highwaynet.recipes.sentences_report import TASK_NAMES

    return TASK_NAMES.get(task, task)


def _difference(c: dict[str, Any]) -> str:
    """A paired difference in the README's table: ``+0.155 [+0.111, +0.200]``, the mean alone for one seed."""
    return f"{c['mean']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}]" if c["n"] > 1 else f"{c['mean']:+.3f}"


def _candidate_settings(choice: dict[str, Any], side: str) -> str:
    """The candidate settings of one side of a sentence choice (``"candidates"``, the encoder's, or
    ``"baselines"``), each by its label with the settings shown for it: ``"a (`hidden=150`) or b (…)"``."""
    found = {c["setting"]: c["settings"] for t in choice["tasks"] for c in t.get(side, ())}
    return " or ".join(f"{label} (" + (", ".join(f"`{k}={v}`" for k, v in values.items()) or "-") + ")"
                       for label, values in found.items())


def _summary(records: dict[str, dict[str, Any]]) -> str:
    """The results index's table: one line per experiment, from the stored results."""
    from highwaynet.report import markdown_table
    from highwaynet.training.run_dir import format_mean_std, mean_std

    rows = []

    def add(names: str | list[str], row: list[str]) -> None:
        """A row of the table, with the version(s) that made its records before its page's link."""
        versions = sorted({version_of(records[n]) for n in ([names] if isinstance(names, str) else names)})
        rows.append([*row[:-1], ", ".join(versions), row[-1]])

    def pct(value: float) -> str:
        return f"{value:.1f}%"

    for name in ("depth-mnist5k", "depth-fashion-mnist"):
        if name in records:
            nets = records[name]["result"]["nets"]
            deepest = max(n["depth"] for n in nets)
            by_kind = {n["kind"]: n for n in nets if n["depth"] == deepest}
            data = records[name]["result"]["config"]["data"]
            add(name, [f"plain vs highway, {deepest} layers, {DATA_NAMES.get(data, data)}",
                         "test accuracy: " + ", ".join(f"{kind} {by_kind[kind]['test_acc']['mean']:.1f} ± "
                                                       f"{by_kind[kind]['test_acc']['std']:.1f}%"
                                                       for kind in ("highway", "plain")), "{doc}`/results/depth`"])
    if "gates-mnist5k" in records:
        r = records["gates-mnist5k"]["result"]
        add("gates-mnist5k", [f"the gates of a {r['depth']}-layer highway network",
                     f"{pct(100 * r['closed_fraction'])} of gate outputs below 0.1", "{doc}`/results/gates`"])
    if "lesion-mnist5k" in records:
        r = records["lesion-mnist5k"]["result"]
        add("lesion-mnist5k", ["lesioning one layer at a time",
                               f"{r['harmless']} of {len(r['lesioned'])} layers cost at most a point",
                               "{doc}`/results/gates`"])
    if "sentences-depth-sst2" in records:
        cells = []
        for label, points in records["sentences-depth-sst2"]["series"].items():
            deepest = max(points, key=lambda p: p["layers"])
            if deepest["layers"] == 20:
                values = deepest.get("values")
                cells.append(f"{label.split(',')[0]} {format_mean_std(mean_std(values), len(values))}%")
        add("sentences-depth-sst2", ["BiLSTM stacks of 20 blocks, SST-2", ", ".join(cells) + " test accuracy",
                     "{doc}`/results/sentences`"])
    if "sentences-choice" in records:
        # The highway BiLSTM's setting chosen on each task's validation split, tested against Kim's CNN,
        # its setting chosen the same way where the choice had several, paired by seed (the five-sets row
        # it replaces chose on test).
        from highwaynet.recipes.sentences_report import (
            KIM_CNN_RAND,
            KIM_WITH_PHRASES,
            choice_scale,
            difference_text,
            resolved,
        )

        choice = records["sentences-choice"]["result"]
        cells, averaged = [], []
        for t in choice["tasks"]:
            best, base = t["candidates"][t["chosen"]], t["baseline"]
            phrases = ", with phrases" if t["task"] in KIM_WITH_PHRASES else ""
            published = (f" (Kim, published{phrases}: {KIM_CNN_RAND[t['task']]:.1f})" if t["task"] in KIM_CNN_RAND
                         else "")
            several = len(t.get("baselines", ())) > 1
            cells.append(f"{_task_name(t['task'])} ({choice_scale(choice, t)}): {best['setting']} "
                         f"chosen, {format_mean_std(best['test'], best['runs'])} vs CNN "
                         + (f"at {base['setting']} " if several else "")
                         + f"{format_mean_std(base['test'], base['runs'])}{published}, chosen − CNN "
                         f"{difference_text(t['contrast'])}: {resolved(t['contrast'], 'highway BiLSTM', 'CNN')}")
            averaged.append((bool(best["settings"].get("train.ema")),
                             bool(base.get("settings", {}).get("train.ema"))))
        settings = _candidate_settings(choice, "candidates")
        baselines = _candidate_settings(choice, "baselines")
        several_baselines = len({c["setting"] for t in choice["tasks"] for c in t.get("baselines", ())}) > 1
        # (one setting is named as the record has it: its sweep need not have run the recipe's defaults; a
        # choice stored before the baseline was chosen too took it from its defaults sweep)
        against = (f"vs Kim's CNN-rand trained by the recipe, its setting chosen on validation too ({baselines})"
                   if several_baselines else f"vs Kim's CNN-rand trained by the recipe in one setting ({baselines})"
                   if baselines else "vs Kim's CNN-rand trained by the recipe at its defaults")
        caveat = records["sentences-choice"].get("caveat")
        add("sentences-choice", [f"highway BiLSTM, its setting chosen per task on validation ({settings}"
                                 + (f"; {caveat}" if caveat else "") + f"), {against}, paired by seed",
                                 "test accuracy (%): " + "; ".join(cells)
                                 + ("; the chosen setting averages its weights (`train.ema`), the CNN "
                                    + ("validation chose " if several_baselines else "") + "does not"
                                    if any(mine and not theirs for mine, theirs in averaged) else ""),
                                 "{doc}`/results/sentences`"])
    features = {n: r for n, r in records.items() if n.startswith("sentences-features-")}
    if features:
        cells: dict[str, list[str]] = {}
        for (task, word_features), runs in _runs_by_features(features).items():
            accuracy = [100 * r["test"]["acc"] for r in runs]
            cells.setdefault(task, []).append(f"{word_features} {format_mean_std(mean_std(accuracy), len(runs))}%")
        add(list(features), ["words, characters or both into a highway BiLSTM",
                     "; ".join(f"{_task_name(task)}: " + ", ".join(c) for task, c in cells.items())
                     + " test accuracy",
                     "{doc}`/results/sentences`"])
    if "rhn-depth-tinyshakespeare" in records:
        from highwaynet.recipes import rhn_depth

        study = records["rhn-depth-tinyshakespeare"]["result"]
        for entry, result in study["corpora"].items():
            best = rhn_depth.chosen(result)
            line = (f"best depth on validation {best['depth']}: test {rhn_depth.over_seeds(best, 'bpc')} bits/char "
                    f"(mean ± sd over the seeds)")
            for lstm, what in (("lstm", "same time"), ("lstm_steps", "same steps")):
                c = rhn_depth.contrast(result, lstm)
                if c is not None:
                    if lstm == "lstm":  # (its epochs, and its schedule's, differ from the RHNs': said beside it)
                        epochs = ", ".join(str(r["epochs"]) for r in result[lstm].get("runs", [result[lstm]]))
                        what += f" ({epochs} epochs, schedule set for {rhn_depth.schedule_epochs(study)})"
                    line += (f"; LSTM, {what}: {rhn_depth.over_seeds(result[lstm], 'bpc')}, RHN − LSTM "
                             + _difference(c))
            c = rhn_depth.contrast(result, "lstm_slow")
            if c is not None:  # the schedule control: both families on the equal-time LSTM's schedule, same steps
                line += (f"; both on the same-time LSTM's schedule, same steps: RHN "
                         f"{rhn_depth.over_seeds(result['rhn_slow'], 'bpc')}, LSTM "
                         f"{rhn_depth.over_seeds(result['lstm_slow'], 'bpc')}, RHN − LSTM {_difference(c)}")
                if (t := rhn_depth.contrast(result, rhn="rhn_slow")) is not None:  # (the same-time LSTM's own schedule)
                    line += f"; that RHN − LSTM, same time: {_difference(t)}"
            paired = ", RHN − LSTM paired by seed, 95%" if len(study["config"].get("seeds", [0])) > 1 else ""
            add("rhn-depth-tinyshakespeare", [f"RHN depth at a fixed budget ({entry}: "
                                              f"{rhn_depth.scale(study, entry)}{paired})", line,
                                              "{doc}`/results/rhn`"])
    for name in ("tune-tinyshakespeare", "tune-austen"):
        if name in records:
            for entry, result in records[name]["result"]["corpora"].items():
                tuned = result["tuning"]
                metric = next(iter(tuned.values()))["metric"]
                digits = 3 if metric == "bpc" else 0  # bits per character to a thousandth; perplexities whole
                trials = records[name]["result"]["config"].get("tune")
                add(name, [f"RHN vs LSTM under equal tuning ({entry}, {trials} trials each)",
                             ", ".join(f"{f.upper()} {t['test']['mean']:.{digits}f} ± {t['test']['std']:.{digits}f} "
                                       f"{metric}" for f, t in tuned.items()), "{doc}`/results/rhn`"])
    for name in ("char-lm-austen", "char-lm-austen-long"):
        if name not in records:
            continue
        from highwaynet.recipes import char_lm, lm
        from highwaynet.report import paired_text

        study = records[name]["result"]
        # (each model's mean ± sd, then the ablation's contrasts paired by seed, the best chosen on validation)
        cells = [f"{r['model']} {r['test_ppl']['mean']:.0f} ± {r['test_ppl']['std']:.0f}" for r in study["rows"]]
        cells += [f"{c['a']}{' (chosen on validation)' if len(c['among']) > 1 else ''} − {c['b']} "
                  + paired_text(c, "ppl", c["lower"], 1) for c in char_lm.contrasts(study)]
        add(name, [f"character-aware LMs (Austen, words: {lm.scale(study, 'words')}; differences paired by seed)",
                   "test perplexity: " + "; ".join(cells), "{doc}`/results/char-lm`"])
    transformer = "transformer-depth-tinyshakespeare"
    if transformer in records:
        from highwaynet.recipes.transformer_depth import contrast_text, test_loss_text

        result = records[transformer]["result"]
        deepest, base = max(result["config"]["depths"]), result["config"]["base"]
        scale = (f"Tiny Shakespeare chars, width {base['hidden']}, {result['tokens_per_run']:,} tokens, "
                 f"{len(result['config']['seeds'])} seeds")
        shown = ("pre-residual", "post-residual", "pre-fixed", "pre-highway", "pre-gtrxl", "pre-layerscale",
                 "post-deepnorm")
        cells = [f"{r['variant']} {test_loss_text(r)}" for r in result["rows"]
                 if r["depth"] == deepest and r["variant"] in shown]
        add(transformer, [f"Transformers of {deepest} blocks by residual connection ({scale})",
                               "test loss (nats): " + ", ".join(cells), "{doc}`/results/transformer`"])
        planned = [c for c in result["contrasts"] if c["a_depth"] == deepest and c["kind"] in (
            "learned gate vs fixed gate", "learned gate vs parameter-matched sum")]
        planned += [c for c in result["contrasts"] if c["a_depth"] == deepest and c["b_depth"] != deepest
                    and c["a"] in ("pre-residual", "pre-highway")]
        add(transformer, [f"the learned highway gate against its controls at {deepest} blocks, and {deepest} blocks "
                          f"against {min(result['config']['depths'])} (paired, 95%)",
                          "; ".join(contrast_text(c) for c in planned), "{doc}`/results/transformer`"])
    return markdown_table(["experiment", "what it measured", "version", "page"], rows) + "\n"


def results(names: list[str] | None = None) -> list[Path]:
    """Write ``_generated/NAME/report.md`` (and its figures) for each stored result, the sentence
    features' table and the results index's summary; returns the reports written."""
    written, records, features = [], {}, {}
    for path in sorted((DOCS / "results").glob("*.json")):
        if names is not None and path.stem not in names:
            continue
        record = json.loads(path.read_text())
        records[path.stem] = record
        if path.stem.startswith("sentences-features-"):
            features[path.stem] = record
            continue
        out = GENERATED / path.stem
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        if "series" in record:
            _sst2_depth(out, record)
        elif "effects" in record:
            _five_sets(out, record)
        else:
            _report(out, record)
            report_md = out / "report.md"
            report_md.write_text(_provenance(record) + report_md.read_text())
        written.append(out / "report.md")
    GENERATED.mkdir(exist_ok=True)
    for page in DOCS.rglob("*.md"):  # a page may name a result that has not been stored yet
        for name, file in re.findall(r"\{include\} \.\./_generated/([\w.+-]+)/([\w.-]+\.md)", page.read_text()):
            if not (GENERATED / name / file).is_file():
                (GENERATED / name).mkdir(parents=True, exist_ok=True)
                (GENERATED / name / file).write_text(NOT_RUN_YET.get(name, NOT_RUN))
    (GENERATED / "sentences-features.md").write_text(_features(features) if features else NOT_RUN)
    (GENERATED / "summary.md").write_text(_summary(records))
    return written


#: The performance page's sections, in the page's order: the benchmark files by the start of their name
#: (the longest start that fits), each section's heading.
BENCHMARK_SECTIONS = [("dense_highway", "Dense highway layer, forward and backward"),
                      ("mlp_step", "Highway MLP training step (the depth study's)"),
                      ("optimizer_step", "Optimiser update, default against fused"),
                      ("rhn", "RHN layer, forward and backward"),
                      ("rhn_cpu_parts", "CPU RHN recurrence, part by part"),
                      ("rhn_step", "One RHN micro-step on a GPU"),
                      ("import_time", "Import and help times"),
                      ("elmo", "ELMo's biLM LSTM, forward")]
#: Sections whose numbers involve no floating-point precision (their headings name the machine alone).
NO_PRECISION = {"import_time"}


def _ratio_header(record: dict[str, Any], key: str) -> str:
    """A ratio column's header: ``×`` and the row it divides by (the one at 1.00), in full."""
    reference = next((row for row, value in record[key].items() if value == 1.0), None)
    return "× " + (reference or key.removeprefix("ratio_to_").rstrip(":"))


def _precision(record: dict[str, Any]) -> str:
    settings = record.get("settings", {})
    if settings.get("tf32"):
        return "TF32"
    return str(settings.get("dtype") or "float32").replace("tf32", "TF32")


def _interpretation(section: str, record: dict[str, Any]) -> str:
    """What a table's numbers say, in a sentence drawn from them (the rows each benchmark writes)."""
    ms = record["ms"]

    def ratio(a: str, b: str) -> float:
        return ms[a] / ms[b]

    try:
        if section == "import_time":
            layers = ratio("from highwaynet import * (the layers)", "import torch")
            return (f"`import highwaynet` takes {ms['import highwaynet']:.0f} ms (it imports no PyTorch); the layers "
                    f"(`from highwaynet import *`) take {layers:.2f}× `import torch`'s {ms['import torch']:.0f} ms; "
                    f"the command's help answers in "
                    f"{ms['highwaynet --help']:.0f} ms.")
        if section == "elmo":
            text = (f"highwaynet's LSTM takes {ratio('ours', 'floor (products alone)'):.2f}× the time of its matrix "
                    f"products alone and {ratio('ours', 'AllenNLP per-step'):.2f} of AllenNLP's per-step "
                    f"algorithm's ({ratio('AllenNLP per-step', 'ours'):.1f}× faster)")
            if "floor, MKL packed weights" in ms:
                text += (f"; with the weights in MKL's packed layout the products take "
                         f"{ratio('floor, MKL packed weights', 'floor (products alone)'):.2f} of their time")
            if "biLM: ours" in ms:
                text += (f"; the whole biLM, {ratio('biLM: AllenNLP per-step LSTMs', 'biLM: ours'):.1f}× faster than "
                         f"with AllenNLP's loop in each LSTM")
            return text + "."
        if section == "dense_highway":
            others = [r for r in ms if r.startswith(("separate", "one projection"))]
            best = min(others, key=ms.__getitem__)
            return (f"highwaynet's layer takes {ratio('ours: Highway, eager', 'floor (projections alone)'):.2f}× the "
                    f"time of its matrix products alone, and {ratio('ours: Highway, eager', best):.2f}× that of the "
                    f"faster other algorithm, {best}; compiled, "
                    f"{ratio('ours: Highway, torch.compile', 'floor (projections alone)'):.2f}× the products' time.")
        if section == "mlp_step":
            return (f"Replayed as a CUDA graph, a step takes {ratio('ours, CUDA graph', 'ours, eager'):.2f} of the "
                    f"eager step's time: a net of 50 layers 50 wide is bound by launching its small kernels, and a "
                    f"graph launches them at once. Eager, highwaynet's step (one projection) takes "
                    f"{ratio('ours, eager', 'separate H and T, eager (Chainer, Lasagne)'):.2f} of the separate "
                    f"projections' (Chainer, Lasagne).")
        if section == "optimizer_step":
            models = dict.fromkeys(r.split(":")[0] for r in ms)
            return ("The fused update takes " + ", ".join(
                f"{ratio(f'{m}: update, fused', f'{m}: update, default'):.2f} ({m})" for m in models)
                + " of the default update's time; of a whole training step, " + ", ".join(
                f"{ratio(f'{m}: training step, fused', f'{m}: training step, default'):.2f} ({m})" for m in models)
                + ": the larger the model's share of time in its update, the more fusing it gives.")
        if section == "rhn_cpu_parts":
            products = sum(ms[r] for r in ("forward: products", "backward: walk products", "backward: weight products"))
            return (f"The matrix products are {products / ms['window']:.0%} of a window's time; the C++ loops take "
                    f"{ratio('window, C++ loops', 'window'):.2f} of the PyTorch loop's time, the rest being the "
                    f"small operations between the products.")
        if section == "rhn_step":
            fused = min((r for r in ms if r.startswith("forward: one kernel")), key=ms.__getitem__)
            back = min((r for r in ms if r.startswith("backward: one kernel")), key=ms.__getitem__)
            variant = fused.removeprefix("forward: one kernel").lstrip(", ")
            return (f"One kernel per micro-step{f' ({variant})' if variant else ''} takes "
                    f"{ratio(fused, 'forward: product + gate'):.2f} of a product and a gate kernel forward, and "
                    f"{ratio(back, 'backward: gate + product'):.2f} backward; forward it is "
                    f"{ratio(fused, 'forward: product alone'):.2f}× the product alone.")
        if section == "rhn":
            lstm = next(r for r in ms if r.startswith("LSTM"))
            text = (f"highwaynet's RHN takes {ratio('ours', 'floor'):.2f}× its matrix products alone and "
                    f"{ratio('ours', 'labml loop'):.2f} of a loop of PyTorch operations' time (labml's); an "
                    f"{lstm.split(' (')[0]} of the same parameters takes {ratio(lstm, 'ours'):.2f} of the RHN's")
            if "ours, CUDA graph" in ms:
                text += (f"; in a CUDA graph the RHN is {ratio('ours, CUDA graph', 'floor, CUDA graph'):.2f}× the "
                         f"products' graph")
            return text + "."
    except (KeyError, StopIteration, ZeroDivisionError):
        pass
    fastest, slowest = min(ms, key=ms.__getitem__), max(ms, key=ms.__getitem__)
    return f"The fastest row is {fastest} ({ms[fastest]:.3f} ms), {ratio(slowest, fastest):.1f}× faster than {slowest}."


def _made_by(record: dict[str, Any]) -> str:
    """Which version measured a benchmark: "highwaynet 0.4.0 (commit 1a2b3c4d, 2026-11-27)", from the stamp
    that ``benchmarks/provenance.py`` writes; records made before the stamp existed (0.3 and earlier) say so."""
    if not isinstance(record.get("highwaynet"), str):
        return "Made before 0.4 (its version not recorded)"
    commit = str(record.get("commit", "unknown"))
    commit = commit[:10] + "+modified" * commit.endswith("+modified") if commit != "unknown" else commit
    return f"highwaynet {record['highwaynet']} (commit {commit}, {record.get('date', 'undated')})"


def _heading(record: dict[str, Any], section: str) -> str:
    return str(record.get("device", "?")) + ("" if section in NO_PRECISION else f", {_precision(record)}")


def _table(record: dict[str, Any], name: str, section: str, *, named: bool = False) -> str:
    """A benchmark's table under a heading of its own (the machine and precision, and the file's name where
    ``named``: another table of the section has the same machine and precision), what made it, and a
    sentence on what its numbers say."""
    from highwaynet.report import markdown_table

    ms = record["ms"]
    ratio_key = next((k for k in record if k.startswith("ratio_to_")), None)
    extra = [k for k in record if isinstance(record[k], dict) and k not in ("ms", "settings") and k != ratio_key
             and set(record[k]) == set(ms)]
    header = ["row", "ms", *([_ratio_header(record, ratio_key)] if ratio_key else []), *extra]
    rows = [[row, f"{value:.3f}", *([f"{record[ratio_key][row]:.2f}"] if ratio_key else []),
             *(f"{record[k][row]:.4g}" for k in extra)] for row, value in ms.items()]
    script = next((f"benchmarks/{stem}.py" for stem in (name, name.rsplit("_", 1)[0], section)
                   if (BENCHMARKS / f"{stem}.py").is_file()), f"benchmarks/{section}.py")
    command = record.get("command") or f"python {script} ..."
    settings = ", ".join(f"{k}={v}" for k, v in record.get("settings", {}).items() if k not in ("json", "tiles"))
    return "\n".join([f"### {_heading(record, section)}" + (f" (`{name}.json`)" if named else ""), "",
                      f"{record['title'][:1].upper()}{record['title'][1:]}. {_made_by(record)}, torch "
                      f"{record.get('torch', '?')}; `{command}`" + (f" (settings: {settings})" if settings else "")
                      + ".", "",
                      markdown_table(header, rows), "", _interpretation(section, record), "",
                      f"From `benchmarks/{name}.json`.", ""])


def _compiled(record: dict[str, Any]) -> str:
    """The section on the Triton kernels compiled for GPUs without one (``benchmarks/triton_compile.json``,
    written by ``benchmarks/triton_compile.py``): per GPU, each kernel's most registers and shared memory
    over its tiles, by precision, and what broke a limit or spilled."""
    from highwaynet.report import markdown_table

    kernels = record["kernels"]
    old = [k["kernel"] for k in kernels if not {"persistent", "allocated"} <= k.keys()]
    if old:
        raise ValueError(f"benchmarks/triton_compile.json has kernels without 'persistent' and 'allocated' "
                         f"({old[0]}, ...), a record from before 0.4.0: rerun python benchmarks/triton_compile.py")
    order = ["float32", "tf32", "bfloat16"]
    precisions = sorted({k["precision"] for k in kernels}, key=lambda p: (order.index(p) if p in order else 9, p))
    broken = [k for k in kernels if k["problems"]]
    spilling = [k for k in kernels if k["spilled"]]
    spilled = sorted({k["kernel"] for k in spilling})
    persistent = [k for k in kernels if k["persistent"]]
    lines = ["## Triton kernels compiled for GPUs, on a machine without one", "",
             f"Each Triton kernel compiled through its own launch code (`{record['command']}`; "
             f"{_made_by(record)}, Triton {record['triton']}) for each GPU below, at the shapes the benchmarks "
             f"time (the RHN at the PTB shape, ELMo's LSTM, the dense layer), with every tile the autotuner tries and "
             f"the persistent kernels' default and other tiles: **{len(kernels)} kernels, "
             f"{len(broken)} beyond a limit, {len(spilling)} spilling to local memory**"
             + (f" ({', '.join(spilled)})" if spilled else "") + ". "
             + (f"A persistent kernel's program, which must stay resident with every other, takes at most "
                f"{max(k['allocated'] for k in persistent):,} of an SM's 65,536 "
                f"registers (allocated 256 a warp). "
                if persistent else "")
             + "A GPU run times them; this says whether they compile, fit and spill (a kernel's local memory a "
               "thread: ptxas's spills). Each cell: the most registers a thread and shared memory a block, over the "
               "kernel's tiles and launches, and the most bytes spilled where any; empty where the layers do not "
               "launch the kernel in that precision (in exact float32 they take cuBLAS's products and the gate "
               "kernels).", ""]
    for arch, limits in record["limits"].items():
        rows = []
        for name, what in record["what"].items():
            cells = []
            for precision in precisions:
                mine = [k for k in kernels if k["kernel"] == name and str(k["arch"]) == arch
                        and k["precision"] == precision]
                spill = max((k["spilled"] for k in mine), default=0)
                cells.append(f"{max(k['registers'] for k in mine)}, {max(k['shared'] for k in mine) / 1024:.0f} KB"
                             + (f", {spill} B spilled" if spill else "")
                             + (" (over a limit)" if any(k["problems"] for k in mine) else "") if mine else "")
            rows.append([what, *cells])
        lines += [f"### {limits['gpu']}: at most {limits['shared_per_block'] // 1024} KB of shared memory a block", "",
                  markdown_table(["kernel", *(f"{p}: registers, shared (spilled)" for p in precisions)], rows), ""]
    lines.append("From `benchmarks/triton_compile.json`.")
    return "\n".join(lines) + "\n"


def performance() -> Path:
    """``_generated/performance.md``: a section per benchmark (:data:`BENCHMARK_SECTIONS`), in it a table per
    ``benchmarks/*.json`` under a heading of its own, each with a sentence on what it says; and
    ``_generated/compiled.md``, the Triton kernels compiled for GPUs (:func:`_compiled`)."""
    out = GENERATED / "performance.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    found: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for path in sorted(BENCHMARKS.glob("*.json")):
        record = json.loads(path.read_text())
        if "ms" in record:
            section = max((prefix for prefix, _ in BENCHMARK_SECTIONS if path.stem.startswith(prefix)), key=len,
                          default=path.stem)
            found.setdefault(section, []).append((path.stem, record))
    sections: dict[str, list[str]] = {}
    for section, records in found.items():
        headings = Counter(_heading(record, section) for _, record in records)
        sections[section] = [f"<!-- {name}.json -->\n" + _table(record, name, section,
                                                                named=headings[_heading(record, section)] > 1)
                             for name, record in records]
    titles = dict(BENCHMARK_SECTIONS)
    out.write_text("\n".join(f"## {titles.get(section, section)}\n\n" + "\n".join(tables)
                             for section, tables in sorted(sections.items(), key=lambda item: [
                                 p for p, _ in BENCHMARK_SECTIONS].index(item[0]) if item[0] in titles else 99)))
    compiled = BENCHMARKS / "triton_compile.json"
    (GENERATED / "compiled.md").write_text(_compiled(json.loads(compiled.read_text())) if compiled.is_file() else
                                           "## Triton kernels compiled for GPUs\n\n*No record is stored yet "
                                           "(`python benchmarks/triton_compile.py` makes it).*\n")
    return out


def _failed(failures: dict[str, str]) -> list[str]:
    """A Markdown list of failed tests, each with its one-line why where the record has one."""
    return [f"- `{name}`" + (f": {why}" if why else "") for name, why in failures.items()]


def gpu_suite() -> Path:
    """``_generated/gpu-suite.md``: the latest record of the whole suite on a GPU (``benchmarks/gpu_suite_*.json``,
    written by ``benchmarks/gpu_suite.sh OUT tests-all``), and the earlier ones."""
    out = GENERATED / "gpu-suite.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    records = sorted((json.loads(p.read_text()) | {"file": p.name} for p in BENCHMARKS.glob("gpu_suite_*.json")),
                     key=lambda r: (r["date"], r["file"]), reverse=True)
    if not records:
        out.write_text("*No run on a GPU is stored yet.*\n")
        return out
    from highwaynet.report import markdown_table

    latest = records[0]
    result = f"{latest['passed']} passed, {latest['failed']} failed, {latest['skipped']} skipped"
    version = f"highwaynet {latest['highwaynet']}, " if isinstance(latest.get("highwaynet"), str) else ""
    lines = [f"**Last run on a GPU:** {version}commit `{latest['commit'][:10]}`, {latest['date']}, {latest['device']} "
             f"(torch {latest['torch']}, Triton {latest['triton']}): **{result}**."
             + (f" {latest['note'][0].upper() + latest['note'][1:]}." if latest.get("note") else ""), "",
             f"Command: `{latest['command']}`. From `benchmarks/{latest['file']}`.", ""]
    failed = latest.get("failures") or dict.fromkeys(latest.get("failed_names", []), "")  # (records before 0.4)
    if failed:
        lines += ["Failed in that run:", "", *_failed(failed), ""]
    lines += ["All stored runs:", "", markdown_table(
        ["date", "commit", "device", "torch", "passed", "failed", "skipped"],
        [[r["date"], f"`{r['commit'][:10]}`", r["device"], r["torch"], r["passed"], r["failed"], r["skipped"]]
         for r in records]), ""]
    out.write_text("\n".join(lines))
    return out


def _torch_release(record: dict[str, Any]) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", record["torch"].split("+")[0])[:3])


def torch_compat() -> Path:
    """``_generated/torch-compat.md``: the suite's stored records on other PyTorch releases
    (``benchmarks/torch_compat_*.json``, written by ``benchmarks/torch_compat.py VERSION``), oldest torch
    first, with each failure and why, and why tests skipped."""
    out = GENERATED / "torch-compat.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    records = sorted((json.loads(p.read_text()) | {"file": p.name} for p in BENCHMARKS.glob("torch_compat_*.json")),
                     key=_torch_release)
    if not records:
        out.write_text("*No run on another torch is stored yet.*\n")
        return out
    from highwaynet.report import markdown_table

    def installed(r: dict[str, Any]) -> str:
        if not r.get("install_seconds"):
            return "(a venv made before)"
        return f"{_minutes(sum(r['install_seconds'].values()))}, {r['venv_gb']:.1f} GB"

    lines = [markdown_table(
        ["torch", "Python", "date", "commit", "highwaynet", "passed", "failed", "errors", "skipped", "tests took",
         "install took", "record"],
        [[f"**{r['torch']}**", r["python"], r["date"], f"`{r['commit'][:10]}`", r["highwaynet"], r["passed"],
          r["failed"], r["errors"], r["skipped"], _minutes(r["seconds"]), installed(r), f"`benchmarks/{r['file']}`"]
         for r in records]), ""]
    for r in records:
        why_skipped: dict[str, int] = {}
        for why in r["skips"].values():
            why_skipped[why] = why_skipped.get(why, 0) + 1
        packages = ", ".join(f"{name} {version}" for name, version in r["packages"].items() if version)
        note = f" {r['note'][0].upper() + r['note'][1:]}." if r["note"] else ""
        lines += [f"**torch {r['torch']}** (Python {r['python']}, {r['platform']}; {packages}). "
                  f"Command: `{r['command']}`.{note}", ""]
        if r["failures"]:
            lines += ["Failed:", "", *_failed(r["failures"]), ""]
        if why_skipped:
            lines += ["Skipped, and why:", "", *(f"- {why or 'no reason given'} ({count})"
                                                 for why, count in sorted(why_skipped.items())), ""]
    out.write_text("\n".join(lines))
    return out


README = DOCS.parent / "README.md"
_README_SUMMARY = re.compile(r"(<!-- summary:start[^\n]*-->\n).*?(<!-- summary:end -->)", re.S)


def readme_summary() -> str:
    """The README's summary table: the results index's, its page links made relative to the README."""
    records = {path.stem: json.loads(path.read_text()) for path in sorted((DOCS / "results").glob("*.json"))}
    return re.sub(r"\{doc\}`/results/([\w-]+)`", r"[\1](docs/results/\1.md)", _summary(records))


def write_readme_summary() -> bool:
    """Put :func:`readme_summary` between the README's summary markers; returns whether it changed."""
    text = README.read_text()
    new = _README_SUMMARY.sub(lambda m: m[1] + readme_summary() + m[2], text)
    README.write_text(new)
    return new != text


def _generate(app: Any) -> None:
    results()
    performance()
    gpu_suite()
    torch_compat()


def _link_figures(app: Any, doctree: Any, docname: str) -> None:
    """Each figure drawn from stored results links to its full image (Sphinx links an image with a width to
    its file: ``html_scaled_image_link``), and is shown at most as wide as the column: the column's width
    for a figure wider than it (drawn for it: :data:`highwaynet.report.SHOWN_WIDTH`), else its own."""
    from docutils import nodes
    from sphinx.util.images import get_image_size

    from highwaynet.report import SHOWN_WIDTH

    for node in doctree.findall(nodes.image):
        if "_generated/" not in node["uri"] or any(key in node for key in ("width", "height", "scale")):
            continue
        size = get_image_size(Path(app.srcdir) / node["uri"])
        node["width"] = "100%" if size is None or size[0] >= SHOWN_WIDTH else f"{size[0]}px"


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", _generate)
    app.connect("doctree-resolved", _link_figures)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--readme"]:
        raise SystemExit("usage: python docs/_ext/results.py --readme   (rewrites the README's results table)")
    print("README.md's results table " + ("updated" if write_readme_summary() else "was up to date"))
