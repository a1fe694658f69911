"""A run folder is the user's: highwaynet writes only into a folder that is new, empty or its own,
never deletes what it did not write, never follows a link out of the folder, and says what is wrong
(with the file or option, and what to do) instead of guessing or failing with a traceback."""

import errno
import json
import os
import random
import shutil
from pathlib import Path

import pytest
import torch

from highwaynet.cli import main
from highwaynet.training import files

TRAIN = ["train", "mlp", "--data", "digits", "--depth", "2", "--width", "8", "--epochs", "2", "--max-train", "100",
         "--device", "cpu"]


def train(out: Path, *extra: str) -> int:
    return main([*TRAIN, "--out", str(out), *extra])


def snapshot(folder: Path) -> dict[str, object]:
    """Every entry under ``folder`` (not following links): a link's target, a file's bytes, a folder."""
    found: dict[str, object] = {}
    for root, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = Path(root) / name
            key = str(path.relative_to(folder))
            found[key] = ("link", os.readlink(path)) if path.is_symlink() else \
                ("file", path.read_bytes()) if path.is_file() else ("folder",)
    return found


@pytest.fixture
def outside(tmp_path):
    """A file of the user's outside any run folder, which nothing may change."""
    path = tmp_path / "outside" / "precious.txt"
    path.parent.mkdir()
    path.write_text("the user's own\n")
    return path


# -- 1. ownership -------------------------------------------------------------------------------

@pytest.mark.parametrize("planted", ["report.md", "notes.tmp", "tensorboard/events.out", "checkpoint.pt.tmp"])
def test_a_folder_holding_other_files_is_refused_and_left_as_it_was(tmp_path, capsys, planted):
    out = tmp_path / "project"
    (out / planted).parent.mkdir(parents=True, exist_ok=True)
    (out / planted).write_text("mine\n")
    before = snapshot(out)
    assert train(out) == 2
    error = capsys.readouterr().err
    assert f"{out} holds files that highwaynet did not write ({planted.split('/')[0]})" in error
    assert "pass another folder" in error
    assert snapshot(out) == before


def test_the_root_and_the_home_folder_are_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    for folder in ("/", str(tmp_path / "home")):
        assert main([*TRAIN, "--out", folder]) == 2
        assert "needs a folder of its own" in capsys.readouterr().err
    assert os.listdir(tmp_path / "home") == []


def test_restart_removes_only_what_the_run_wrote(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out) == 0
    (out / "notes.txt").write_text("the user's notes, added since\n")
    (out / "figures").mkdir()
    assert train(out, "--lr", "0.05") == 2  # other settings: refused, naming the difference and the ways on
    error = capsys.readouterr().err
    assert f"{out} holds a run with other settings (--lr 0.1 there, 0.05 asked)" in error
    assert "--restart" in error and "another --out" in error
    marker_before = files.marker(out)
    assert train(out, "--restart") == 0
    assert (out / "notes.txt").read_text() == "the user's notes, added since\n" and (out / "figures").is_dir()
    assert files.marker(out)["id"] != marker_before["id"]  # started over: another run
    assert {"config.json", "metrics.jsonl", "checkpoint.pt", "model.pt", "results.json"} <= files.written(out)
    assert "notes.txt" not in files.written(out)


def test_a_run_folder_of_0_2_without_a_marker_is_adopted_and_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out, "--epochs", "1") == 0
    (out / files.MARKER).unlink()  # as 0.2 left it
    checkpoint = torch.load(out / "checkpoint.pt", weights_only=True)
    del checkpoint["identity"]
    torch.save(checkpoint, out / "checkpoint.pt")
    assert train(out, "--resume") == 0
    assert files.marker(out)["kind"] == "run" and "checkpoint.pt" in files.written(out)


def test_an_analysis_never_writes_into_a_sweep_or_a_run_folder(tmp_path, capsys):
    run = tmp_path / "run"
    assert train(run) == 0
    assert main(["reproduce", "gates", str(run), "--out", str(run)]) == 2
    assert f"{run} is a run folder of highwaynet's, not one for the gates' analysis" in capsys.readouterr().err
    assert main(["reproduce", "gates", str(run)]) == 0  # its own folder, RUN/gates
    assert files.marker(run / "gates")["kind"] == "analysis"


def _analysis_folder(folder: Path, result: str, text: str) -> Path:
    """An analysis' folder holding ``result`` (``text``) and a report.md, its marker then damaged."""
    files.claim(folder, "analysis", "an analysis")
    files.write_text(folder / result, text)
    files.write_text(folder / "report.md", "its report\n")
    (folder / files.MARKER).write_text("damaged")
    return folder


def test_an_analysis_is_known_by_the_test_its_writer_registered(tmp_path, monkeypatch):
    """training.files named a recipe (sentences-choice) to know a choice's folder by its summary.json. Each
    analysis is now made known with the test that recognises its result (register_analysis), by the code that
    writes it (the recipes' in highwaynet.recipes.analyses): a folder whose marker is damaged is taken again
    where a registered test knows its result, and not for a summary.json no registered test accepts (a sweep's,
    naming its own recipe). Without the registrations training.files knows no analysis at all."""
    import highwaynet.recipes  # noqa: F401  (makes the recipes' analyses known)
    from highwaynet.recipes.analyses import CHOICE_RECIPE

    assert "sentences" not in Path(files.__file__).read_text()  # (it names no recipe)
    monkeypatch.setattr(files, "ANALYSES", dict(files.ANALYSES))
    monkeypatch.setattr(files, "_RECOGNISED", dict(files._RECOGNISED))
    files.register_analysis("probe.json", "the probe", evidence="probe.json holding a probe",
                            holds=lambda folder: files.read_json_in(folder, "probe.json") == {"probe": 1})
    probe = _analysis_folder(tmp_path / "probe", "probe.json", '{"probe": 1}')
    assert files.check_claimable(probe, "analysis") is None  # (known by its result: to be marked again)
    files.claim(probe, "analysis", "the probe", log=lambda line: None)
    assert sorted(files.marker(probe)["written"]) == ["probe.json", "report.md"]
    with pytest.raises(FileExistsError, match=r"holds the probe \(probe.json\), whose report.md the gates' analysis"):
        files.check_analysis_folder(probe, "gates.json")
    choice = _analysis_folder(tmp_path / "choice", "summary.json", json.dumps({"recipe": CHOICE_RECIPE}))
    assert files.check_claimable(choice, "analysis") is None
    for name, result, text in (("not-a-probe", "probe.json", '{"probe": 2}'),
                               ("sweep-summary", "summary.json", json.dumps({"recipe": "sentences", "runs": []})),
                               ("not-json", "summary.json", "{")):
        folder = _analysis_folder(tmp_path / name, result, text)
        with pytest.raises(files.DamagedMarker, match="its gates.json, lesion.json, summary.json naming "
                           f"{CHOICE_RECIPE} or probe.json holding a probe\\)"):
            files.check_claimable(folder, "analysis")
    # (training.files alone: no analysis is known, a choice's folder neither)
    monkeypatch.setattr(files, "ANALYSES", {})
    monkeypatch.setattr(files, "_RECOGNISED", {})
    with pytest.raises(files.DamagedMarker, match=r"\(its result\)"):
        files.check_claimable(_analysis_folder(tmp_path / "choice2", "summary.json",
                                               json.dumps({"recipe": CHOICE_RECIPE})), "analysis")
    with pytest.raises(ValueError, match="'gates.json' is the result of no analysis made known"):
        files.check_analysis_folder(tmp_path / "new", "gates.json")
    with pytest.raises(ValueError, match="result must be a file's plain name"):
        files.register_analysis("a/b.json", "a misnamed analysis")


def test_the_report_command_knows_a_choice_s_folder_whose_marker_is_damaged(tmp_path):
    """``highwaynet report`` in a process of its own (no recipe imported before it) knows a choice's folder by
    its summary.json, as training.files did when it named the choice's recipe itself: the folder is marked
    again and its page written, not refused as damaged."""
    import subprocess
    import sys

    from conftest import process_timeout

    import highwaynet

    choice = _analysis_folder(tmp_path / "choice", "summary.json", '{"recipe": "sentences-choice"}')
    env = {**os.environ, "PYTHONPATH": str(Path(highwaynet.__file__).parents[1])}
    run = subprocess.run([sys.executable, "-m", "highwaynet", "report", str(choice)], env=env, capture_output=True,
                         text=True, timeout=process_timeout(120))
    assert run.returncode == 0, run.stderr
    assert (choice / "report.html").is_file() and files.marker(choice)["kind"] == "analysis"
    assert {"summary.json", "report.md", "report.html"} <= set(files.marker(choice)["written"])


def test_restart_removes_the_analyses_of_the_run_before_and_refuses_a_link_in_their_place(tmp_path, outside,
                                                                                          capsys):
    """RUN/gates and RUN/lesion analyse the run's weights: a run started over clears them with its own files
    (what their markers list; a file of the user's in one stays), so that no analysis of the weights before
    is read as one of the run now. A folder of the user's under such a name stays; a link in the place of
    one is refused before anything is removed, and what it points to is not touched."""
    run = tmp_path / "run"
    assert train(run) == 0
    assert main(["reproduce", "gates", str(run)]) == 0 and main(["reproduce", "lesion", str(run)]) == 0
    (run / "gates" / "notes.txt").write_text("mine\n")
    assert train(run, "--restart") == 0
    assert not (run / "lesion").exists() and sorted(os.listdir(run / "gates")) == [files.MARKER, "notes.txt"]
    assert files.marker(run / "gates")["written"] == [] and (run / "gates" / "notes.txt").read_text() == "mine\n"
    shutil.rmtree(run / "gates")
    (run / "gates").mkdir()  # a folder of the user's own (no marker of an analysis): not highwaynet's to clear
    (run / "gates" / "gates.json").write_text("mine\n")
    (run / "lesion").symlink_to(outside.parent)
    (outside.parent / files.MARKER).write_text(json.dumps({"kind": "analysis", "id": "x", "written": ["precious.txt"]}))
    before, elsewhere = snapshot(run), snapshot(outside.parent)
    capsys.readouterr()
    assert train(run, "--restart") == 2
    error = capsys.readouterr().err
    assert f"{run / 'lesion'} is a symbolic link where an analysis of the run is written (reproduce lesion)" in error
    assert "remove the link (what it points to is not touched) and run again" in error
    assert snapshot(run) == before and snapshot(outside.parent) == elsewhere
    (run / "lesion").unlink()
    assert train(run, "--restart") == 0
    assert (run / "gates" / "gates.json").read_text() == "mine\n" and outside.read_text() == "the user's own\n"


def test_a_study_cleared_clears_its_runs_analyses_and_removes_the_emptied_runs(tmp_path):
    """A study started over clears each run it holds as a run started over (a run the new settings no longer
    train included): its analyses go with it, and the run's folder, empty, is removed."""
    sweep = tmp_path / "sweep"
    files.claim(sweep, "sweep")
    files.write_text(sweep / "sweep.json", "{}")
    for name in ("highway-2", "highway-2/lr0.1-seed0", "highway-2/lr0.1-seed0/gates"):
        files.claim(sweep / name, "analysis" if name.endswith("gates") else "run" if "seed" in name else "sweep")
    files.write_text(sweep / "highway-2" / "lr0.1-seed0" / "model.pt", "weights")
    files.write_text(sweep / "highway-2" / "lr0.1-seed0" / "gates" / "gates.json", "{}")
    assert files.clear(sweep) == ["highway-2", "sweep.json"]
    assert os.listdir(sweep) == [files.MARKER]


def test_a_study_with_a_link_in_a_later_runs_analysis_is_refused_before_any_run_is_removed(tmp_path, outside):
    """A study started over is refused where any of its runs has a link in the place of an analysis, before
    anything is removed: its runs in an earlier order were removed first, and a user who then kept the study
    had lost them."""
    sweep = tmp_path / "sweep"
    files.claim(sweep, "sweep")
    files.write_text(sweep / "sweep.json", "{}")
    for name in ("highway-1", "highway-1/lr0.1-seed0", "highway-2", "highway-2/lr0.1-seed0"):
        files.claim(sweep / name, "run" if "seed" in name else "sweep")
    for level in ("highway-1", "highway-2"):
        files.write_text(sweep / level / "lr0.1-seed0" / "model.pt", "weights")
    (sweep / "highway-2" / "lr0.1-seed0" / "gates").symlink_to(outside.parent)
    before, elsewhere = snapshot(sweep), snapshot(outside.parent)
    with pytest.raises(files.LinkInFolder, match="highway-2/lr0.1-seed0/gates is a symbolic link"):
        files.clear(sweep)
    assert snapshot(sweep) == before and snapshot(outside.parent) == elsewhere
    (sweep / "highway-2" / "lr0.1-seed0" / "gates").unlink()
    assert files.clear(sweep) == ["highway-1", "highway-2", "sweep.json"]


# -- 2. links -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [".lock", "report.html", "curves.png", "metrics.jsonl"])
def test_a_link_where_highwaynet_writes_is_refused_and_its_target_untouched(tmp_path, capsys, outside, name):
    out = tmp_path / "run"
    assert train(out, "--epochs", "1") == 0
    (out / name).unlink(missing_ok=True)
    (out / name).symlink_to(outside)
    command = ["report", str(out)] if name in ("report.html", "curves.png") else [*TRAIN, "--out", str(out),
                                                                                  "--resume"]
    assert main(command) == 2
    assert "is a symbolic link" in capsys.readouterr().err
    assert outside.read_text() == "the user's own\n"


@pytest.mark.parametrize("start", ["--restart", "new run"])
def test_a_link_in_place_of_results_json_is_refused_before_any_training(tmp_path, capsys, outside, start):
    out = tmp_path / "run"
    assert train(out, "--epochs", "1") == 0
    capsys.readouterr()
    for name in ("results.json", *(("checkpoint.pt", "model.pt") if start == "new run" else ())):
        (out / name).unlink()
    (out / "results.json").symlink_to(outside)
    assert main([*TRAIN, "--out", str(out), *([start] if start == "--restart" else [])]) == 2
    said = capsys.readouterr()
    assert f"{out / 'results.json'} is a symbolic link" in said.err and "epoch 1" not in said.out
    assert outside.read_text() == "the user's own\n" and (out / "results.json").is_symlink()


def test_report_embeds_only_the_figures_the_run_wrote(tmp_path, outside, capsys):
    out = tmp_path / "run"
    assert train(out, "--epochs", "1") == 0
    secret = outside.with_name("secret.png")
    secret.write_bytes(b"\x89PNG not for sharing")
    (out / "linked.png").symlink_to(secret)
    (out / "config.json").unlink()
    (out / "config.json").symlink_to(outside)  # a config.json that links elsewhere: not shown
    assert main(["report", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "the user's own" not in page and page.count("data:image/png;base64,") == 1  # curves.png alone
    # A report.md naming figures elsewhere (../, an absolute path, a link): none is inlined.
    (out / "metrics.jsonl").rename(out / "metrics.kept")  # (so that report.md is not rewritten from the metrics)
    report = out / "report.md"
    report.write_text(report.read_text() + f"\n![a](../outside/secret.png)\n![b]({secret})\n![c](linked.png)\n")
    assert main(["report", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "not for sharing" not in page and page.count("data:image/png;base64,") == 1
    assert "the user's own" not in page


# -- 3. silent wrong answers --------------------------------------------------------------------

def test_a_checkpoint_of_another_run_is_refused(tmp_path, capsys):
    first, second = tmp_path / "first", tmp_path / "second"
    assert train(first) == 0 and train(second, "--lr", "0.05") == 0
    shutil.copy(first / "checkpoint.pt", second / "checkpoint.pt")
    assert train(second, "--resume") == 2
    error = capsys.readouterr().err
    assert "was saved by another run" in error and "--restart" in error and "damaged" not in error


def test_an_edited_config_is_named_not_called_damaged(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out, "--epochs", "1") == 0
    record = json.loads((out / "config.json").read_text())
    record["config"]["train"]["lr"] = 0.5
    files.write_text(out / "config.json", json.dumps(record))
    assert train(out, "--resume") == 2
    error = capsys.readouterr().err
    assert "was trained with other settings than its run folder's config.json (train.lr 0.1 then, 0.5 now)" in error
    assert "edited" in error and "damaged" not in error


def test_a_checkpoint_that_does_not_fit_the_model_says_so(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out, "--epochs", "1") == 0
    record = json.loads((out / "config.json").read_text())
    record["config"]["width"] = 12
    files.write_text(out / "config.json", json.dumps(record))
    checkpoint = torch.load(out / "checkpoint.pt", weights_only=True)
    del checkpoint["identity"]  # (a checkpoint of 0.2: no identity to compare)
    torch.save(checkpoint, out / "checkpoint.pt")
    assert train(out, "--resume") == 2
    error = capsys.readouterr().err
    assert "does not fit the model" in error and "size mismatch" in error and "damaged" not in error


@pytest.mark.parametrize("argv, message", [
    (["--monitor", "val_accuracy"], "is not a metric this recipe reports: use one of val_loss, val_acc"),
    (["--device", "mps"], "no MPS device"),
    (["--device", "cuda:-1"], "is not a device: use auto, cpu, cuda, cuda:N or mps"),
])
def test_what_names_something_is_checked_before_a_folder_is_made(tmp_path, capsys, argv, message):
    if "mps" in argv and torch.backends.mps.is_available():
        pytest.skip("this machine has an MPS device")
    assert main([*TRAIN, "--out", str(tmp_path / "run"), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("out, message", [
    ("file/run", "file/run cannot be made: {tmp}/file is a file, not a folder; pass a folder for a run"),
    ("file/a/b", "file/a/b cannot be made: {tmp}/file is a file, not a folder"),
    ("dangling", "dangling is a symbolic link to {tmp}/nowhere, which does not exist"),
])
def test_a_run_folder_that_cannot_be_made_says_why(tmp_path, capsys, out, message):
    (tmp_path / "file").write_text("mine")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert main([*TRAIN, "--out", str(tmp_path / out)]) == 2  # (it said "[Errno 20] Not a directory", "[Errno 17]")
    assert message.format(tmp=tmp_path) in capsys.readouterr().err
    assert (tmp_path / "file").read_text() == "mine" and not (tmp_path / "nowhere").exists()


def test_repeated_values_in_a_sweep_are_refused(tmp_path, capsys):
    assert main(["reproduce", "depth", "--data", "digits", "--lrs", "0.1,0.1", "--out", str(tmp_path / "s")]) == 2
    assert "--lrs lists 0.1 more than once" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_a_cnns_channels_may_repeat_a_value():
    from highwaynet.cli import parse
    from highwaynet.config import CNNConfig

    assert parse(["train", "cnn", "--channels", "16,16,32"])[1].channels == [16, 16, 32]  # (not a sweep's list)
    assert CNNConfig(channels=[8, 8]).channels == [8, 8]


def test_a_list_setting_takes_a_tuple_and_keeps_it_as_a_list():
    """``CNNConfig(channels=(16, 16))``, a fixed sequence as Python writes one, is taken (it was refused as "must
    be list[int]"), kept as the list a config.json gives back: equal to it, and the same run when compared
    with a folder's settings; a sweep's list alike."""
    from dataclasses import asdict

    from highwaynet.config import CNNConfig, DepthConfig
    from highwaynet.training.run_dir import settings_differ

    config = CNNConfig(channels=(16, 16))
    assert config.channels == [16, 16] and config == CNNConfig(**json.loads(json.dumps(asdict(config))))
    assert settings_differ(asdict(CNNConfig(channels=[16, 16])), config) == []
    assert settings_differ(asdict(config), CNNConfig(channels=(16, 32))) == ["channels [16, 16] (asked [16, 32])"]
    assert DepthConfig(depths=(10, 20)).depths == [10, 20]
    with pytest.raises(ValueError, match="CNNConfig.channels must be at least 1, got 0"):
        CNNConfig(channels=(16, 0))


def sentence_set(folder: Path, train: bytes, test: bytes) -> Path:
    folder.mkdir()
    (folder / "train").write_bytes(train)
    (folder / "test").write_bytes(test)
    return folder


def test_a_sentence_set_of_one_class_is_refused(tmp_path, capsys):
    data = sentence_set(tmp_path / "one", b"0 good film\n0 fine play\n", b"0 a film\n")
    assert main(["reproduce", "sentences", "--task", str(data), "--layers", "1", "--epochs", "1", "--device", "cpu",
                 "--out", str(tmp_path / "out")]) == 2
    assert "holds one class only" in capsys.readouterr().err


@pytest.mark.parametrize("train, missing", [
    (b"0 good\n2 bad\n", "[0, 2] ([1] missing)"),
    (b"0 good\n20000000 bad\n1 fine\n", "[0, 1, 20000000] ([2, 3, 4, 5, 6, ...] missing)"),
])
def test_labels_that_are_not_0_to_k_name_the_first_missing_ones_only(tmp_path, capsys, train, missing):
    data = sentence_set(tmp_path / "gaps", train, b"0 a film\n")
    assert main(["reproduce", "sentences", "--task", str(data), "--layers", "1", "--epochs", "1", "--device", "cpu",
                 "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err  # (a label mistyped as 20000000 listed every number below it, or ran out of memory)
    assert f"labels must be 0..K-1; the training data has {missing}" in error and len(error) < 300


def test_sentence_files_are_utf8_text_with_the_bad_byte_named(tmp_path):
    from highwaynet.data.sentences import read_labelled

    good = tmp_path / "bom"
    good.write_bytes("\ufeff0 café crème\r\n1 bad film\r\n".encode())
    assert read_labelled(good) == [(0, ["café", "crème"]), (1, ["bad", "film"])]  # no BOM or \r in a word
    bad = tmp_path / "latin1"
    bad.write_bytes("0 good\n1 café\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1 is not UTF-8 text: byte 12 \(line 2\) is b'\\xe9'"):
        read_labelled(bad)


def test_a_prompt_keeps_its_characters_and_decodes_its_escapes():
    from highwaynet.cli import decode_escapes

    assert decode_escapes("café\\n") == "café\n"
    assert decode_escapes("naïve \\u00e9t\\u00e9 \\\\n") == "naïve été \\n"


# -- 4. messages, not tracebacks ----------------------------------------------------------------

def test_a_full_disk_is_said_to_be_full(tmp_path, capsys, monkeypatch):
    def full(f, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "_write_all", full)
    assert train(tmp_path / "run") == 2
    error = capsys.readouterr().err
    assert "could not be written: its disk is full" in error and "run the same command again" in error
    assert not (tmp_path / "run").exists()  # refused before it trained: no folder left behind


def test_tensorboard_missing_is_a_message(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # (an import of it now fails)
    assert train(tmp_path / "run", "--tensorboard") == 2
    assert "TensorBoard, which is not installed: pip install tensorboard" in capsys.readouterr().err


@pytest.mark.parametrize("edit, message", [
    (lambda record: record["config"].update(width="wide"), "does not hold a MLPConfig"),
    (lambda record: record["config"].update(colour="blue"), "unexpected keyword argument 'colour'"),
    (lambda record: [1, 2], "is not a run's configuration"),
    (None, "is not valid JSON"),
    ("[" * 100_000, "JSON nested too deeply to read"),
])
def test_a_hand_edited_config_is_named(tmp_path, capsys, edit, message):
    out = tmp_path / "run"
    assert train(out, "--epochs", "1") == 0
    path = out / "config.json"
    if edit is None:
        path.write_text(path.read_text()[:-20])
    elif isinstance(edit, str):
        path.write_text(edit)
    else:
        record = json.loads(path.read_text())
        path.write_text(json.dumps(edit(record) or record))
    assert train(out, "--resume") == 2
    error = capsys.readouterr().err
    assert str(path) in error and message in error


def test_interrupting_start_up_or_a_report_is_a_line(tmp_path, capsys, monkeypatch):
    from highwaynet import report

    assert train(tmp_path / "run", "--epochs", "1") == 0

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "write_run_report", interrupted)
    assert main(["report", str(tmp_path / "run")]) == 130
    assert capsys.readouterr().err == "highwaynet: interrupted\n"
    monkeypatch.setattr("highwaynet.cli.build_parser", interrupted)
    assert main(["--help"]) == 130


def test_a_finished_run_without_its_weights_says_they_were_removed(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out, "--epochs", "1") == 0
    (out / "model.pt").unlink()
    assert main(["reproduce", "gates", str(out)]) == 2
    assert "model.pt is missing from a run that has finished epochs" in capsys.readouterr().err


def test_report_of_a_sweep_not_finished_says_how_to_finish_it(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    files.claim(sweep, "sweep")
    assert main(["report", str(sweep)]) == 2
    assert "is a sweep whose report is not written yet" in capsys.readouterr().err


# -- 6. the folder, fuzzed ----------------------------------------------------------------------

RUN_NAMES = ["config.json", "metrics.jsonl", "model.pt", "checkpoint.pt", "checkpoint.prev.pt", "results.json",
             "report.md", "report.html", "curves.png", ".lock", "notes.tmp", "checkpoint.pt.tmp", "tensorboard",
             "data.csv", "sub"]


def plant(folder: Path, outside: Path, rng: random.Random) -> None:
    """Random contents of the user's own: files, folders and links (to files outside) under run files' names."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in rng.sample(RUN_NAMES, rng.randint(1, 4)):
        kind = rng.choice(["file", "folder", "link"])
        path = folder / name
        if path.exists() or path.is_symlink():
            continue
        if kind == "file":
            path.write_bytes(rng.randbytes(rng.randint(0, 64)))
        elif kind == "folder":
            path.mkdir()
            (path / "inside.txt").write_text("mine")
        else:
            path.symlink_to(outside)


def every_command(out: Path, theirs: dict[str, object], capsys, holds=lambda command: True) -> None:
    """A new run, ``--resume``, ``--restart`` and ``report`` on ``out``: each succeeds or is refused with a
    message, and after each the user's entries ``theirs`` are as they were (and ``holds(command)``)."""
    for command in ([*TRAIN, "--out", str(out)], [*TRAIN, "--out", str(out), "--resume"],
                    [*TRAIN, "--out", str(out), "--restart"], ["report", str(out)]):
        code = main(command)
        error = capsys.readouterr().err
        assert code in (0, 2) and "Traceback" not in error, (command, error)
        assert code == 0 or error.startswith("highwaynet: error: "), (command, error)
        now = snapshot(out)
        assert {k: now.get(k) for k in theirs} == theirs, command
        assert holds(command), command


@pytest.mark.parametrize("seed", range(9))
def test_random_contents_before_a_run_are_never_changed_removed_or_read(tmp_path, outside, seed, monkeypatch,
                                                                         capsys):
    """Whatever the folder holds (files, folders, links to files elsewhere, a half-written run of
    highwaynet's beside them), a run, ``--resume``, ``--restart`` and ``report``: each succeeds or is
    refused with a message, and no file highwaynet did not write is changed, removed or opened."""
    rng = random.Random(seed)
    out = tmp_path / "run"
    if seed % 3 == 1:  # a run of highwaynet's that stopped in its first epoch, and the user's files beside it
        assert train(out, "--epochs", "1") == 0
        for name in ("checkpoint.pt", "checkpoint.prev.pt", "results.json", "model.pt"):
            (out / name).unlink(missing_ok=True)
    elif seed % 3 == 2:  # a finished run, some of its files replaced by links to a file elsewhere
        assert train(out, "--epochs", "1") == 0
        for name in rng.sample(sorted(n for n in files.written(out) if (out / n).is_file()), 2):
            (out / name).unlink()
            (out / name).symlink_to(outside)
    plant(out, outside, rng)  # (seed % 3 == 0: a folder of the user's own alone)
    ours = files.written(out) | {files.MARKER}
    theirs = {k: v for k, v in snapshot(out).items() if k.split("/")[0] not in ours}
    sentinel = snapshot(outside.parent)
    opened, watching = [], [True]
    real_open, real_os_open = open, os.open

    def watched_open(file, *args, **kwargs):
        if watching and isinstance(file, (str, Path)) and Path(file).resolve().is_relative_to(outside.parent):
            opened.append(str(file))
        return real_open(file, *args, **kwargs)

    def watched_os_open(path, *args, **kwargs):
        if watching and Path(path).resolve().is_relative_to(outside.parent):
            opened.append(str(path))
        return real_os_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", watched_open)
    monkeypatch.setattr("io.open", watched_open)
    monkeypatch.setattr(os, "open", watched_os_open)
    every_command(out, theirs, capsys)
    watching.clear()
    assert snapshot(outside.parent) == sentinel and not opened, opened


# -- 7. the marker is input ---------------------------------------------------------------------

DAMAGED = [
    ("not JSON", "it is not valid JSON"),
    ("[" * 100_000, "it is not valid JSON"),  # (nested too deeply for json: a RecursionError, once)
    ([], "it holds list, not a JSON object"),
    (5, "it holds int, not a JSON object"),
    ({"kind": "run", "id": "x"}, "it has no 'written' list of the files highwaynet wrote"),
    ({"kind": "run", "id": "x", "written": None}, "its 'written' is None"),
    ({"kind": "run", "id": "x", "written": 7}, "its 'written' is 7"),
    ({"kind": "run", "id": "x", "written": [1.5]}, "its 'written' lists 1.5, not a file name"),
    ({"kind": "run", "id": "x", "written": [None]}, "its 'written' lists None, not a file name"),
    ({"kind": "run", "id": "x", "written": ["../notes.txt"]}, "lists '../notes.txt', not the name of a file inside"),
    ({"kind": "run", "id": "x", "written": [".."]}, "lists '..'"),
    ({"kind": "run", "id": "x", "written": ["."]}, "lists '.'"),
    ({"kind": "run", "id": "x", "written": ["/etc/passwd"]}, "lists '/etc/passwd'"),
    ({"kind": "run", "id": "x", "written": ["lnk/precious.txt"]}, "lists 'lnk/precious.txt'"),
    ({"kind": "run", "id": "x", "written": [""]}, "lists ''"),
    ({"kind": "run", "id": 3, "written": []}, "its id is 3"),
    ({"kind": "folder", "id": "x", "written": []}, "its kind is 'folder'"),
]


def write_marker(folder: Path, found: object) -> None:
    (folder / files.MARKER).write_text(found if isinstance(found, str) else json.dumps(found))


@pytest.mark.parametrize("found, problem", DAMAGED, ids=[str(i) for i in range(len(DAMAGED))])
def test_a_damaged_marker_is_named_and_nothing_it_names_is_used(tmp_path, outside, found, problem):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    (folder / "lnk").symlink_to(outside.parent)
    write_marker(folder, found)
    assert files.read_marker(folder) == (None, problem) or problem in files.read_marker(folder)[1]
    assert files.marker(folder) is None and files.written(folder) == set() and files.clear(folder) == []
    with pytest.raises(files.DamagedMarker, match=r"is damaged .*nothing there shows it is a run's folder \(its "
                                                  r"config.json naming a recipe\): it holds lnk, notes.txt"):
        files.check_claimable(folder, "run")
    with pytest.raises(files.DamagedMarker, match="is damaged"):
        files.write_text(folder / "config.json", "{}")
    assert sorted(os.listdir(folder)) == [files.MARKER, "lnk", "notes.txt"]
    assert outside.read_text() == "the user's own\n"


def test_clear_removes_only_regular_files_and_its_own_folders_never_through_links(tmp_path, outside):
    folder = tmp_path / "run"
    files.claim(folder, "run")
    for name in ("config.json", "metrics.jsonl"):
        files.write_text(folder / name, "{}")
    files.make_folder(folder / "tensorboard")
    (folder / "tensorboard" / "events").write_text("x")
    (folder / "tensorboard" / "elsewhere").symlink_to(outside.parent)  # removed whole: the link, not its target
    (folder / "lnk").symlink_to(outside.parent)  # a link to a folder elsewhere, and one to a file
    (folder / "lnkfile").symlink_to(outside)
    (folder / "mine").mkdir()
    (folder / "mine" / "inside.txt").write_text("mine\n")
    found = files.marker(folder)
    found["written"] += ["lnk", "lnkfile", "mine"]  # listed as written, yet links and a folder of the user's
    (folder / files.MARKER).write_text(json.dumps(found))
    assert files.clear(folder) == ["config.json", "metrics.jsonl", "tensorboard"]
    assert sorted(os.listdir(folder)) == [files.MARKER, "lnk", "lnkfile", "mine"]
    assert (folder / "mine" / "inside.txt").read_text() == "mine\n" and outside.read_text() == "the user's own\n"
    assert os.listdir(outside.parent) == ["precious.txt"]


def test_a_damaged_or_missing_marker_is_made_again_and_the_run_keeps_its_identity(tmp_path, outside, capsys):
    out = tmp_path / "run"
    assert train(out, "--epochs", "1") == 0
    identity = files.marker(out)["id"]
    for damage in ("missing", "damaged"):
        if damage == "missing":
            (out / files.MARKER).unlink()
        else:  # a damaged marker beside files of the user's: they stay theirs
            (out / "notes.txt").write_text("mine\n")
            (out / "lnk").symlink_to(outside.parent)
            write_marker(out, {"kind": "run", "id": identity, "written": ["../outside/precious.txt"]})
        capsys.readouterr()
        assert train(out, "--epochs", "1") == 0  # the same command: goes on, nothing lost
        said = capsys.readouterr().out
        assert ("is damaged (its 'written' lists '../outside/precious.txt'" in said) == (damage == "damaged")
        assert "made again, listing the files there that highwaynet writes (checkpoint.pt, config.json" in said
        assert ("the others stay yours (lnk, notes.txt)" in said) == (damage == "damaged")
        assert "the run's identity taken back from checkpoint.pt, which agrees with config.json" in said
        assert "nothing left to train" in said and files.marker(out)["id"] == identity
        assert {"config.json", "checkpoint.pt", "metrics.jsonl", "model.pt"} <= files.written(out)
        assert not {"notes.txt", "lnk"} & files.written(out)
    assert train(out, "--epochs", "1", "--restart") == 0  # (what it listed goes; the user's files stay)
    assert (out / "notes.txt").read_text() == "mine\n" and (out / "lnk").is_symlink()
    assert outside.read_text() == "the user's own\n"
    # A checkpoint that disagrees with config.json gives no identity back: a new one, and the checkpoint is refused.
    write_marker(out, {"kind": "run", "written": []})
    record = json.loads((out / "config.json").read_text())
    record["config"]["train"]["lr"] = 0.5
    (out / "config.json").write_text(json.dumps(record))
    assert train(out, "--epochs", "1", "--lr", "0.5") == 2
    printed = capsys.readouterr()
    assert "could not be taken back: checkpoint.pt and config.json disagree (train.lr 0.1 then, 0.5 now)" in \
        printed.out
    assert "was saved by another run" in printed.err and "--restart" in printed.err


def marker_contents(rng: random.Random, outside: Path) -> object:
    """A random marker: a valid one listing names that are links or the user's folder, or a damaged one
    (names out of the folder, through a link, ``.``, ``..``, absolute, of the wrong type, null, numbers)."""
    bad = ["../outside/precious.txt", str(outside), str(outside.parent), "..", ".", "lnk/precious.txt",
           "../..", "/", "a\\b", None, 3, 2.5, True, ["x"], {"a": 1}, ""]
    fine = ["lnk", "lnkfile", "mine", "config.json", "metrics.jsonl", "checkpoint.pt", "model.pt", "results.json"]
    written = rng.sample(fine, rng.randint(0, 4)) + rng.sample(bad, rng.randint(0, 2))
    rng.shuffle(written)
    found: dict = {"kind": "run", "id": "0" * 32, "written": written}
    change = rng.randrange(8)
    if change == 0:
        del found["written"]
    elif change == 1:
        found["written"] = rng.choice([None, 0, 1.5, "config.json", {"a": 1}])
    elif change == 2:
        return rng.choice([None, 5, "x", [], [written]])
    elif change == 3:
        found["kind"] = rng.choice([None, "sweep", "analysis", "other", 1])
    return found


@pytest.mark.parametrize("seed", range(10))
def test_random_markers_never_change_what_is_outside_or_the_users(tmp_path, outside, seed, capsys):
    """A marker with random ``written`` contents, in a folder holding the user's files and links to files and
    folders elsewhere (beside a finished run, a run stopped before its first checkpoint, or nothing of
    highwaynet's): a new run, ``--resume``, ``--restart`` and ``report`` each succeed or are refused with a
    message, and nothing outside the folder, nor anything of the user's inside it, changes."""
    rng = random.Random(seed)
    out = tmp_path / "run"
    if seed % 3 < 2:
        assert train(out, "--epochs", "1") == 0
        if seed % 3 == 1:
            for name in ("checkpoint.pt", "checkpoint.prev.pt", "results.json", "model.pt"):
                (out / name).unlink(missing_ok=True)
    out.mkdir(exist_ok=True)
    (outside.parent / "folder").mkdir()
    (outside.parent / "folder" / "inside.txt").write_text("elsewhere\n")
    (out / "notes.txt").write_text("the user's notes\n")
    (out / "mine").mkdir()
    (out / "mine" / "inside.txt").write_text("mine\n")
    (out / "lnk").symlink_to(outside.parent)
    (out / "lnkfile").symlink_to(outside)
    write_marker(out, marker_contents(rng, outside))
    theirs = {k: v for k, v in snapshot(out).items() if k.split("/")[0] in ("notes.txt", "mine", "lnk", "lnkfile")}
    sentinel = snapshot(tmp_path / "outside")
    every_command(out, theirs, capsys, lambda command: snapshot(tmp_path / "outside") == sentinel)


def test_a_folder_replaced_by_a_link_while_it_is_cleared_is_not_followed(tmp_path, outside):
    """A sweep's run folder swapped for a link between listing the sweep and opening the run (a race, or a
    hostile neighbour): it is opened relative to the open sweep folder without following the link, and
    nothing the link reaches is removed, even a folder that looks like highwaynet's."""
    (outside.parent / files.MARKER).write_text(json.dumps({"kind": "run", "id": "x", "written": ["precious.txt"]}))
    sweep = tmp_path / "sweep"
    files.claim(sweep, "sweep")
    (sweep / "run").symlink_to(outside.parent)
    fd = os.open(sweep, os.O_RDONLY)
    try:
        assert files._clear_folder(fd, "run") is False  # (what clear does with each folder it found listed)
    finally:
        os.close(fd)
    assert outside.read_text() == "the user's own\n" and (sweep / "run").is_symlink()


@pytest.mark.parametrize("same_file", [False, True])
def test_two_processes_writing_a_folder_at_once_both_list_every_file(tmp_path, same_file):
    """A run writing its folder while ``highwaynet report`` writes the report there (which needs no run lock:
    it writes files the run never does): each lists the files it writes in the folder's marker at once. Each
    update of the marker reads, adds and writes it again; unserialised, one process's names were lost (the
    folder then looked foreign: "X was not written by highwaynet"), or its temporary file, shared, was put
    in place half-written by the other (a damaged marker) or was missing (FileNotFoundError).

    ``same_file``: two reports of one run written at once write the same file through the same temporary
    (``NAME.tmp``); unserialised, one found the other's temporary in its place (FileExistsError) or gone."""
    import subprocess
    import sys
    import time

    from conftest import process_timeout

    import highwaynet

    files.claim(tmp_path, "run")
    name = "'report.html'" if same_file else "f'{sys.argv[2]}{i}'"
    script = ("import sys, time; from pathlib import Path; from highwaynet.training import files\n"
              "while time.time() < float(sys.argv[3]): time.sleep(0.001)\n"  # (both start at once, imports done)
              f"for i in range(300): files.write_text(Path(sys.argv[1]) / {name}, sys.argv[2] * 10000)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(highwaynet.__file__).parents[1])}
    start = str(time.time() + 5)
    writers = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path), who, start], env=env,
                                stderr=subprocess.PIPE, text=True) for who in ("run", "report")]
    errors = [writer.communicate(timeout=process_timeout(120))[1] for writer in writers]
    assert [writer.returncode for writer in writers] == [0, 0], errors
    listed = files.written(tmp_path)
    if same_file:
        assert (tmp_path / "report.html").read_text() in ("run" * 10000, "report" * 10000)
        assert not (tmp_path / "report.html.tmp").exists() and {"report.html", "report.html.tmp"} <= listed
    else:
        assert {f"{who}{i}" for who in ("run", "report") for i in range(300)} <= listed


def _marked(folder: Path, kind: str, *names: str) -> Path:
    """``folder`` marked as ``kind``, holding the files ``names``, listed as highwaynet's."""
    files.claim(folder, kind)
    for name in names:
        files.write_text(folder / name, "x")
    return folder


@pytest.mark.parametrize("removal", ["clear", "a sweep's run", "remove_written", "remove_stray_files"])
def test_a_removal_waits_for_the_marker_held_by_another(tmp_path, removal):
    """Clearing a folder (a run's, a sweep's runs'), or removing its written or stray files, holds its marker as
    an update does: otherwise a name another process listed meanwhile (``highwaynet report`` writing its page
    into a run started over) was lost with the marker written after, and the folder later refused as holding a
    file highwaynet did not write; or the marker's temporary of an update under way was removed under it."""
    import fcntl
    import threading

    folder = _marked(tmp_path / "run", "run", "a", "b")
    locked, expect = folder, lambda: not (folder / "a").exists()
    if removal == "clear":
        remove = lambda: files.clear(folder)  # noqa: E731
    elif removal == "remove_written":
        remove = lambda: files.remove_written(folder, {"a"})  # noqa: E731
    elif removal == "remove_stray_files":
        (folder / files.MARKER).with_name(files.MARKER + ".tmp").write_text("{}")  # an update's, under way
        remove, expect = (lambda: files.remove_stray_files(folder),  # noqa: E731
                          lambda: not (folder / (files.MARKER + ".tmp")).exists())
    else:
        sweep = _marked(tmp_path / "sweep", "sweep")
        files.make_folder(sweep / "run1")
        locked = _marked(sweep / "run1", "run", "a")
        remove, expect = lambda: files.clear(sweep), lambda: not (sweep / "run1").exists()  # noqa: E731
    done = threading.Event()
    worker = threading.Thread(target=lambda: (remove(), done.set()), daemon=True)
    fd = os.open(locked, os.O_RDONLY)  # (another open file: its flock excludes this process's others too)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        worker.start()
        assert not done.wait(0.5), "removed while another held the marker"
        assert not expect()
    finally:
        os.close(fd)
    worker.join(10)
    assert done.is_set() and expect()


def test_claiming_a_new_folder_waits_for_the_marker_held_by_another(tmp_path):
    """Two processes claiming one new folder at once (two runs started with the same --out): the second waits
    for the first's marker and takes it, rather than writing a marker of its own over it (two identities,
    and the names the first listed meanwhile lost)."""
    import fcntl
    import threading

    folder = tmp_path / "run"
    folder.mkdir()
    claimed: list[dict] = []
    worker = threading.Thread(target=lambda: claimed.append(files.claim(folder, "run")), daemon=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        worker.start()
        worker.join(0.5)
        assert worker.is_alive() and not (folder / files.MARKER).exists(), "marked while another held the marker"
        mine = files._new_marker("run", ["a"])  # (the other process's marker, and a file it listed)
        (folder / files.MARKER).write_text(json.dumps(mine))  # (as it would: written, not through our lock)
    finally:
        os.close(fd)
    worker.join(10)
    assert claimed == [mine] and files.written(folder) == {"a"}


def test_a_thread_holding_the_marker_may_clear_the_folder(tmp_path):
    """The marker's lock is taken again by the thread that holds it as held: an flock on a second descriptor of
    the folder waits for the first, held by the same thread, for ever."""
    import threading

    folder = _marked(tmp_path / "run", "run", "a")

    def clear_held():
        with files._marker_held(folder):
            files.clear(folder)
            files.write_text(folder / "b", "x")  # (an update of the marker, held already)

    worker = threading.Thread(target=clear_held, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "waited for its own lock"
    assert "b" in files.written(folder) and "a" not in files.written(folder) and not (folder / "a").exists()
