"""The sentence report's paired contrasts against Kim's CNN, and a setting chosen on validation among
sweeps (``reproduce sentences --choose-from``), against numbers worked out by hand."""

import json
import re
import sys
from pathlib import Path

import pytest

from highwaynet.cli import main
from highwaynet.recipes import sentences_report
from highwaynet.recipes.sentences_report import choice_verdicts, choose, difference_text, paired_contrasts
from highwaynet.training import files


def _run(encoder, seed, acc, val=0.8, task="trec", fold=0, layers=1):
    return {"task": task, "encoder": encoder, "layers": layers, "seed": seed, "fold": fold,
            "best_val_acc": val, "test": {"acc": acc}, "seconds": 10.0}


def _summary(runs, shared=None, tasks=("trec",)):
    table = [{"task": t, "encoder": e, "layers": n} for t, e, n in dict.fromkeys(
        (r["task"], r["encoder"], r["layers"]) for r in runs)]
    return {"runs": runs, "table": table, "settings": {"shared": shared or {}, "varying": {}},
            "config": {"tasks": list(tasks), "base": {"train": {"epochs": 10}}}}


# By hand: hbilstm − cnn per seed = 92 − 90, 92 − 91, 90 − 89 = 2, 1, 1 points; mean 4/3 = 1.3333;
# sd = sqrt(((2/3)² + 2 (1/3)²) / 2) = sqrt(1/3) = 0.57735; half-width t(2, 0.975) sd / √3 = 4.303 / 3 =
# 1.43433: [-0.1010, 2.7677].
CNN = [_run("cnn", s, a) for s, a in enumerate((0.90, 0.91, 0.89))]
MEAN, LO, HI = 4 / 3, 4 / 3 - 4.303 / 3, 4 / 3 + 4.303 / 3


def test_each_encoder_against_the_cnn_paired_by_seed_and_fold():
    runs = CNN + [_run("hbilstm", s, a) for s, a in enumerate((0.92, 0.92, 0.90, 0.99))]  # (seed 3: no cnn)
    # MR: paired by fold (seed 0 each): 76 − 75 and 74 − 75 points.
    runs += [_run(e, 0, a, task="mr", fold=f) for e, accs in (("cnn", (0.75, 0.75)), ("bilstm", (0.76, 0.74)))
             for f, a in enumerate(accs)]
    (trec, mr) = paired_contrasts(_summary(runs))
    assert (trec["task"], trec["encoder"], trec["layers"], trec["baseline"]) == ("trec", "hbilstm", 1, "cnn")
    assert trec["pairs"] == [[0, 0], [1, 0], [2, 0]] and trec["n"] == 3
    assert trec["mean"] == pytest.approx(MEAN) and trec["lo"] == pytest.approx(LO)
    assert trec["hi"] == pytest.approx(HI)
    assert difference_text(trec) == "+1.3 [-0.1, +2.8] (95%, 3 pairs)"
    # Two pairs, differences +1 and −1: mean 0, sd √2, half-width 12.706 √2 / √2.
    assert trec["differences"] == pytest.approx([2, 1, 1])
    assert mr["pairs"] == [[0, 0], [0, 1]] and mr["mean"] == pytest.approx(0, abs=1e-9)
    assert (mr["lo"], mr["hi"]) == pytest.approx((-12.706, 12.706))


def test_the_report_gives_the_paired_contrasts(tmp_path):
    runs = CNN + [_run("hbilstm", s, a) for s, a in enumerate((0.92, 0.92, 0.90))]
    summary = {**_summary(runs), "table": [{"task": "trec", "encoder": e, "layers": 1, "runs": 3, "mean": 90.0,
                                            "std": 1.0} for e in ("cnn", "hbilstm")]}
    report = sentences_report.write_report(tmp_path, summary).read_text()
    assert "| hbilstm | 1 | +1.3 [-0.1, +2.8] (95%, 3 pairs) | no difference resolved |" in report


DEFAULTS = _summary(CNN + [_run("hbilstm", s, a, val=v) for s, a, v in
                           ((0, 0.95, 0.85), (1, 0.95, 0.86), (2, 0.95, 0.84))],
                    {"hidden": 150, "train.ema": 0.0, "dropout": 0.5})
# Higher validation (86 against 85), lower test: chosen, as the test split chooses nothing. Seed 3 is
# finished in this sweep alone: left out of the choice and of the pairs.
WIDE = _summary([_run("hbilstm", s, a, val=v) for s, a, v in
                 ((0, 0.92, 0.86), (1, 0.92, 0.87), (2, 0.90, 0.85), (3, 0.50, 0.99))],
                {"hidden": 300, "train.ema": 0.995, "dropout": 0.5})


def test_a_setting_is_chosen_on_validation_and_paired_against_the_cnn():
    summary = choose({"defaults": DEFAULTS, "wide": WIDE},
                     sentences={"trec": {"train": 4907, "val": 545, "test": 500}})
    (trec,) = summary["tasks"]
    assert summary["settings"] == ["hidden", "train.ema"]
    assert [c["setting"] for c in trec["candidates"]] == ["defaults", "wide"] and trec["chosen"] == 1
    wide = trec["candidates"][1]
    assert wide["runs"] == 3 and wide["val"]["mean"] == pytest.approx(86.0)
    assert wide["settings"] == {"hidden": 300, "train.ema": 0.995}
    # Each run kept beside the means (seed 3, in this sweep alone, left out), as the pairs' differences.
    assert [(e["seed"], e["fold"]) for e in wide["each"]] == [(0, 0), (1, 0), (2, 0)]
    assert [e["val"] for e in wide["each"]] == pytest.approx([86, 87, 85])
    assert [e["test"] for e in wide["each"]] == pytest.approx([92, 92, 90])
    assert [e["test"] for e in trec["baseline"]["each"]] == pytest.approx([90, 91, 89])
    assert trec["contrast"]["differences"] == pytest.approx([2, 1, 1])
    assert trec["baseline"]["setting"] == "defaults" and trec["baseline"]["test"]["mean"] == pytest.approx(90.0)
    c = trec["contrast"]
    assert (c["mean"], c["lo"], c["hi"], c["n"]) == pytest.approx((MEAN, LO, HI, 3))
    (line,) = choice_verdicts(summary)
    # Validation 86 ± 1 against 85 ± 1, but paired by seed the margin is 1 each time (86 − 85, 87 − 86, 85 − 84):
    # sd 0, so the interval is [1, 1], and the choice's margin is resolved.
    # Seed 3, finished by wide alone, is said to be left out.
    assert line.startswith("TREC (1 block, 300 units per direction, 10 epochs, 4,907 training sentences (545 to "
                           "validate, 500 to test), 3 seeds (seed 3 left out: not every candidate finished it)): "
                           "chosen on validation, hbilstm at wide (`hidden=300`, "
                           "`train.ema=0.995`; validation 86.0 ± 1.0%, against defaults 85.0 ± 1.0% (wide − "
                           "defaults on validation +1.0 [+1.0, +1.0] (95%, 3 pairs): wide ahead)) tests at 91.3 ± "
                           "1.2%; cnn at defaults (`train.ema=0.0`; validation 80.0 ± 0.0%) tests at 90.0 ± 1.0%; "
                           "hbilstm − cnn +1.3 [-0.1, +2.8] (95%, 3 pairs)")
    assert line.endswith("no difference resolved (Kim's CNN-rand, published: 91.2%)")
    # A choice stored before it kept each run's values: the margin against the seeds' spread, unpaired.
    unkept = {**summary, "tasks": [{**trec, "candidates": [{k: v for k, v in c.items() if k != "each"}
                                                             for c in trec["candidates"]]}]}
    assert "(wide beats defaults by 1.0, within the seeds' spread)" in choice_verdicts(unkept)[0]
    # On SST, Kim's runs trained on the treebank's phrases too, and the published figure says so.
    sst = {**summary, "tasks": [{**trec, "task": "sst2"}]}
    (line,) = choice_verdicts(sst)
    assert line.startswith("SST-2 (") and line.endswith(
        "(Kim's CNN-rand, published, trained on the treebank's phrases too: 82.7%)")


# The CNN with an average of its weights: higher validation (82, 83, 81 against 80 each), lower test
# (89, 90, 88 against 90, 91, 89): chosen, as the test split chooses nothing on the baseline's side either.
CNN_EMA = _summary([_run("cnn", s, a, val=v) for s, a, v in ((0, 0.89, 0.82), (1, 0.90, 0.83), (2, 0.88, 0.81))],
                   {"hidden": 150, "train.ema": 0.995, "dropout": 0.5})


def test_the_baseline_s_setting_is_chosen_on_validation_too(tmp_path):
    summary = choose({"defaults": DEFAULTS, "wide": WIDE, "cnn-ema": CNN_EMA},
                     sentences={"trec": {"train": 4907, "val": 545, "test": 500}})
    (trec,) = summary["tasks"]
    # Each side shows the settings its sweeps differ in, and the training ones the other side's differ in.
    assert summary["settings"] == ["hidden", "train.ema"] and summary["baseline_settings"] == ["train.ema"]
    assert [c["setting"] for c in trec["baselines"]] == ["defaults", "cnn-ema"]
    assert [c["settings"] for c in trec["baselines"]] == [{"train.ema": 0.0}, {"train.ema": 0.995}]
    assert trec["baseline"]["setting"] == "cnn-ema" and trec["baseline"]["encoder"] == "cnn"
    assert trec["baseline"]["val"]["mean"] == pytest.approx(82.0) and trec["baseline"]["test"]["mean"] == 89.0
    # By hand: wide − cnn-ema = 92 − 89, 92 − 90, 90 − 88 = 3, 2, 2; mean 7/3, sd √(1/3), half-width 4.303 / 3.
    c = trec["contrast"]
    assert c["differences"] == pytest.approx([3, 2, 2])
    assert (c["mean"], c["lo"], c["hi"]) == pytest.approx((7 / 3, 7 / 3 - 4.303 / 3, 7 / 3 + 4.303 / 3), abs=1e-3)
    (line,) = choice_verdicts(summary)
    # cnn-ema − defaults on validation: 2, 3, 1; mean 2, sd 1, half-width 4.303 / √3 = 2.484.
    assert ("; chosen the same way, cnn at cnn-ema (`train.ema=0.995`; validation 82.0 ± 1.0%, against defaults "
            "80.0 ± 0.0% (cnn-ema − defaults on validation +2.0 [-0.5, +4.5] (95%, 3 pairs): no difference "
            "resolved)) tests at 89.0 ± 1.0%; hbilstm − cnn +2.3 [+0.9, +3.8] (95%, 3 pairs): hbilstm ahead") in line
    report = sentences_report.write_choice_report(tmp_path, summary).read_text()
    assert "| cnn, defaults | `train.ema=0.0` | 80.0 ± 0.0 | 90.0 ± 1.0 |" in report
    assert "| cnn, cnn-ema (chosen) | `train.ema=0.995` | 82.0 ± 1.0 | 89.0 ± 1.0 |" in report
    assert "| hbilstm, wide (chosen) | `hidden=300`, `train.ema=0.995` | 86.0 ± 1.0 | 91.3 ± 1.2 |" in report
    assert "Chosen hbilstm − chosen cnn, test accuracy paired by seed: +2.3 [+0.9, +3.8] (95%, 3 pairs)." in report
    # A choice stored before the baseline was chosen too: its baseline alone, without validation.
    old = {**summary, "tasks": [{**trec, "baseline": {k: trec["baseline"][k] for k in ("setting", "encoder", "runs",
                                                                                       "test", "each")}}]}
    del old["tasks"][0]["baselines"]
    assert "; cnn at cnn-ema 89.0 ± 1.0%; hbilstm − cnn" in choice_verdicts(old)[0]
    assert "| cnn, cnn-ema | - | - | 89.0 ± 1.0 |" in sentences_report.write_choice_report(tmp_path, old).read_text()


def _sweep_folders(tmp_path: Path) -> dict[str, Path]:
    """The two finished sweeps above, each in a folder of its own (its summary.json alone)."""
    folders = {}
    for label, summary in (("defaults", DEFAULTS), ("wide", WIDE)):
        folders[label] = tmp_path / label
        folders[label].mkdir()
        (folders[label] / "summary.json").write_text(json.dumps(summary))
    return folders


def test_choose_from_finished_sweeps_on_the_command_line(shared_data, tmp_path, capsys):
    folders = _sweep_folders(tmp_path)
    out = tmp_path / "choice"
    assert main(["reproduce", "sentences", "--choose-from", f"defaults={folders['defaults']},wide={folders['wide']}",
                 "--out", str(out), "--data-dir", str(shared_data / "sentence")]) == 0
    saved = json.loads((out / "summary.json").read_text())
    assert saved["recipe"] == "sentences-choice" and saved["tasks"][0]["chosen"] == 1
    assert saved["sweeps"] == {k: str(v) for k, v in folders.items()}
    sizes = saved["tasks"][0]["sentences"]  # (TREC's 5,452 training questions, a tenth kept to validate)
    assert sizes["train"] + sizes["val"] == 5452 and sizes["test"] == 500
    report = (out / "report.md").read_text()
    assert "## TREC" in report and "SST is trained on sentences only" in report
    assert "hbilstm at wide" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["reproduce", "sentences", "--choose-from", f"{folders['wide']}", "--out", str(out)])


def test_a_choice_never_writes_over_a_sweep_or_a_users_files(shared_data, tmp_path, monkeypatch, capsys):
    """The choice's folder is its own: a sweep's folder (the sweeps' default one, where --out is not given)
    and a folder of the user's are refused before anything is written; a summary.json that is not a
    sentence sweep's is refused by name."""
    from highwaynet.recipes.sentences import choose_setting

    folders = _sweep_folders(tmp_path)
    data = shared_data / "sentence"
    sweep = tmp_path / "runs" / "sentences"  # a sweep's folder, marked as highwaynet marks one
    files.claim(sweep, "sweep")
    (sweep / "summary.json").write_text("the sweep's own summary")
    with pytest.raises(files.FolderNotOurs, match="sweep"):
        choose_setting(folders, sweep, data_dir=data)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my notes")
    with pytest.raises(files.FolderNotOurs):
        choose_setting(folders, mine, data_dir=data)
    assert (sweep / "summary.json").read_text() == "the sweep's own summary"
    assert (mine / "report.md").read_text() == "my notes"
    # Without --out the choice goes to a folder of its own, not the sweeps' default folder.
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "sentences", "--choose-from", f"defaults={folders['defaults']},wide={folders['wide']}",
                 "--data-dir", str(data)]) == 0
    assert (tmp_path / "runs" / "sentences-choice" / "report.md").is_file()
    assert (sweep / "summary.json").read_text() == "the sweep's own summary"
    # A summary.json that is not a finished sentence sweep's.
    (folders["wide"] / "summary.json").write_text(json.dumps({"runs": [{"task": "trec"}]}))
    with pytest.raises(ValueError, match="is not a finished sentence sweep's summary"):
        choose_setting(folders, tmp_path / "choice", data_dir=data)
    with pytest.raises(TypeError, match="sweeps must be a dict"):
        choose_setting([str(folders["wide"])], tmp_path / "choice", data_dir=data)


def test_a_choice_never_takes_a_gates_or_lesion_folder(tmp_path, capsys):
    """An analysis folder of a run's gates or lesion study holds a report.md the choice would replace: refused,
    naming the analysis found and what to do, before anything is read or written."""
    folders = _sweep_folders(tmp_path)
    for result, what in (("gates.json", "the gates' analysis"), ("lesion.json", "the lesion study")):
        out = tmp_path / result.split(".")[0]
        files.claim(out, "analysis", what)
        files.write_text(out / result, "{}\n")
        files.write_text(out / "report.md", "the analysis' report\n")
        assert main(["reproduce", "sentences", "--choose-from", f"wide={folders['wide']}", "--out", str(out)]) == 2
        error = capsys.readouterr().err
        assert f"{out} holds {what} ({result}), whose report.md the setting chosen among sweeps would replace" in error
        assert "another --out" in error and "--restart" not in error  # (the choice has no --restart)
        assert (out / "report.md").read_text() == "the analysis' report\n" and not (out / "summary.json").exists()


def test_the_choice_s_default_folder_is_read_from_the_sweep_recipe_s(tmp_path, monkeypatch, capsys):
    """Without --out, the choice goes beside the sweeps' default folder, read from the sentences recipe's own
    default (one source): a default moved there moves the choice's folder with it (and its help), never onto
    the sweeps' folder. A --out given is the choice's folder as it is."""
    import dataclasses

    from highwaynet import cli
    from highwaynet.recipes import sentences

    chosen = []

    def choose_setting(sweeps, out, **kwargs):
        chosen.append(out)
        raise ValueError("nothing chosen here")

    monkeypatch.setattr(sentences, "choose_setting", choose_setting)
    moved = tuple(dataclasses.replace(r, out="runs/sentence-sweeps") if r.name == "sentences" else r
                  for r in cli.REPRODUCE_RECIPES)
    assert moved != cli.REPRODUCE_RECIPES
    for recipes, default in ((cli.REPRODUCE_RECIPES, "runs/sentences"), (moved, "runs/sentence-sweeps")):
        monkeypatch.setattr(cli, "REPRODUCE_RECIPES", recipes)
        assert main(["reproduce", "sentences", "--choose-from", f"wide={tmp_path}"]) == 2
        assert chosen.pop() == f"{default}-choice"
        assert main(["reproduce", "sentences", "--choose-from", f"wide={tmp_path}", "--out", str(tmp_path / "c")]) == 2
        assert chosen.pop() == str(tmp_path / "c")
        capsys.readouterr()
        with pytest.raises(SystemExit):
            main(["reproduce", "sentences", "--help"])
        assert f"(bydefault{default}-choice)" in "".join(capsys.readouterr().out.split())  # (however it wraps)


def test_the_results_index_row_is_the_stored_choice(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "docs" / "_ext"))
    import results

    try:
        record = {"environment": {"highwaynet": "0.4.0"},
                  "result": choose({"defaults": DEFAULTS, "wide": WIDE},
                                   sentences={"trec": {"train": 4907, "val": 545, "test": 500}})}
        (row,) = results._summary({"sentences-choice": record}).splitlines()[2:]
    finally:
        sys.modules.pop("results", None)
    assert row == ("| highway BiLSTM, its setting chosen per task on validation (defaults (`hidden=150`, "
                   "`train.ema=0.0`) or wide (`hidden=300`, `train.ema=0.995`)), vs Kim's CNN-rand trained by the "
                   "recipe in one setting (defaults (`train.ema=0.0`)), paired by seed | test accuracy (%): TREC "
                   "(1 block, 300 units per direction, 10 epochs, 4,907 training sentences (545 to validate, 500 to "
                   "test), 3 seeds (seed 3 left out: not every candidate finished it)): wide chosen, 91.3 ± 1.2 vs "
                   "CNN 90.0 ± 1.0 (Kim, published: 91.2), chosen − CNN +1.3 [-0.1, +2.8] (95%, 3 pairs): no "
                   "difference resolved; the chosen setting averages its weights (`train.ema`), the CNN does not | "
                   "0.4.0 | {doc}`/results/sentences` |")
    # What a reader of the row must know, stored with the result (store.py --caveat), is said in it.
    try:
        (row,) = results._summary({"sentences-choice": {**record, "caveat": "wide was tuned on test"}}).splitlines()[2:]
    finally:
        sys.modules.pop("results", None)
    assert "or wide (`hidden=300`, `train.ema=0.995`); wide was tuned on test), vs Kim's" in row
    # The CNN's setting chosen on validation too: the row names its candidates and the one chosen, and an
    # average of the weights on both sides is no longer said to be the highway BiLSTM's alone.
    record = {**record, "result": choose({"defaults": DEFAULTS, "wide": WIDE, "cnn-ema": CNN_EMA},
                                         sentences={"trec": {"train": 4907, "val": 545, "test": 500}})}
    try:
        (row,) = results._summary({"sentences-choice": record}).splitlines()[2:]
    finally:
        sys.modules.pop("results", None)
    assert ("), vs Kim's CNN-rand trained by the recipe, its setting chosen on validation too (defaults "
            "(`train.ema=0.0`) or cnn-ema (`train.ema=0.995`)), paired by seed |") in row
    assert "wide chosen, 91.3 ± 1.2 vs CNN at cnn-ema 89.0 ± 1.0 (Kim, published: 91.2)" in row
    assert row.count("averages its weights") == 0
    # Validation choosing the CNN without the average, the row says the average is the chosen BiLSTM's alone.
    record = {**record, "result": choose({"defaults": DEFAULTS, "wide": WIDE, "cnn-ema": {
        **CNN_EMA, "runs": [{**r, "best_val_acc": 0.7} for r in CNN_EMA["runs"]]}},
        sentences={"trec": {"train": 4907, "val": 545, "test": 500}})}
    try:
        (row,) = results._summary({"sentences-choice": record}).splitlines()[2:]
    finally:
        sys.modules.pop("results", None)
    assert "vs CNN at defaults 90.0 ± 1.0" in row
    assert row.endswith("the chosen setting averages its weights (`train.ema`), the CNN validation chose does not | "
                        "0.4.0 | {doc}`/results/sentences` |")


def test_a_choice_between_a_sweep_and_itself_is_refused(shared_data, tmp_path, capsys):
    """--choose-from naming one folder under two labels (spelt alike or not) chose "between" a sweep and itself
    (a beats b by 0.0) and reported it as a choice: refused, naming both labels, before anything is written."""
    folders = _sweep_folders(tmp_path)
    for twice in (f"a={folders['defaults']},b={folders['defaults']}",
                  f"a={folders['defaults']},b={tmp_path}/./defaults/,c={folders['wide']}"):
        out = tmp_path / "choice"
        assert main(["reproduce", "sentences", "--choose-from", twice, "--out", str(out),
                     "--data-dir", str(shared_data / "sentence")]) == 2
        error = capsys.readouterr().err
        assert "sweeps 'a' and 'b' name one folder" in error and str(folders["defaults"]) in error
        assert not out.exists()


def test_a_choice_s_folder_whose_marker_is_damaged_is_taken_again(shared_data, tmp_path, capsys):
    """The one check for an analysis' folder knew a gates' or lesion folder whose marker is damaged by its result,
    not a choice's: run again into its own folder, the choice was refused (its summary.json not taken as evidence),
    and the message named gates.json or lesion.json. A sweep's summary.json is no such evidence."""
    folders = _sweep_folders(tmp_path)
    out = tmp_path / "choice"
    command = ["reproduce", "sentences", "--choose-from", f"defaults={folders['defaults']},wide={folders['wide']}",
               "--out", str(out), "--data-dir", str(shared_data / "sentence")]
    assert main(command) == 0
    (out / files.MARKER).write_text("damaged")
    assert main(command) == 0
    assert "made again, listing the files there that highwaynet writes (report.md, summary.json)" in \
        capsys.readouterr().out
    assert {"report.md", "summary.json"} <= set(files.marker(out)["written"])
    sweep = tmp_path / "sweep"  # (a sweep's folder, its marker damaged: never taken for a choice's)
    files.claim(sweep, "sweep")
    files.write_text(sweep / "summary.json", (folders["wide"] / "summary.json").read_text())
    (sweep / files.MARKER).write_text("damaged")
    with pytest.raises(files.DamagedMarker, match="summary.json naming sentences-choice"):
        files.check_analysis_folder(sweep, "summary.json")


def test_an_analysis_folder_is_read_as_a_path(tmp_path, monkeypatch):
    """check_analysis_folder made its folder with Path(): "" was the working folder, taken for an analysis."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="folder must be a path, got an empty string"):
        files.check_analysis_folder("", "gates.json")
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(files.FolderNotOurs, match=f"^{tmp_path / 'mine'} holds files"):
        files.check_analysis_folder("~/mine", "gates.json")


@pytest.mark.parametrize(("edit", "named"), [
    (lambda r: r.update(best_val_acc=float("nan")), "run 1 (trec, hbilstm, 1, 1, 0) has best_val_acc nan, not an "
                                                    "accuracy from 0 to 1"),
    (lambda r: r.update(best_val_acc=86.0), "has best_val_acc 86.0, not an accuracy from 0 to 1"),
    (lambda r: r.update(best_val_acc="0.86"), "has best_val_acc '0.86', not a number"),
    (lambda r: r.pop("best_val_acc"), "run 1 (trec, hbilstm, 1, 1, 0) lacks best_val_acc"),
    (lambda r: r["test"].update(acc=float("inf")), "has test.acc inf, not an accuracy from 0 to 1"),
    (lambda r: r.update(seed="1"), "has seed '1', not a whole number"),
    (lambda r: r.update(seed=0), "run 1 (trec, hbilstm, 1, 0, 0) repeats run 0 (the same task, encoder, depth, seed "
                                 "and fold)"),
])
def test_a_hand_edited_run_is_named(shared_data, tmp_path, edit, named):
    """A run hand-edited in a sweep's summary (validation NaN, a percentage, a string, missing; a run given
    twice) crashed deep in the report (NaN: an AttributeError from statistics, after summary.json was
    written) or was chosen on it (a percentage, a repeated seed counted twice): refused, naming the run and
    what is wrong with it, before anything is written."""
    from highwaynet.recipes.sentences import choose_setting

    folders = _sweep_folders(tmp_path)
    summary = json.loads((folders["wide"] / "summary.json").read_text())
    edit(summary["runs"][1])
    (folders["wide"] / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ValueError, match="summary.json: ") as caught:
        choose_setting(folders, tmp_path / "choice", data_dir=shared_data / "sentence")
    assert named in str(caught.value) and "put back the summary.json its sweep wrote" in str(caught.value)
    assert not (tmp_path / "choice").exists()


def test_a_sweep_summary_without_its_epochs_is_refused(shared_data, tmp_path):
    """The choice reads each sweep's epochs (config.base.train.epochs): a summary without them was a KeyError."""
    from highwaynet.recipes.sentences import choose_setting

    folders = _sweep_folders(tmp_path)
    summary = json.loads((folders["defaults"] / "summary.json").read_text())
    del summary["config"]["base"]
    (folders["defaults"] / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ValueError, match="is not a finished sentence sweep's summary"):
        choose_setting(folders, tmp_path / "choice", data_dir=shared_data / "sentence")


def test_a_task_whose_candidates_share_no_seed_is_refused_by_name():
    """Since the baseline is chosen among every sweep that ran it, a CNN sweep run with other seeds left a task
    without a seed every candidate finished: the task was dropped from the choice without a word (and where
    every task was, the error said the sweeps never ran both encoders with a seed in common). It is refused,
    naming what each candidate finished; sweeps lacking an encoder are told so."""
    other = {**CNN_EMA, "runs": [{**r, "seed": r["seed"] + 5} for r in CNN_EMA["runs"]]}
    with pytest.raises(ValueError, match="on TREC no seed \\(fold\\) was finished by every candidate: ") as caught:
        choose({"defaults": DEFAULTS, "wide": WIDE, "cnn-other": other})
    assert ("; cnn at defaults (1 block) finished seeds 0, 1, 2; cnn at cnn-other (1 block) finished seeds 5, 6, 7: "
            "give sweeps run with seeds in common") in str(caught.value)
    assert "hbilstm at wide (1 block) finished seeds 0, 1, 2, 3;" in str(caught.value)
    with pytest.raises(ValueError, match="^none of the sweeps ran hbilstm: give a sweep that did"):
        choose({"cnn-ema": CNN_EMA})
    with pytest.raises(ValueError, match="^none of the sweeps ran cnn: give a sweep that did"):
        choose({"wide": WIDE})
    with pytest.raises(ValueError, match="^no task on which the sweeps ran both hbilstm and cnn"):
        choose({"wide": WIDE, "cnn-sst2": {**CNN_EMA, "runs": [{**r, "task": "sst2"} for r in CNN_EMA["runs"]]}})
    # Cross-validation's folds are named as folds.
    assert sentences_report._seeds_text([[0, 3], [0, 1]]) == "folds 1 (seed 0), 3 (seed 0)"


def test_a_sweep_s_depths_are_candidates_told_apart(tmp_path):
    """A sweep that ran the highway BiLSTM at several depths gives a candidate at each: the verdict named each by
    its sweep's label alone ("deep − deep on validation +1.0: deep ahead") and the report's table gave rows
    alike but for their numbers. Each is named with its depth where its sweep gives several."""
    deep = _summary([_run("hbilstm", s, a - 0.01 * (n - 1), val=v + 0.01 * (2 - n), layers=n)
                     for n in (1, 2) for s, a, v in ((0, 0.92, 0.86), (1, 0.92, 0.87), (2, 0.90, 0.85))],
                    {"hidden": 300, "train.ema": 0.995, "dropout": 0.5})
    summary = choose({"defaults": DEFAULTS, "deep": deep})
    (trec,) = summary["tasks"]
    assert [(c["setting"], c["layers"]) for c in trec["candidates"]] == [("defaults", 1), ("deep", 1), ("deep", 2)]
    assert trec["chosen"] == 1
    (line,) = choice_verdicts(summary)
    assert "hbilstm at deep (1 block) (`hidden=300`, `train.ema=0.995`; validation 87.0 ± 1.0%" in line
    assert ("; deep (2 blocks) 86.0 ± 1.0% (deep (1 block) − deep (2 blocks) on validation +1.0 [+1.0, +1.0] (95%, 3 "
            "pairs): deep (1 block) ahead)) tests at 91.3 ± 1.2%") in line
    assert "against defaults 85.0 ± 1.0% (deep (1 block) − defaults on validation" in line
    report = sentences_report.write_choice_report(tmp_path, summary).read_text()
    assert "| hbilstm, deep (1 block) (chosen) |" in report and "| hbilstm, deep (2 blocks) |" in report
    assert "| hbilstm, defaults |" in report


def test_a_tie_on_validation_is_said_to_be_broken_by_the_order_given(tmp_path):
    """Two CNN sweeps of one mean validation accuracy: the first given is taken (its test accuracy differs), and
    the verdict said "chosen on validation" as though validation had told them apart. It says the means are
    equal and the first given is taken, and so does the report's table; a lead on validation says nothing of it."""
    tied = {**CNN_EMA, "runs": [{**r, "best_val_acc": 0.8} for r in CNN_EMA["runs"]]}  # (80 each, as DEFAULTS' cnn)
    for order, first, other in ((("cnn-ema", "defaults"), "cnn-ema", "defaults"),
                                (("defaults", "cnn-ema"), "defaults", "cnn-ema")):
        summary = choose({**{label: {"cnn-ema": tied, "defaults": DEFAULTS}[label] for label in order}, "wide": WIDE})
        (trec,) = summary["tasks"]
        assert trec["baseline"]["setting"] == first
        (line,) = choice_verdicts(summary)
        ema = 0.995 if first == "cnn-ema" else 0.0
        assert (f"chosen the same way, cnn at {first} (`train.ema={ema}`; validation 80.0 ± 0.0%, the same mean as "
                f"{other}'s: the first given of equals is taken, against {other} 80.0 ±") in line
        report = sentences_report.write_choice_report(tmp_path, summary).read_text()
        assert f"| cnn, {first} (chosen: the first given of equals) |" in report
        assert "| hbilstm, wide (chosen) |" in report and "(of equals, the first given)" in report
        assert line.count("the same mean") == 1  # (wide leads defaults on validation: no tie said there)


def test_the_scale_gives_the_chosen_setting_s_epochs():
    """The scale's epochs were the first sweep's, whichever was chosen: a setting trained 20 epochs, chosen over
    defaults' 10, was said to be of 10 epochs. Each candidate keeps its sweep's epochs; the chosen one's are said."""
    longer = {**WIDE, "config": {**WIDE["config"], "base": {"train": {"epochs": 20}}}}
    summary = choose({"defaults": DEFAULTS, "longer": longer})
    (trec,) = summary["tasks"]
    assert [c["epochs"] for c in trec["candidates"]] == [10, 20] and trec["chosen"] == 1
    assert choice_verdicts(summary)[0].startswith("TREC (1 block, 300 units per direction, 20 epochs, 3 seeds")
    # A choice stored before its candidates kept their epochs: the summary's.
    del trec["candidates"][1]["epochs"]
    assert choice_verdicts(summary)[0].startswith("TREC (1 block, 300 units per direction, 10 epochs, 3 seeds")


def test_a_training_setting_the_two_sides_differ_in_is_shown_with_one_sweep_a_side(monkeypatch):
    """A CNN sweep without the weight average and a highway BiLSTM sweep with it, one sweep a side: neither side's
    sweeps differ among themselves, so neither row showed `train.ema` and the README's row did not say that the
    chosen setting averages its weights and the CNN does not. The training settings the sides' sweeps differ in
    are shown on both."""
    cnn = {**DEFAULTS, "runs": [r for r in DEFAULTS["runs"] if r["encoder"] == "cnn"]}
    summary = choose({"cnn": cnn, "wide": WIDE}, sentences={"trec": {"train": 4907, "val": 545, "test": 500}})
    assert summary["settings"] == ["train.ema"] and summary["baseline_settings"] == ["train.ema"]
    (trec,) = summary["tasks"]
    assert trec["candidates"][0]["settings"] == {"train.ema": 0.995}
    assert trec["baseline"]["settings"] == {"train.ema": 0.0}
    assert "; cnn at cnn (`train.ema=0.0`; validation 80.0 ± 0.0%) tests at" in choice_verdicts(summary)[0]
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "docs" / "_ext"))
    import results

    try:
        (row,) = results._summary({"sentences-choice": {"environment": {"highwaynet": "0.4.0"},
                                                         "result": summary}}).splitlines()[2:]
    finally:
        sys.modules.pop("results", None)
    assert "; the chosen setting averages its weights (`train.ema`), the CNN does not |" in row


def test_a_label_that_markdown_reads_is_refused(shared_data, tmp_path, capsys):
    """A sweep's label names it in the report's tables (and the README's): `a|b` split a row into five cells, a
    backtick opened code. Such a label is refused, naming it, before anything is written; spaces around a label
    or folder on the command line (after a comma) are dropped rather than kept in the label."""
    from highwaynet.recipes.sentences import choose_setting

    folders = _sweep_folders(tmp_path)
    out = tmp_path / "choice"
    for label in ("a|b", "`wide", "wide*", " wide", "five  sets", ""):
        with pytest.raises(ValueError, match=f"^sweep label {re.escape(repr(label))}: a label is letters, digits"):
            choose_setting({"defaults": folders["defaults"], label: folders["wide"]}, out,
                           data_dir=shared_data / "sentence")
    assert not out.exists()
    assert main(["reproduce", "sentences", "--choose-from", f"defaults={folders['defaults']},a|b={folders['wide']}",
                 "--out", str(out), "--data-dir", str(shared_data / "sentence")]) == 2
    assert "sweep label 'a|b'" in capsys.readouterr().err and not out.exists()
    assert main(["reproduce", "sentences", "--choose-from", f"defaults={folders['defaults']}, five sets.2 = "
                 f"{folders['wide']}", "--out", str(out), "--data-dir", str(shared_data / "sentence")]) == 0
    assert "| hbilstm, five sets.2 (chosen) |" in (out / "report.md").read_text()


def test_the_results_index_row_names_a_single_cnn_setting(monkeypatch):
    """With one CNN setting the README's row said the CNN was "trained by the recipe at its defaults", whatever its
    sweep ran (the weight average, say): the setting is named as the choice has it. A choice stored before the
    baseline was chosen too (no ``baselines``: its CNN from the defaults sweep) keeps "at its defaults"."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "docs" / "_ext"))
    import results

    def row(result):
        try:
            (line,) = results._summary({"sentences-choice": {"environment": {"highwaynet": "0.4.0"},
                                                              "result": result}}).splitlines()[2:]
        finally:
            sys.modules.pop("results", None)
        return line

    averaged = choose({"cnn-ema": CNN_EMA, "defaults": {**DEFAULTS, "runs": DEFAULTS["runs"][3:]}})
    assert "vs Kim's CNN-rand trained by the recipe in one setting (cnn-ema (`train.ema=0.995`)), paired" in \
        row(averaged)
    assert "at its defaults" not in row(averaged)
    old = json.loads(Path(__file__).resolve().parents[1].joinpath("docs", "results", "sentences-choice.json")
                     .read_text())["result"]
    for t in old["tasks"]:
        del t["baselines"]
    assert "vs Kim's CNN-rand trained by the recipe at its defaults, paired by seed" in row(old)


def test_one_setting_given_is_not_said_to_be_chosen():
    """A single sweep (or one highway BiLSTM setting among several CNN ones) is no choice on its side: the verdict
    said "chosen on validation" all the same."""
    (line,) = choice_verdicts(choose({"defaults": DEFAULTS}))
    assert "3 seeds): the one setting given, hbilstm at defaults (-; validation 85.0 ± 1.0%) tests at" in line
    assert "chosen" not in line
    (line,) = choice_verdicts(choose({"defaults": DEFAULTS, "cnn-ema": CNN_EMA}))
    assert "): the one setting given, hbilstm at defaults (`train.ema=0.0`; validation" in line
    assert "; chosen on validation, cnn at cnn-ema (`train.ema=0.995`; validation 82.0 ± 1.0%, against" in line


def test_a_sweep_s_options_given_with_a_choice_are_refused(shared_data, tmp_path, capsys):
    """--choose-from reads every task and seed its sweeps ran: `--task trec` or `--seeds 0,1` beside it was
    dropped without a word (the choice made on every task and seed), as were --restart and --report-only. Each
    option the choice would not read is refused by name, before anything is written."""
    folders = _sweep_folders(tmp_path)
    out = tmp_path / "choice"
    command = ["reproduce", "sentences", "--choose-from", f"defaults={folders['defaults']},wide={folders['wide']}",
               "--out", str(out), "--data-dir", str(shared_data / "sentence")]
    for extra, named in ((["--task", "trec"], "--task would not be read; leave it out"),
                         (["--seeds", "0,1", "--ema", "0.9"], "--seeds, --ema would not be read; leave them out"),
                         (["--restart"], "--restart would not be read"),
                         (["--report-only"], "--report-only would not be read")):
        assert main(command + extra) == 2
        error = capsys.readouterr().err
        assert "--choose-from trains nothing and reads every task, encoder, depth and seed its sweeps ran" in error
        assert named in error and not out.exists()
    assert main(command) == 0
