"""Figures (matplotlib, PNG) and Markdown reports of finished experiments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: never needs a display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

__all__ = ["compare", "markdown_table", "write_char_lm_report", "write_depth_report", "write_gates_report",
           "write_lesion_report", "write_html", "write_rhn_depth_report", "write_run_report", "write_sentences_report",
           "plot_sentence_depth"]


def _save(fig, path: Path, dpi: int = 120) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)


def _whole_numbers(axis) -> None:
    """Ticks only at whole numbers, for an axis that counts layers or epochs (no layer 2.5)."""
    axis.set_major_locator(MaxNLocator(integer=True))


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table of ``rows`` under ``header`` (floats to three decimals)."""
    def cell(v: Any) -> str:
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _metric(level: str) -> tuple[str, str]:
    return ("bpc", "bits per character") if level == "char" else ("ppl", "perplexity")


def write_rhn_depth_report(out: Path, summary: dict[str, Any]) -> Path:
    """``depth.png`` (test metric against recurrence depth, LSTM as a line) and ``report.md``; for a
    sweep run with ``tune``, ``tuning.png`` (each family's trials) and the equal-tuning tables."""
    corpora = summary["corpora"]
    if any("tuning" in result for result in corpora.values()):
        return _write_tuning_report(out, summary)
    fig, axes = plt.subplots(1, len(corpora), figsize=(5 * len(corpora), 3.6), squeeze=False)
    sections = []
    for ax, (entry, result) in zip(axes[0], corpora.items(), strict=True):
        key, label = _metric(result["level"])
        rows = result["rhn"]
        depths = [r["depth"] for r in rows]
        ax.plot(depths, [r["test"][key] for r in rows], "o-", label="RHN (test)")
        ax.plot(depths, [r["final"][f"val_{key}"] for r in rows], "s--", alpha=0.6, label="RHN (valid)")
        if "lstm" in result:
            ax.axhline(result["lstm"]["test"][key], color="C3", ls=":", label="LSTM, same parameters and time")
        ax.set(xlabel="recurrence depth", ylabel=f"{label} (lower is better)", xticks=depths,
               title=f"{entry}, {summary['config']['budget']:,} parameters")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        table = markdown_table(
            ["model", "depth", "hidden", "parameters", "epochs", f"valid {key}", f"test {key}", "train time (s)"],
            [[r["model"].upper(), r["depth"] or "-", r["hidden"], f"{r['parameters']:,}", r["epochs"],
              r["final"][f"val_{key}"], r["test"][key], f"{r['train_seconds']:.0f}"]
             for r in rows + ([result["lstm"]] if "lstm" in result else [])])
        best = min(rows, key=lambda r: r["test"][key])
        text = [f"## {entry}", "", table, ""]
        if "lstm" in result:
            lstm = result["lstm"]
            verdict = "beats" if best["test"][key] < lstm["test"][key] else "does not beat"
            text += [f"The best RHN (depth {best['depth']}, test {key} {best['test'][key]:.3f}) {verdict} the LSTM "
                     f"of equal parameters trained for the same time ({lstm['train_seconds']} s, "
                     f"test {key} {lstm['test'][key]:.3f}).", ""]
        text += [f"Sample from the depth-{best['depth']} RHN (temperature 0.8):", "", "```",
                 best["sample"].strip(), "```", ""]
        sections.append("\n".join(text))
    _save(fig, out / "depth.png", dpi=120)
    report = out / "report.md"
    report.write_text("\n".join([
        "# RHN: recurrence depth at a fixed parameter budget", "",
        f"Total time {summary['seconds']:.0f} s. Each RHN's state size is chosen so that the whole model "
        f"(embedding tied to the decoder) has about {summary['config']['budget']:,} parameters; every RHN "
        "trains for the same number of steps; the LSTM trains for as long as the best RHN did. Dropout "
        f"{summary['config']['base']['state_dropout']}; training steps "
        f"{'replayed as CUDA graphs' if summary.get('cuda_graph') else 'run eagerly'}.", "",
        "![depth](depth.png)", "", *sections]))
    return report


def compare(a: str, a_stat: dict[str, float], b: str, b_stat: dict[str, float], digits: int = 3) -> str:
    """Which of two results (``mean`` and ``std`` over seeds, lower is better) is ahead, and whether
    by more than the seeds' spread (the two mean ± std intervals do not overlap)."""
    (first, one), (second, two) = sorted(((a, a_stat), (b, b_stat)), key=lambda p: p[1]["mean"])
    gap = two["mean"] - one["mean"]
    apart = one["mean"] + one["std"] < two["mean"] - two["std"]
    return f"{first} beats {second} by {gap:.{digits}f}, " + ("beyond the seeds' spread" if apart else
                                                              "within the seeds' spread")


def _tuning_rows(tuned: dict[str, Any]) -> list[list[Any]]:
    shape = "depth" if "depth" in tuned["trials"][0] else "layers"
    return [["**best**" if i == tuned["best"] else i + 1, f"{t['lr']:.2g}", f"{t['dropout']:.2f}",
             f"{shape} {t[shape]}", t["hidden"], f"{t['parameters']:,}", f"{t['best_val']:.4f}",
             f"{t['train_seconds']:.0f}"]
            for i, t in enumerate(tuned["trials"])]


def _write_tuning_report(out: Path, summary: dict[str, Any]) -> Path:
    """RHN against LSTM under equal tuning: each family's trials (validation), and the best's test."""
    from .training.run_dir import format_mean_std

    corpora = summary["corpora"]
    fig, axes = plt.subplots(1, len(corpora), figsize=(4.5 * len(corpora), 3.6), squeeze=False)
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
        best = {f: t["test"] for f, t in tuning.items()}
        table = markdown_table(["family (best of its trials)", "settings", f"test {key}, mean ± std over seeds",
                                "seeds"],
                               [[f.upper(), ", ".join(f"{k} {v}" for k, v in t["best_settings"].items()
                                                      if k in ("lr", "dropout", "depth", "layers", "hidden")),
                                 format_mean_std(t["test"], len(t["test"]["values"]), 3), len(t["test"]["values"])]
                                for f, t in tuning.items()])
        (a, a_stat), (b, b_stat) = list(best.items())[:2]
        verdict = compare(a.upper(), a_stat, b.upper(), b_stat)
        sections.append("\n".join([f"## {entry}", "", table, "", f"Under equal tuning: {verdict}.", "",
                                    *[f"### {f.upper()} trials\n\n" + markdown_table(
                                        ["trial", "lr", "dropout", "shape", "hidden", "parameters",
                                         "best validation loss", "train time (s)"], _tuning_rows(t)) + "\n"
                                      for f, t in tuning.items()]]))
    _save(fig, out / "tuning.png", dpi=120)
    config = summary["config"]
    report = out / "report.md"
    report.write_text("\n".join([
        "# RHN against LSTM under equal tuning", "",
        f"Total time {summary['seconds']:.0f} s. Each family (RHN, LSTM) gets {config['tune']} random-search trials "
        f"at about {config['budget']:,} parameters (Melis, Dyer & Blunsom, 2018): a learning rate, one dropout rate "
        "and its shape (the RHN's recurrence depth, the LSTM's layers), the state size following from the budget; "
        f"each trains {config['base']['train']['epochs']} epochs. The best trial on validation is then trained with "
        f"{config['tune_seeds']} seeds and tested.", "", "![trials](tuning.png)", "", *sections]))
    return report


def write_char_lm_report(out: Path, summary: dict[str, Any]) -> Path:
    """``char-lm.png`` (test perplexity of each model, error bars over seeds) and ``report.md``."""
    from .training.run_dir import format_mean_std

    rows, config = summary["rows"], summary["config"]
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(rows)), 3.6))
    names = [r["model"] for r in rows]
    colors = ["C1" if "highway" in n else "C0" if "MLP" in n else "C2" for n in names]
    ax.bar(range(len(rows)), [r["test_ppl"]["mean"] for r in rows], yerr=[r["test_ppl"]["std"] for r in rows],
           color=colors, capsize=4)
    ax.set(xticks=range(len(rows)), ylabel="test perplexity (lower is better)",
           title=f"{config['corpus']}, about {config['budget']:,} parameters each")
    ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
    low = min(r["test_ppl"]["mean"] - 2 * r["test_ppl"]["std"] for r in rows)
    ax.set_ylim(bottom=max(0.0, 0.9 * low))
    ax.grid(alpha=0.3, axis="y")
    _save(fig, out / "char-lm.png", dpi=120)
    table = markdown_table(["model", "LSTM state", "parameters", "test perplexity", "valid perplexity (last epoch)",
                            "train time (s)"],
                           [[r["model"], r["hidden"], f"{r['parameters']:,}",
                             format_mean_std(r["test_ppl"], len(r["test_ppl"]["values"]), 1), f"{r['val_ppl']:.1f}",
                             f"{r['train_seconds']:.0f}"] for r in rows])
    base = config["base"]
    report = out / "report.md"
    report.write_text("\n".join([
        "# Character-aware language models: highway layers, MLP layers, or words", "",
        f"{summary['corpus']}. Total time {summary['seconds']:.0f} s. Each word is read by its characters "
        f"(Kim et al., 2016: a `{base['char_encoder']}` character CNN, then highway or MLP layers) or by its own "
        f"vector (the word LSTM); then a {base['layers']}-layer LSTM and a softmax over the "
        f"{base['max_vocab']:,} words. Every model has about {config['budget']:,} parameters (its LSTM's state "
        f"size chosen to fit); {base['train']['epochs']} epochs of {base['steps_per_epoch'] or 'all'} windows of "
        f"{base['bptt']} words x {base['batch_size']} streams; seeds {config['seeds']}"
        + (f"; each model's learning rate, dropout and layers chosen by {config['tune']} random-search trials"
           if config.get("tune") else "") + ".", "",
        "![test perplexity](char-lm.png)", "", table, "", *_char_lm_verdicts(rows), ""]))
    return report


def _char_lm_verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """The ablation's comparisons, each against the seeds' spread: highway against MLP layers of the
    same count, the best highway model against none, the best character model against words."""
    by_name = {r["model"]: r["test_ppl"] for r in rows}
    lines = []
    for name in by_name:
        if "highway" in name and name.replace("highway", "MLP") in by_name:
            lines.append(compare(name, by_name[name], name.replace("highway", "MLP"),
                                 by_name[name.replace("highway", "MLP")], 1))
    highway = [n for n in by_name if "highway" in n and not n.startswith("chars, 0 ")]
    if highway and "chars, 0 highway" in by_name:
        best = min(highway, key=lambda n: by_name[n]["mean"])
        lines.append(compare(best, by_name[best], "chars, 0 highway", by_name["chars, 0 highway"], 1))
    chars = [n for n in by_name if n.startswith("chars")]
    words = [n for n in by_name if n.startswith("words")]
    if chars and words:
        best = min(chars, key=lambda n: by_name[n]["mean"])
        lines.append(compare(best, by_name[best], words[0], by_name[words[0]], 1))
    return ["Test perplexity, mean ± std over the seeds:", "", *(f"- {line}." for line in lines)] if lines else []


def plot_sentence_depth(series: dict[str, list[dict[str, Any]]], task: str, path: Path) -> None:
    """Test accuracy against stack depth: one line per label, each point ``{"layers", "mean", "std"}``
    (error bars: ``std``), and Kim's published CNN-rand accuracy for ``task`` as a dotted line."""
    from .recipes.sentences import KIM_CNN_RAND

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for label, points in series.items():
        points = sorted(points, key=lambda r: r["layers"])
        ax.errorbar([r["layers"] for r in points], [r["mean"] for r in points], yerr=[r["std"] for r in points],
                    marker="o", capsize=3, label=label)
    if task in KIM_CNN_RAND:  # (not for a user's own set)
        ax.axhline(KIM_CNN_RAND[task], color="gray", ls=":", label="Kim CNN-rand (published)")
    ax.set(xlabel="layers in the stack", ylabel="test accuracy (%)", title=f"{task}: accuracy vs depth",
           xticks=sorted({r["layers"] for points in series.values() for r in points}))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path, dpi=120)


def write_sentences_report(out: Path, summary: dict[str, Any]) -> Path:
    """``depth-<task>.png`` (test accuracy against stack depth, BiLSTM vs HBiLSTM, error bars) and ``report.md``."""
    from .models.sentence import ENCODER_DESCRIPTIONS, STACKED_ENCODERS
    from .recipes.sentences import KIM_CNN_RAND
    from .training.run_dir import count, format_mean_std

    table = summary["table"]
    encoders = dict.fromkeys(row["encoder"] for row in table)
    lines = ["# Sentence classification", "",
             "Encoders: " + "; ".join(f"`{e}`, {ENCODER_DESCRIPTIONS[e]}" for e in encoders) + ".", "",
             f"{count(len(summary['runs']), 'run')}, {sum(r['seconds'] for r in summary['runs']):.0f} s of "
             "training summed over them (runs of a sweep may have run side by side). Test accuracy (%), mean ± std "
             "over seeds (SST, TREC) or cross-validation folds (MR, Subj); the best validation epoch's weights are "
             "tested. Embeddings are randomly initialised, as in Kim's CNN-rand; SST is trained on sentences only "
             "(Kim's SST runs also train on the treebank's phrases).", ""]
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
        stacks = {e: [r for r in rows if r["encoder"] == e] for e in STACKED_ENCODERS}
        if all(len(v) > 1 for v in stacks.values()):
            plot_sentence_depth({"BiLSTM stack": stacks["bilstm"], "highway BiLSTM stack": stacks["hbilstm"]},
                                task, out / f"depth-{task}.png")
            lines += [f"![{task} depth](depth-{task}.png)", ""]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    return report


def write_depth_report(out: Path, summary: dict[str, Any]) -> Path:
    """``depth.png`` (training loss vs epoch, one panel per depth, plain vs highway) and ``report.md``."""
    import numpy as np

    from .training.run_dir import format_mean_std

    config, nets = summary["config"], summary["nets"]
    depths = config["depths"]
    fig, axes = plt.subplots(1, len(depths), figsize=(3.4 * len(depths), 3.2), squeeze=False, sharey=True)
    for ax, depth in zip(axes[0], depths, strict=True):
        for net, color in ((n, "C0" if n["kind"] == "plain" else "C1") for n in nets if n["depth"] == depth):
            curves = np.array(net["curves"])
            epochs = np.arange(1, curves.shape[1] + 1)
            mean, std = curves.mean(0), curves.std(0)
            ax.plot(epochs, mean, color=color, label=f"{net['kind']} (lr {net['lr']:g})")
            ax.fill_between(epochs, np.maximum(mean - std, 1e-6), mean + std, color=color, alpha=0.2)
        ax.set(title=f"{depth} layers", xlabel="epoch", yscale="log")
        _whole_numbers(ax.xaxis)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("training loss (mean over seeds)")
    fig.suptitle(f"Plain vs highway networks on {config['data']}", y=1.0)
    _save(fig, out / "depth.png", dpi=120)

    rows = [[n["depth"], n["kind"], f"{n['parameters']:,}", f"{n['lr']:g}",
             format_mean_std(n["train_loss"], len(n["curves"]), 4),
             format_mean_std(n["test_acc"], len(n["curves"]), 2)] for n in nets]
    search = [[n["depth"], n["kind"], *(f"{v:.4f}" for v in n["search"].values())] for n in nets]
    report = out / "report.md"
    report.write_text("\n".join([
        f"# Plain vs highway networks at {', '.join(map(str, depths))} layers ({config['data']})", "",
        f"Total time {summary['seconds']:.0f} s. Highway layers {config['highway_width']} wide, plain layers "
        f"{config['plain_width']} wide; SGD with momentum 0.9, batch {config['batch_size']}, {config['epochs']} "
        f"epochs, seeds {config['seeds']}; He initialisation; highway gate bias {config['gate_bias']}. The learning "
        f"rate of each net is the one of {config['lrs']} whose first-seed run ends with the lowest training loss.",
        "", "![training loss vs epoch](depth.png)", "",
        markdown_table(["layers", "net", "parameters", "lr", "final training loss", "test accuracy (%)"], rows), "",
        "Learning-rate search: final training loss of the first seed at each rate (nan: diverged).", "",
        markdown_table(["layers", "net", *(f"lr {lr:g}" for lr in config["lrs"])], search), ""]))
    return report


def write_gates_report(out: Path, result: dict[str, Any]) -> Path:
    """The highway paper's Fig. 2 for one net: gate biases, mean gate activity, and single examples' gates."""
    import numpy as np

    panels = [("transform gate bias", np.array(result["bias"]), "RdBu_r"),
              ("mean transform gate output\n(test set)", np.array(result["mean_activity"]), "viridis")]
    panels += [(f"gate outputs, one example\n(label {e['label']})", np.array(e["gates"]), "viridis")
               for e in result["examples"]]
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(2.6 * (len(panels) + 1), 4.2))
    for ax, (title, values, cmap) in zip(axes, panels, strict=False):
        image = ax.imshow(values, aspect="auto", cmap=cmap, interpolation="nearest",
                          vmin=None if cmap == "RdBu_r" else 0, vmax=None if cmap == "RdBu_r" else 1)
        ax.set(title=title, xlabel="unit", ylabel="highway layer")
        ax.title.set_fontsize(9)
        _whole_numbers(ax.yaxis)
        fig.colorbar(image, ax=ax, fraction=0.05)
    per_layer = result["mean_activity_per_layer"]
    axes[-1].plot(per_layer, range(len(per_layer)), "o-", ms=3)
    axes[-1].invert_yaxis()
    axes[-1].set(title="mean gate output\nper layer", xlabel="mean T", ylabel="highway layer")
    axes[-1].title.set_fontsize(9)
    _whole_numbers(axes[-1].yaxis)
    _save(fig, out / "gates.png", dpi=110)
    report = out / "report.md"
    report.write_text("\n".join([
        f"# What the gates of a {result['depth']}-layer highway network learned ({result['data']})", "",
        f"Run: `{result['run_dir']}`; test accuracy {100 * result['test_acc']:.2f}%.", "",
        "![gates](gates.png)", "",
        markdown_table(["measure", "value"], [
            ["gates mostly shut (T < 0.1), share of all gate outputs on the test set",
             f"{100 * result['closed_fraction']:.1f}%"],
            ["input dependence: std of T over test examples, mean over units",
             f"{result['input_dependence']:.3f}"],
            ["mean T, first / last highway layer",
             f"{result['mean_activity_per_layer'][0]:.3f} / {result['mean_activity_per_layer'][-1]:.3f}"]]), ""]))
    return report


def write_lesion_report(out: Path, result: dict[str, Any]) -> Path:
    """Test accuracy with each layer lesioned in turn (Fig. 4 of the highway paper), as a figure and table."""
    lesioned = result["lesioned"]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(range(len(lesioned)), [100 * a for a in lesioned], "o-", ms=3, label="one layer lesioned (T = 0)")
    ax.axhline(100 * result["baseline"], color="gray", ls="--", label="intact network")
    ax.set(xlabel="lesioned highway layer", ylabel="test accuracy (%)",
           title=f"{result['depth']}-layer highway net, {result['data']}")
    _whole_numbers(ax.xaxis)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, out / "lesion.png", dpi=120)
    report = out / "report.md"
    report.write_text("\n".join([
        f"# Lesioning a {result['depth']}-layer highway network ({result['data']})", "",
        f"Run: `{result['run_dir']}`. Intact test accuracy {100 * result['baseline']:.2f}%; "
        f"{result['harmless']} of {len(lesioned)} layers can be lesioned alone at a cost of at most one point.", "",
        "![lesion](lesion.png)", "",
        markdown_table(["lesioned layer", "test accuracy (%)", "change (points)"],
                       [[i, f"{100 * a:.2f}", f"{100 * (a - result['baseline']):+.2f}"]
                        for i, a in enumerate(lesioned)]), ""]))
    return report


def write_run_report(run_dir: Path) -> Path:
    """``curves.png`` (each metric by epoch, training and validation) and ``report.md`` for one
    training run's folder (``highwaynet train ...``, or one run of a sweep): rewritten each time,
    as a resumed run adds epochs."""
    import json

    from .training.run_dir import count
    from .training.trainer import read_metrics

    metrics = read_metrics(run_dir)
    if not metrics:
        raise FileNotFoundError(f"{run_dir} has no finished epoch (no metrics.jsonl) to report")
    recipe = json.loads((run_dir / "config.json").read_text()).get("recipe", "?")
    names = [k[len("train_"):] for k in metrics[0] if k.startswith("train_")]  # loss, then acc / bpc / ppl
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.4), squeeze=False)
    epochs = [m["epoch"] for m in metrics]
    for ax, name in zip(axes[0], names, strict=True):
        for split, style in (("train", "o-"), ("val", "s--")):
            if f"{split}_{name}" in metrics[0]:
                ax.plot(epochs, [m[f"{split}_{name}"] for m in metrics], style, ms=3, label=split)
        ax.set(xlabel="epoch", title=name)
        _whole_numbers(ax.xaxis)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    _save(fig, run_dir / "curves.png")
    columns = [k for k in metrics[0] if k.startswith(("train_", "val_"))]
    text = [f"# Training run: {run_dir.name} ({recipe})", "",
            f"{count(len(metrics), 'epoch')}, {sum(m['time'] for m in metrics):.0f} s of training.", "",
            "![curves](curves.png)", "",
            markdown_table(["epoch", "lr", *columns], [[m["epoch"], f"{m['lr']:.3g}", *(m[c] for c in columns)]
                                                        for m in metrics]), ""]
    results_path = run_dir / "results.json"
    if results_path.is_file():
        results = json.loads(results_path.read_text())
        if isinstance(results.get("test"), dict):
            text += ["Test set, with the best validation epoch's weights: "
                     + ", ".join(f"{k} {v:.4f}" for k, v in results["test"].items()) + ".", ""]
        if isinstance(results.get("sample"), str):
            text += ["A sample:", "", "```", results["sample"].strip(), "```", ""]
    report = run_dir / "report.md"
    report.write_text("\n".join(text))
    return report


def write_html(folder: Path) -> Path:
    """``report.html`` beside a folder's ``report.md``: one self-contained page, figures inlined,
    with the folder's configuration, versions and time taken appended."""
    import base64
    import html
    import json
    import re

    import markdown

    source = folder / "report.md"
    if (folder / "metrics.jsonl").is_file() and (folder / "config.json").is_file():
        source = write_run_report(folder)  # one training run: its report from its metrics
    if not source.is_file():
        raise FileNotFoundError(f"{folder} has no report.md: give the folder an experiment wrote "
                                f"(a 'reproduce' output folder, or its gates/ or lesion/ folder) or a run "
                                f"folder ('highwaynet train ... --out DIR')")
    text = source.read_text()
    for name in ("sweep.json", "config.json"):
        if (folder / name).is_file():
            text += f"\n\n## Configuration ({name})\n\n```json\n{(folder / name).read_text().strip()}\n```\n"
    # Every string is shown as text, never read as HTML: a folder's name, a user's sentences or
    # settings may hold '<'. (Python-Markdown's documented way: without its raw-HTML rules, HTML in
    # the source is escaped like any text.)
    converter = markdown.Markdown(extensions=["tables", "fenced_code"])
    converter.preprocessors.deregister("html_block")
    converter.inlinePatterns.deregister("html")
    body = converter.convert(text)

    def inline(match: re.Match) -> str:
        image = folder / match.group(1)
        if not image.is_file():
            return match.group(0)
        return f'src="data:image/png;base64,{base64.b64encode(image.read_bytes()).decode()}"'

    body = re.sub(r'src="([^"]+\.png)"', inline, body)
    from .training.run_dir import environment

    footer = f"<p><small>Rendered with {html.escape(json.dumps(environment()))}</small></p>"
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;line-height:1.4}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}"
             "img{max-width:100%}pre{background:#f6f6f6;padding:1em;overflow:auto}")
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(folder.name)}</title>"
            f"<style>{style}</style></head><body>{body}{footer}</body></html>")
    out = folder / "report.html"
    out.write_text(page)
    return out
