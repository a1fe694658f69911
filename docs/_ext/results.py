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
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1]
GENERATED = DOCS / "_generated"
BENCHMARKS = DOCS.parent / "benchmarks"
DATA_NAMES = {"mnist5k": "MNIST 5k", "fashion-mnist": "Fashion-MNIST"}
TASK_NAMES = {"trec": "TREC", "sst2": "SST-2", "sst1": "SST-1", "mr": "MR", "subj": "Subj"}
NOT_RUN = "*Not stored yet: run the command above and store its folder with docs/results/store.py.*\n"


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "not recorded"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _provenance(record: dict[str, Any]) -> str:
    env = record.get("environment", {})
    machine = env.get("cuda") or f"{env.get('cpu', 'CPU')}, {_threads(env)}"
    lines = ["```{admonition} How this was made", ":class: note", "",
             f"- Command: `{record['command']}`",
             f"- Machine: {machine}; torch {env.get('torch', '?')}, Python {env.get('python', '?')}, "
             f"highwaynet {env.get('highwaynet', '?')}",
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
        "# SST-2 test accuracy as the stacks deepen", "", record["about"], "", "![depth](depth-sst2.png)", "",
        markdown_table(["stack", *(f"{d} layers" for d in depths)], rows), ""]))


def _report(out: Path, record: dict[str, Any]) -> None:
    """The stored result's report, written by its recipe's own code (as the run's own report was)."""
    from highwaynet.recipes import char_lm, depth, gates, rhn_depth, sentences_report, transformer_depth

    writers = {"depth": depth.write_report, "gates": gates.write_gates_report, "lesion": gates.write_lesion_report,
               "rhn-depth": rhn_depth.write_report, "char-lm": char_lm.write_report,
               "sentences": sentences_report.write_report, "transformer-depth": transformer_depth.write_report}
    writers[record["recipe"]](out, record["result"])


def _five_sets(out: Path, record: dict[str, Any]) -> None:
    """The sentence recipe's settings on Kim's five sets, and what each change did."""
    from highwaynet.report import markdown_table

    table = markdown_table(["setting", *record["columns"]],
                           [[r["encoder"], *(r[k] or "" for k in ("sst1", "sst2", "mr", "subj", "trec"))]
                            for r in record["rows"]])
    effects = markdown_table(["change (one block, on top of the rows before it)", "effect on the test accuracy (%)",
                              "seeds"], [[e["change"], e["effect"], e["seeds"]] for e in record["effects"]])
    (out / "report.md").write_text("\n".join([record["about"], "", table, "", "What each change did:", "",
                                              effects, ""]))


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
    return dict(sorted(groups.items(), key=lambda item: (TASK_NAMES.get(item[0][0], item[0][0]),
                                                         order.index(item[0][1]))))


def _features(records: dict[str, dict[str, Any]]) -> str:
    """One table from the ``sentences-features-*`` sweeps: accuracy by task and word features."""
    from highwaynet.report import markdown_table
    from highwaynet.training.run_dir import format_mean_std, mean_std

    rows = []
    for (task, features), runs in _runs_by_features(records).items():
        test = mean_std([100 * r["test"]["acc"] for r in runs])
        unseen = mean_std([100 * r["test_unseen"]["acc"] for r in runs])
        rows.append([TASK_NAMES.get(task, task), features, len(runs), format_mean_std(test, len(runs)),
                     f"{format_mean_std(unseen, len(runs))} ({runs[0]['test_unseen']['n']} sentences)"])
    commands = [f"`{record['command']}` ({_minutes(record.get('seconds'))} of training, summed over its runs)"
                for record in records.values()]
    env = next(iter(records.values())).get("environment", {})
    return "\n".join([
        markdown_table(["task", "word features", "seeds", "test accuracy (%)",
                        "test accuracy (%), sentences with a word unseen in training"], rows), "",
        "Made by " + "; ".join(commands) + f", on {env.get('cpu', 'a CPU')} ({_threads(env)}), "
        f"torch {env.get('torch', '?')}.", ""])


def _summary(records: dict[str, dict[str, Any]]) -> str:
    """The results index's table: one line per experiment, from the stored results."""
    from highwaynet.report import markdown_table
    from highwaynet.training.run_dir import format_mean_std, mean_std

    rows = []

    def pct(value: float) -> str:
        return f"{value:.1f}%"

    for name in ("depth-mnist5k", "depth-fashion-mnist"):
        if name in records:
            nets = records[name]["result"]["nets"]
            deepest = max(n["depth"] for n in nets)
            by_kind = {n["kind"]: n for n in nets if n["depth"] == deepest}
            data = records[name]["result"]["config"]["data"]
            rows.append([f"plain vs highway, {deepest} layers, {DATA_NAMES.get(data, data)}",
                         "test accuracy: " + ", ".join(f"{kind} {by_kind[kind]['test_acc']['mean']:.1f} ± "
                                                       f"{by_kind[kind]['test_acc']['std']:.1f}%"
                                                       for kind in ("highway", "plain")), "{doc}`/results/depth`"])
    if "gates-mnist5k" in records:
        r = records["gates-mnist5k"]["result"]
        rows.append([f"the gates of a {r['depth']}-layer highway network",
                     f"{pct(100 * r['closed_fraction'])} of gate outputs below 0.1", "{doc}`/results/gates`"])
    if "lesion-mnist5k" in records:
        r = records["lesion-mnist5k"]["result"]
        rows.append(["lesioning one layer at a time", f"{r['harmless']} of {len(r['lesioned'])} layers cost at most "
                     "a point", "{doc}`/results/gates`"])
    if "sentences-depth-sst2" in records:
        cells = []
        for label, points in records["sentences-depth-sst2"]["series"].items():
            deepest = max(points, key=lambda p: p["layers"])
            if deepest["layers"] == 20:
                values = deepest.get("values")
                cells.append(f"{label.split(',')[0]} {format_mean_std(mean_std(values), len(values))}%")
        rows.append(["BiLSTM stacks of 20 blocks, SST-2", ", ".join(cells) + " test accuracy",
                     "{doc}`/results/sentences`"])
    if "sentences-five-sets" in records:
        table = records["sentences-five-sets"]["rows"]
        kim = next(r for r in table if r["encoder"].startswith("Kim (2014)"))
        ours = [r for r in table if r["encoder"].startswith(("highway BiLSTM", "the same"))]

        def best(task: str) -> str:
            cells = [r[task].replace("*", "").split(" (")[0] for r in ours if r[task]]
            return max(cells, key=lambda c: float(c.split()[0]))

        rows.append(["highway BiLSTM (best setting) vs Kim's CNN-rand, published",
                     ", ".join(f"{name} {best(task)} vs {kim[task]}" for name, task in
                               (("TREC", "trec"), ("SST-2", "sst2"), ("MR", "mr"), ("Subj", "subj"),
                                ("SST-1", "sst1"))), "{doc}`/results/sentences`"])
    features = {n: r for n, r in records.items() if n.startswith("sentences-features-")}
    if features:
        cells: dict[str, list[str]] = {}
        for (task, word_features), runs in _runs_by_features(features).items():
            accuracy = [100 * r["test"]["acc"] for r in runs]
            cells.setdefault(task, []).append(f"{word_features} {format_mean_std(mean_std(accuracy), len(runs))}%")
        rows.append(["words, characters or both into a highway BiLSTM",
                     "; ".join(f"{TASK_NAMES.get(task, task)}: " + ", ".join(c) for task, c in cells.items())
                     + " test accuracy",
                     "{doc}`/results/sentences`"])
    if "rhn-depth-tinyshakespeare" in records:
        for entry, result in records["rhn-depth-tinyshakespeare"]["result"]["corpora"].items():
            best = min(result["rhn"], key=lambda r: r["test"]["bpc"])
            lstm = result.get("lstm")
            rows.append([f"RHN depth at a fixed budget ({entry})",
                         f"best depth {best['depth']}: {best['test']['bpc']:.3f} bits/char"
                         + (f" (LSTM, same time: {lstm['test']['bpc']:.3f})" if lstm else ""), "{doc}`/results/rhn`"])
    for name in ("tune-tinyshakespeare", "tune-austen"):
        if name in records:
            for entry, result in records[name]["result"]["corpora"].items():
                tuned = result["tuning"]
                metric = next(iter(tuned.values()))["metric"]
                digits = 3 if metric == "bpc" else 0  # bits per character to a thousandth; perplexities whole
                trials = records[name]["result"]["config"].get("tune")
                rows.append([f"RHN vs LSTM under equal tuning ({entry}, {trials} trials each)",
                             ", ".join(f"{f.upper()} {t['test']['mean']:.{digits}f} ± {t['test']['std']:.{digits}f} "
                                       f"{metric}" for f, t in tuned.items()), "{doc}`/results/rhn`"])
    for name in ("char-lm-austen", "char-lm-austen-long"):
        if name not in records:
            continue
        models = records[name]["result"]["rows"]
        epochs = records[name]["result"]["config"]["base"]["train"]["epochs"]
        rows.append([f"character-aware LMs (Austen, words, {epochs} epochs)",
                     "test perplexity: " + "; ".join(f"{r['model']} {r['test_ppl']['mean']:.0f} ± "
                                                     f"{r['test_ppl']['std']:.0f}" for r in models),
                     "{doc}`/results/char-lm`"])
    for name in ("transformer-depth-tinyshakespeare", "transformer-depth-bias5"):
        if name not in records:
            continue
        result = records[name]["result"]
        deepest = max(result["config"]["depths"])
        seeds = len(result["config"]["seeds"])
        cells = [f"{r['variant']} " + (f"{r['val_loss']['mean']:.2f} ± {r['val_loss']['std']:.2f}"
                                       if r["diverged"] < seeds else "diverged")
                 + (f" ({r['diverged']} of {seeds} diverged)" if 0 < r["diverged"] < seeds else "")
                 for r in result["rows"] if r["depth"] == deepest]
        rows.append([f"Transformers of {deepest} blocks by residual connection (Tiny Shakespeare, chars; gate "
                     f"bias {result['config']['base']['gate_bias']:g})",
                     "validation loss (nats): " + ", ".join(cells), "{doc}`/results/transformer`"])
    return markdown_table(["experiment", "what it measured", "page"], rows) + "\n"


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
            if record["recipe"] == "transformer-depth":  # (what it measured, for the guide's page too)
                from highwaynet.recipes.transformer_depth import verdicts

                (out / "verdicts.md").write_text("".join(f"- {line}.\n" for line in verdicts(record["result"])))
        written.append(out / "report.md")
    GENERATED.mkdir(exist_ok=True)
    for page in DOCS.rglob("*.md"):  # a page may name a result that has not been stored yet
        for name, file in re.findall(r"\{include\} \.\./_generated/([\w.+-]+)/([\w.-]+\.md)", page.read_text()):
            if not (GENERATED / name / file).is_file():
                (GENERATED / name).mkdir(parents=True, exist_ok=True)
                (GENERATED / name / file).write_text(NOT_RUN)
    (GENERATED / "sentences-features.md").write_text(_features(features) if features else NOT_RUN)
    (GENERATED / "summary.md").write_text(_summary(records))
    return written


def _table(record: dict[str, Any], name: str) -> str:
    from highwaynet.report import markdown_table

    ms = record["ms"]
    ratio_key = next((k for k in record if k.startswith("ratio_to_")), None)
    extra = [k for k in record if isinstance(record[k], dict) and k not in ("ms", "settings") and k != ratio_key
             and set(record[k]) == set(ms)]
    header = ["row", "ms", *([ratio_key.replace("ratio_to_", "× ")] if ratio_key else []), *extra]
    rows = [[row, f"{value:.3f}", *([f"{record[ratio_key][row]:.2f}"] if ratio_key else []),
             *(f"{record[k][row]:.4g}" for k in extra)] for row, value in ms.items()]
    command = record.get("command") or f"python benchmarks/{name.split('_h100')[0].split('_cpu')[0]}.py ..."
    settings = ", ".join(f"{k}={v}" for k, v in record.get("settings", {}).items() if k not in ("json", "tiles"))
    return "\n".join([f"## {record['title']}", "", f"{record.get('device', '?')}; torch {record.get('torch', '?')}. "
                      f"`{command}`" + (f" (settings: {settings})" if settings else "") + ".", "",
                      markdown_table(header, rows), ""])


def performance() -> Path:
    """``_generated/performance.md``: one table per ``benchmarks/*.json``."""
    out = GENERATED / "performance.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    parts = []
    for path in sorted(BENCHMARKS.glob("*.json")):
        record = json.loads(path.read_text())
        if "ms" in record:
            parts.append(f"<!-- {path.name} -->\n" + _table(record, path.stem) + f"\nFrom `benchmarks/{path.name}`.\n")
    out.write_text("\n".join(parts))
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
    lines = [f"**Last run on a GPU:** commit `{latest['commit'][:10]}`, {latest['date']}, {latest['device']} "
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


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", _generate)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--readme"]:
        raise SystemExit("usage: python docs/_ext/results.py --readme   (rewrites the README's results table)")
    print("README.md's results table " + ("updated" if write_readme_summary() else "was up to date"))
