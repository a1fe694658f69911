"""Training Very Deep Networks, fast versions: depth sweep, gates, lesioning and the HTML report."""

import json
import re

import pytest

from highwaynet.cli import main
from highwaynet.training import Trainer, read_metrics

SWEEP = ["reproduce", "depth", "--data", "digits", "--depths", "2,4", "--lrs", "0.03,0.1", "--epochs", "2",
         "--seeds", "0,1"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("depth") / "sweep"
    assert main(SWEEP + ["--out", str(out)]) == 0
    return out


def test_depth_sweep_writes_figure_table_and_runs(sweep):
    summary = json.loads((sweep / "summary.json").read_text())
    assert [(n["depth"], n["kind"]) for n in summary["nets"]] == [
        (2, "plain"), (2, "highway"), (4, "plain"), (4, "highway")]
    for net in summary["nets"]:
        assert net["lr"] in (0.03, 0.1) and len(net["curves"]) == 2 and len(net["curves"][0]) == 2
        assert set(net["search"]) == {"0.03", "0.1"}
    assert (sweep / "depth.png").stat().st_size > 20_000
    report = (sweep / "report.md").read_text()
    assert "![training loss vs epoch](depth.png)" in report and "| 4 | highway |" in report
    highway4 = summary["nets"][3]
    assert f"| 4 | highway | {highway4['parameters']:,} |" in report  # thousands separated, as the README's
    assert highway4["run_dirs"][1].endswith(f"highway-4/lr{highway4['lr']:g}-seed1")
    assert (sweep / "highway-4" / "lr0.03-seed0" / "results.json").is_file()  # both rates were searched


def test_resume_picks_up_an_interrupted_sweep_without_redoing_finished_runs(tmp_path, monkeypatch, capsys):
    out = tmp_path / "sweep"
    argv = [*SWEEP[:5], "2", *SWEEP[6:], "--out", str(out)]  # depth 2 only: 3 runs per kind
    epochs = {"n": 0}
    run_epoch = Trainer._run_epoch

    def killed_at_tenth_epoch(self, epoch):
        epochs["n"] += 1
        if epochs["n"] == 8:  # highway-2's first search run has finished epoch 1 of 2: Ctrl-C in its second
            raise KeyboardInterrupt
        return run_epoch(self, epoch)

    monkeypatch.setattr(Trainer, "_run_epoch", killed_at_tenth_epoch)
    assert main(argv) == 130
    monkeypatch.undo()
    capsys.readouterr()
    assert main(argv + ["--resume"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("done, skipped") == 3  # plain: both rates and the second seed
    assert "keeps the settings" not in printed  # resumed with the settings it started with
    assert "highway-2/lr0.03-seed0: highway 2: lr 0.03, seed 0 (resumed)" in printed
    assert printed.count("(resumed)") == 1 and "after epoch 1" in printed
    assert len(read_metrics(out / "highway-2" / "lr0.03-seed0")) == 2
    assert main(argv) == 0  # the same command again: the study is done
    assert f"the study in {out} is done: its report is {out / 'report.md'}" in capsys.readouterr().out


def test_gates_and_lesion(sweep, capsys):
    run = sweep / "highway-4" / "lr0.1-seed0"
    assert main(["reproduce", "gates", str(run)]) == 0
    gates = json.loads((run / "gates" / "gates.json").read_text())
    assert len(gates["bias"]) == 3 and len(gates["mean_activity_per_layer"]) == 3
    assert len(gates["examples"]) == 3 and 0 <= gates["closed_fraction"] <= 1
    assert (run / "gates" / "gates.png").stat().st_size > 20_000
    assert main(["reproduce", "lesion", str(run), "--download"]) == 0  # (data present: nothing fetched)
    lesion = json.loads((run / "lesion" / "lesion.json").read_text())
    assert len(lesion["lesioned"]) == 3 and 0 < lesion["baseline"] <= 1
    assert "| 2 |" in (run / "lesion" / "report.md").read_text()
    capsys.readouterr()
    assert main(["reproduce", "gates", str(sweep / "plain-4" / "lr0.1-seed0")]) == 2
    assert "plain network" in capsys.readouterr().err


def test_axes_that_count_layers_or_epochs_tick_whole_numbers(sweep, monkeypatch):
    # 3 highway layers and 2 epochs: matplotlib's own ticks would fall at 0.5 or 0.2 steps.
    from highwaynet.recipes.depth import write_report
    from highwaynet.training import files
    ticks, save = {}, files.save_figure

    def recording(fig, path, dpi=120):
        fig.canvas.draw()
        for ax in fig.axes:
            for axis, lim in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
                if re.search("layer|epoch", axis.get_label_text()):
                    low, high = sorted(lim)
                    ticks[(path.name, axis.get_label_text())] = [t for t in axis.get_ticklocs() if low <= t <= high]
        save(fig, path, dpi)

    monkeypatch.setattr(files, "save_figure", recording)
    run = sweep / "highway-4" / "lr0.1-seed0"
    for argv in (["reproduce", "gates", str(run)], ["reproduce", "lesion", str(run)]):
        assert main(argv) == 0
    write_report(sweep, json.loads((sweep / "summary.json").read_text()))
    assert {name for name, _ in ticks} == {"gates.png", "lesion.png", "depth.png"}
    for key, locations in ticks.items():
        assert locations and all(float(t).is_integer() for t in locations), (key, locations)


def test_report_html_holds_every_figure_and_table(sweep):
    assert main(["report", str(sweep)]) == 0
    page = (sweep / "report.html").read_text()
    assert len(re.findall(r'src="data:image/png;base64,', page)) == 1  # depth.png, inlined
    assert page.count("<table>") == 2 and "highway_width" in page and "torch" in page  # tables, config, versions
    run = sweep / "highway-4" / "lr0.1-seed0"
    main(["reproduce", "lesion", str(run)])
    assert main(["report", str(run / "lesion")]) == 0
    assert "data:image/png;base64," in (run / "lesion" / "report.html").read_text()


@pytest.mark.parametrize("argv, message", [
    (["reproduce", "depth", "--depths", "1,10"], "--depths must be at least 2, got 1"),
    (["reproduce", "depth", "--lrs", "0.1,nan"], "--lrs must be a finite number, got nan"),
    (["reproduce", "gates", "/nonexistent"], "is not a run folder"),
    (["reproduce", "lesion", "/nonexistent"], "is not a run folder"),
    (["report", "/nonexistent"], "/nonexistent does not exist: give a run folder"),
])
def test_bad_arguments(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["reproduce", "depth", "--data", "cifar"], "invalid choice: 'cifar'"),
    (["reproduce", "depth", "--lrs", "fast"], "--lrs: expected comma-separated numbers, got 'fast'"),
])
def test_options_argparse_refuses(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
