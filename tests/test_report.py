"""What every report says first, how it shows a diverged run, its footer and its figures' text, on the
results the docs store (docs/results/*.json), written by each recipe's own report code."""

import copy
import json
import math
import re
import statistics
import sys
from pathlib import Path

import pytest

from highwaynet import report
from highwaynet.recipes import char_lm, depth, gates, rhn_depth, sentences_report, transformer_depth
from highwaynet.training import files

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
# Each recipe's report writer and its verdicts (what docs/_ext/results.py draws the results pages with).
RECIPES = {"depth": (depth.write_report, depth.verdicts),
           "gates": (gates.write_gates_report, gates.gates_verdicts),
           "lesion": (gates.write_lesion_report, gates.lesion_verdicts),
           "rhn-depth": (rhn_depth.write_report, rhn_depth.verdicts),
           "char-lm": (char_lm.write_report, char_lm.verdicts),
           "sentences": (sentences_report.write_report, sentences_report.verdicts),
           "sentences-choice": (sentences_report.write_choice_report, sentences_report.choice_verdicts),
           "transformer-depth": (transformer_depth.write_report, transformer_depth.verdicts)}
STORED = {path.stem: json.loads(path.read_text()) for path in sorted(RESULTS.glob("*.json"))}
BY_RECIPE = {name: record for name, record in STORED.items() if record.get("recipe") in RECIPES}


#: Recipes whose results pages say "not run yet" (docs/_ext/results.py's NOT_RUN_YET), with why.
NOT_STORED: dict[str, str] = {}


def test_every_recipe_has_a_stored_result_to_check():
    assert {record["recipe"] for record in BY_RECIPE.values()} == set(RECIPES) - set(NOT_STORED)


@pytest.mark.parametrize("name", sorted(BY_RECIPE))
def test_every_report_opens_with_its_verdicts(name, tmp_path):
    """Under its title, before anything else, the sentences its recipe's ``verdicts`` give: the same the
    docs' results page prints (one source)."""
    record = BY_RECIPE[name]
    write, verdicts = RECIPES[record["recipe"]]
    write(tmp_path, record["result"])
    lines = (tmp_path / "report.md").read_text().splitlines()
    found = verdicts(record["result"])
    assert found, "a stored result whose recipe finds nothing to say"
    assert lines[0].startswith("# ") and lines[1:4] == ["", "**What it found:**", ""]
    assert lines[4:4 + len(found)] == report.bullets(found)
    assert all(re.match(r"- [A-Z0-9].*\.$", line) for line in lines[4:4 + len(found)])


def test_the_depth_verdicts_compare_the_two_kinds_at_each_depth():
    summary = STORED["depth-mnist5k"]["result"]
    lines = depth.verdicts(summary)
    deepest = max(summary["config"]["depths"])
    highway = next(n for n in summary["nets"] if n["kind"] == "highway" and n["depth"] == deepest)
    assert lines[-1].startswith(f"{deepest} layers: in final training loss, highway beats plain by ")
    assert f"test accuracy highway {highway['test_acc']['mean']:.1f} ± {highway['test_acc']['std']:.1f}%" in lines[-1]
    assert len(lines) == 2 + len(summary["config"]["depths"])  # each kind's trend, then a line per depth


def test_a_diverged_loss_shows_as_diverged_with_the_rule_stated(tmp_path):
    """A loss above that of guessing the classes alike, or not a number, is no result: every table of the
    depth report says *diverged*, and states the rule."""
    summary = copy.deepcopy(STORED["depth-mnist5k"]["result"])
    net = next(n for n in summary["nets"] if n["kind"] == "highway" and n["depth"] == 100)
    net["search"] = {"0.01": 1.16, "0.03": 0.27, "0.1": 237.2}
    net["curves"][1][-1] = math.nan  # a seed that diverged in its last epoch
    depth.write_report(tmp_path, summary)
    text = (tmp_path / "report.md").read_text()
    assert "| 100 | highway | 1.1600 | 0.2700 | diverged |" in text and "237.2" not in text
    assert "| 100 | highway | 544,660 | 0.03 | diverged (1 of 3 seeds) |" in text
    assert f"above {math.log(10):.2f}, the loss of guessing the 10 classes alike" in text
    assert "100 layers: highway diverged (1 of 3 seeds)" in text  # (no mean to compare: the verdict says so)


@pytest.mark.parametrize("value, limit, cell", [(0.2684, math.inf, "0.2684"), (237.2, math.log(10), "diverged"),
                                                (math.nan, math.inf, "diverged"), (math.inf, math.inf, "diverged"),
                                                (2.2, math.log(10), "2.2000")])
def test_loss_cell(value, limit, cell):
    assert report.loss_cell(value, limit) == cell


def test_the_footer_is_readable_text(tmp_path):
    record = STORED["lesion-mnist5k"]
    out = tmp_path / "lesion"
    out.mkdir()
    files.claim(out, "analysis", "the lesion study")
    gates.write_lesion_report(out, record["result"])
    page = report.write_html(out).read_text()
    footer = re.search(r"<p><small>(.*?)</small></p></body>", page)[1]
    import torch

    import highwaynet

    assert footer.startswith(f"Page rendered with highwaynet {highwaynet.__version__}, torch {torch.__version__}, ")
    assert "Python " in footer and "{" not in footer and "&quot;" not in footer


def test_environment_text_says_each_part_in_words():
    env = {"highwaynet": "0.4.0", "torch": "2.13.0+cpu", "numpy": "2.4.6", "python": "3.11.7",
           "platform": "Linux-x86_64", "cpu": "AMD EPYC", "cpu_threads": 2, "cuda": None}
    assert report.environment_text(env) == ("highwaynet 0.4.0, torch 2.13.0+cpu, NumPy 2.4.6, Python 3.11.7 on "
                                            "AMD EPYC (2 threads), no GPU; Linux-x86_64")
    assert report.environment_text({"highwaynet": "0.1.0"}) == "highwaynet 0.1.0"
    assert report.environment_text({**env, "cuda": "NVIDIA H100", "cpu_threads": 1}).split(";")[0].endswith(
        "AMD EPYC (1 thread), GPU: NVIDIA H100")


def _smallest_text_shown(fig, dpi: int) -> float:
    """The smallest text of ``fig`` in pixels as the docs' column shows the figure."""
    from matplotlib.text import Text

    fig.canvas.draw()  # (tick labels exist once drawn)
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_text() and t.get_visible()]
    return min(sizes) * report.shown_points(fig, dpi)


@pytest.mark.parametrize("name", sorted(BY_RECIPE))
def test_every_figure_is_legible_at_the_page_s_width(name, tmp_path, monkeypatch):
    """Shown in the docs' column (about 736 pixels wide), no text of a report's figure is smaller than
    ``report.SMALLEST_TEXT`` pixels (before, the depth figure's legends showed about 6 pixels high)."""
    smallest, save = {}, files.save_figure

    def measuring(fig, path, dpi=120):
        smallest[Path(path).name] = _smallest_text_shown(fig, dpi)
        save(fig, path, dpi)

    monkeypatch.setattr(files, "save_figure", measuring)
    record = BY_RECIPE[name]
    RECIPES[record["recipe"]][0](tmp_path, record["result"])
    # (a sentence sweep of one depth draws none, nor does a setting chosen among sweeps)
    assert smallest or record["recipe"] in ("sentences", "sentences-choice"), "no figure drawn"
    for figure, pixels in smallest.items():
        assert pixels >= report.SMALLEST_TEXT - 1e-6, (figure, pixels)


def test_legible_raises_small_text_of_a_wide_figure():
    fig, ax = report.subplots(figsize=(16, 3))
    ax.plot([1, 2], label="a line")
    ax.legend(fontsize=6)
    ax.set_title("title", fontsize=8)
    assert _smallest_text_shown(fig, 120) < 4
    report.legible(fig, 120)
    assert _smallest_text_shown(fig, 120) == pytest.approx(report.SMALLEST_TEXT)


def test_the_docs_name_the_version_of_every_stored_result(monkeypatch, tmp_path):
    """Every stored result carries the version that produced it; the results pages and the README's table
    print it."""
    monkeypatch.syspath_prepend(str(RESULTS.parent / "_ext"))
    import results

    # (written under tmp: the docs' own _generated is the site build's, which may run beside this test)
    monkeypatch.setattr(results, "GENERATED", tmp_path / "generated")

    try:
        for name, record in STORED.items():
            assert re.fullmatch(r"\d+\.\d+\.\d+\S*", results.version_of(record)), name
        for path in results.results():
            name = path.parent.name
            assert re.search(rf"Made by:? highwaynet {re.escape(results.version_of(STORED[name]))}[,;]",
                             path.read_text()), name
        summary = results.readme_summary().splitlines()
        assert summary[0] == "| experiment | what it measured | version | page |"
        assert all(re.search(r"\| \d+\.\d+\.\d+(, \d+\.\d+\.\d+)* \| \[", row) for row in summary[2:])
        with pytest.raises(ValueError, match="without the version that produced it"):
            results.version_of({"about": "a record assembled by hand, no version"})
    finally:
        sys.modules.pop("results", None)


def test_the_performance_page_gives_each_table_a_heading_full_headers_and_a_reading(monkeypatch, tmp_path):
    """Each benchmark table sits under a heading of its own (its machine and precision), its ratio column
    names in full the row it divides by (0.3's said '× forward:'), and a sentence under it says what
    its numbers show."""
    monkeypatch.syspath_prepend(str(RESULTS.parent / "_ext"))
    import results

    # (written under tmp: the docs' own _generated is the site build's, which may run beside this test)
    monkeypatch.setattr(results, "GENERATED", tmp_path / "generated")

    try:
        blocks = results.performance().read_text().split("\n### ")[1:]
    finally:
        sys.modules.pop("results", None)
    stored = [p for p in (RESULTS.parents[1] / "benchmarks").glob("*.json") if "ms" in json.loads(p.read_text())]
    assert len(blocks) == len(stored)
    for block in blocks:
        lines = block.splitlines()
        table = [line for line in lines if line.startswith("|")]
        assert table and sum(line.startswith("| row |") for line in table) == 1, block[:200]  # one table a heading
        rows = [line.split(" | ")[0].removeprefix("| ") for line in table[2:]]
        for header in table[0].strip("| ").split(" | "):
            if header.startswith("× "):
                assert header.removeprefix("× ") in rows, (header, rows)
        after = lines[lines.index(table[-1]) + 1:]
        reading = next(line for line in after if line)
        assert not reading.startswith("From ") and reading.endswith(".") and re.search(r"\d\.\d\d", reading), reading


def _decimals(text: str) -> set[str]:
    """Every decimal number in ``text`` (signs dropped), and each rounded to fewer places down to one."""
    found = set()
    for number in re.findall(r"\d+\.\d+", text):
        found.add(number)
        places = len(number.split(".")[1])
        found.update(f"{float(number):.{k}f}" for k in range(1, places))
    return found


def test_the_transformer_page_quotes_only_numbers_its_stored_report_holds(tmp_path):
    """The prose of docs/results/transformer.md (what the tables show, the literature) is written by
    hand: each number of three or more decimal places it quotes must be one of the report's, as the
    report writes it from the stored JSON or rounded from it, so that a rerun stored without the
    prose updated fails here rather than leaving the page saying what the tables no longer do."""
    record = STORED["transformer-depth-tinyshakespeare"]
    transformer_depth.write_report(tmp_path, copy.deepcopy(record["result"]))
    known = _decimals((tmp_path / "report.md").read_text())
    page = (RESULTS / "transformer.md").read_text()
    prose = page[page.index("## What the tables show"):]
    quoted = re.findall(r"\d+\.\d{3,}", prose)
    assert len(quoted) > 40, "the page's prose quotes the study's numbers"
    assert [q for q in quoted if q not in known] == []


def test_the_transformer_page_claims_hold_in_its_stored_record():
    """The claims the page's prose makes of the stored study, checked against the record: one deeper
    model beats the 2-block pre-LN one (the 32-block highway model); the frozen gate has about three
    quarters of the learned gate's gain at 32 blocks; the widened model gains nothing resolved; no gate
    opens past 0.1 at 32 blocks; no model reaches the bigram model's test loss; post-LN and DeepNorm
    lose to pre-LN from 12 blocks on."""
    result = STORED["transformer-depth-tinyshakespeare"]["result"]
    by = {(c["kind"], c["a"], c["a_depth"], c["b_depth"]): c for c in result["contrasts"]}
    deeper_wins = [(c["a"], c["a_depth"]) for c in result["contrasts"]
                   if c["a_depth"] != c["b_depth"] and c["verdict"].endswith(f"at {c['a_depth']} blocks lower")]
    assert deeper_wins == [("pre-highway", 32)]
    fixed = by["vs pre-LN sum", "pre-fixed", 32, 32]["mean"]
    learned = by["vs pre-LN sum", "pre-highway", 32, 32]["mean"]
    assert 0.70 <= fixed / learned <= 0.80
    assert by["learned gate vs fixed gate", "pre-highway", 32, 32]["verdict"] == "pre-highway lower"
    assert by["vs pre-LN sum", "pre-residual-matched-highway", 32, 32]["verdict"] == "no difference resolved"
    gates = [v for r in result["rows"] if r.get("gates") and r["depth"] == 32
             for part in r["gates"]["epochs"][-1].values() for v in part]
    assert max(gates) < 0.1 and len(gates) > 100
    best = min(statistics.fmean(r["test_loss"]) for r in result["rows"])
    assert result["ngram_nats"]["3"]["nats"] < result["ngram_nats"]["2"]["nats"] < best  # ("early training")
    for variant in ("post-residual", "post-deepnorm"):
        for blocks in (12, 32):
            assert by["vs pre-LN sum", variant, blocks, blocks]["verdict"] == "pre-residual lower"
        assert by["vs pre-LN sum", variant, 2, 2]["verdict"] == "no difference resolved"


def test_the_char_lm_page_s_finding_quotes_each_paired_interval_its_stored_reports_hold(tmp_path):
    """The "What holds, and what does not" section of docs/results/char-lm.md is written by hand: each
    contrast of both stored runs (default and longer) must be quoted there as its report writes it
    (difference and 95% interval, paired by seed), every decimal number it quotes must be one of the two
    reports' (as written, or rounded from it), and it says where nothing was resolved, so that a rerun
    stored without the prose updated fails here. (It once called a 10-point gap within an interval of
    [-53.0, +32.4] a lead.)"""
    known, intervals, unresolved = set(), [], 0
    for name in ("char-lm-austen", "char-lm-austen-long"):
        result = copy.deepcopy(STORED[name]["result"])
        (tmp_path / name).mkdir()
        char_lm.write_report(tmp_path / name, result)
        known |= _decimals((tmp_path / name / "report.md").read_text())
        for c in char_lm.contrasts(result):
            assert c["n"] == len(result["config"]["seeds"]) > 1, "every seed paired: no run of the store diverged"
            intervals.append(f"{c['mean']:+.1f} ppl [{c['lo']:+.1f}, {c['hi']:+.1f}]")
            unresolved += c["lo"] < 0 < c["hi"]
    page = (RESULTS / "char-lm.md").read_text()
    finding = " ".join(page[page.index("## What holds, and what does not"):].split())  # (its lines joined)
    assert [i for i in intervals if i not in finding] == []
    assert [q for q in re.findall(r"\d+\.\d+", finding) if q not in known] == []
    # The three that span 0 said so (one highway against one MLP layer, in both runs; the longer run's highway
    # against none), the four resolved too, each with the side it resolves.
    assert unresolved == 3 and "neither interval excludes 0" in finding
    assert "over two in the longer one, not resolved" in finding
    assert "Two layers: -36.1 ppl [-68.6, -3.5] over five seeds, the highway model lower" in finding
    assert ("+34.0 ppl [+1.6, +66.4] over five seeds in the default run, the model without highway layers "
            "lower") in finding
    assert "word-level LSTM's test perplexity is lower" in finding
    assert "12.7" in finding and "two seeds" in finding  # (how wide two seeds make an interval, said plainly)


def test_the_rhn_page_s_equal_time_finding_quotes_only_numbers_its_stored_report_holds(tmp_path):
    """The "Equal time, and equal steps" finding of docs/results/rhn.md is written by hand: each number
    with three or more decimal places it quotes must be one the depth study's report writes from the
    stored JSON (as written, or rounded from it), and it names the seeds, so that a rerun stored
    without the prose updated fails here. (It once rested on one seed a model.)"""
    record = STORED["rhn-depth-tinyshakespeare"]
    rhn_depth.write_report(tmp_path, copy.deepcopy(record["result"]))
    known = _decimals((tmp_path / "report.md").read_text())
    page = (RESULTS / "rhn.md").read_text()
    finding = page[page.index("- **Equal time"):page.index("- **Equal tuning.**")]
    quoted = re.findall(r"\d+\.\d{3,}", finding)
    assert len(quoted) >= 4, "the finding quotes the study's numbers"
    assert [q for q in quoted if q not in known] == []
    assert "three seeds" in finding and record["result"]["config"]["seeds"] == [0, 1, 2]
