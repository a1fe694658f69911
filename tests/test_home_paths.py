"""A path given in Python as ``~/...`` is the home folder's, as the command line's options and a shell make it:
every public function and class that takes a file or folder reads it through one helper
(:func:`highwaynet._checks.check_path`). Before, the Python API took ``"~/x"`` for a folder named ``~`` in the
working folder: files were not found, and a writer silently made ``./~/x``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from elmo_reference import options, write_model

from highwaynet import data, elmo, report
from highwaynet._checks import check_path
from highwaynet.config import DepthConfig, LMConfig, MLPConfig, SentenceConfig, SweepConfig, TrainConfig
from highwaynet.data.download import search_folders
from highwaynet.elmo.embed import embed_file
from highwaynet.models.sentence import load_word_vectors
from highwaynet.recipes import gates, lm, mlp, sentences
from highwaynet.training import ClassificationTask, Trainer, files, read_metrics
from highwaynet.training import run_dir as runs
from highwaynet.training.checkpoint import read_checkpoint

QUIET = {"log": lambda line: None, "progress": False}
TRAIN = TrainConfig(epochs=1, device="cpu")


def _mlp_config() -> MLPConfig:
    return MLPConfig(data="digits", depth=2, width=8, train=TRAIN)


def _write_sentences(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["1 a good film", "0 a bad film", "1 good fun", "0 dull and bad", "1 a fine cast", "0 bad acting"] * 3
    (folder / "train").write_text("\n".join(lines) + "\n")
    (folder / "test").write_text("1 good film\n0 bad film\n")
    return folder


def _write_corpus(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid", "test"):
        (folder / f"{split}.txt").write_text("the cat sat on the mat\nthe dog sat on the log\n" * 20)
    return folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    """One tiny run of each recipe the readers read back (in folders of absolute paths)."""
    where = tmp_path_factory.mktemp("trained")
    mlp.run(_mlp_config(), where / "mlp", **QUIET)
    sentences.run(SentenceConfig(task=str(_write_sentences(where / "sentences-data")), encoder="cnn",
                                 embed_dim=8, train=TRAIN), where / "sentences", **QUIET)
    lm.run(LMConfig(corpus=str(_write_corpus(where / "corpus")), level="word", model="lstm", depth=1, hidden=8,
                    batch_size=4, bptt=4, steps_per_epoch=2, eval_batch_size=4, train=TRAIN),
           where / "lm", write_sample=False, **QUIET)
    return {name: where / name for name in ("mlp", "sentences", "lm")}


def _copy(trained: dict[str, Path], name: str, home: Path) -> None:
    shutil.copytree(trained[name], home / name)


def _elmo_files(home: Path) -> dict:
    opts = options(layers=1, projection=4, cells=8, highway=1)
    write_model(home / "m", opts)
    return opts


def _bilm() -> elmo.ELMoBiLM:
    return elmo.ELMoBiLM(4, 8, 1, filters=((1, 4), (2, 4)), num_highway=1, char_dim=4)


# (each: what it does under the home folder, given "~/..."; it asserts what it read or wrote there)

def _read_options(home, trained):
    opts = _elmo_files(home)
    assert elmo.read_options("~/m/options.json") == elmo.read_options(opts)


def _read_weights(home, trained):
    opts = _elmo_files(home)
    assert elmo.read_weights("~/m/weights.hdf5", elmo.read_options(opts))


def _bilm_from_files(home, trained):
    _elmo_files(home)
    assert elmo.ELMoBiLM.from_files("~/m/options.json", "~/m/weights.hdf5").projection_dim == 4


def _bilm_from_options(home, trained):
    _elmo_files(home)
    assert elmo.ELMoBiLM.from_options("~/m/options.json").projection_dim == 4


def _elmo_from_files(home, trained):
    _elmo_files(home)
    assert elmo.ELMo.from_files("~/m/options.json", "~/m/weights.hdf5").output_size == 8


def _save_files(home, trained):
    assert _bilm().save_files("~/saved") == (home / "saved" / "options.json", home / "saved" / "weights.hdf5")
    assert elmo.ELMoBiLM.from_files(home / "saved" / "options.json", home / "saved" / "weights.hdf5")


def _download_model(home, trained):
    for name in ("options.json", "weights.hdf5"):
        (home / "data" / "seqvec").mkdir(parents=True, exist_ok=True)
        (home / "data" / "seqvec" / name).write_text("{}")
    found = elmo.download_model("seqvec", "~/data")
    assert found == (home / "data" / "seqvec" / "options.json", home / "data" / "seqvec" / "weights.hdf5")


def _embed_file(home, trained):
    _elmo_files(home)
    (home / "in.txt").write_text("the cat sat\n")
    out = embed_file("~/m/options.json", "~/m/weights.hdf5", "~/in.txt", "~/out.hdf5", device="cpu",
                     progress=False, say=lambda line: None)
    assert out == home / "out.hdf5" and out.is_file()


def _load_corpus_folder(home, trained):
    _write_corpus(home / "corpus")
    assert data.load_corpus("~/corpus", "word").vocab


def _load_digits(home, trained):
    (home / "data").mkdir()
    assert data.load_digits("~/data").num_classes == 10


def _load_image_data(home, trained):
    (home / "data").mkdir()
    assert data.load_image_data("digits", "~/data").num_classes == 10


def _load_sentences(home, trained):
    _write_sentences(home / "sentences")
    (home / "data").mkdir()
    assert data.load_sentences("~/sentences", "~/data").num_classes == 2


def _read_idx(home, trained):
    (home / "x.idx").write_bytes(bytes([0, 0, 8, 1, 0, 0, 0, 3, 7, 8, 9]))
    assert data.read_idx("~/x.idx").tolist() == [7, 8, 9]


def _read_labelled(home, trained):
    (home / "s.txt").write_text("1 a b\n0 c\n")
    assert data.read_labelled("~/s.txt") == [(1, ["a", "b"]), (0, ["c"])]


def _search_folders(home, trained):
    (home / "data").mkdir()
    assert search_folders("~/data")[0] == home / "data"


def _load_word_vectors(home, trained):
    (home / "vectors.txt").write_text("film 0.5 -1.0\n")
    assert load_word_vectors("~/vectors.txt", ["<pad>", "film"], torch.nn.Embedding(2, 2)) == 1


def _sweep_config(home, trained):
    _write_sentences(home / "sentences")
    assert SweepConfig(tasks=["~/sentences"]).tasks == ["~/sentences"]


def _trainer(home, trained):
    digits = data.load_digits(max_train=64)
    model = mlp.build_model(_mlp_config(), digits)
    Trainer(model, ClassificationTask(digits, batch_size=32), TRAIN, "~/run", **QUIET).fit()
    assert (home / "run" / "metrics.jsonl").is_file()


def _read_metrics(home, trained):
    _copy(trained, "mlp", home)
    assert read_metrics("~/mlp")


def _run_dir_readers(home, trained):
    _copy(trained, "mlp", home)
    assert runs.load_run_config("~/mlp", "mlp")["recipe"] == "mlp"
    assert runs.read_json("~/mlp/config.json")["recipe"] == "mlp"
    assert runs.read_results("~/mlp") is not None and runs.finished_an_epoch("~/mlp")
    runs.load_best_weights(mlp.load_trained("~/mlp")[0], "~/mlp")
    assert read_checkpoint("~/mlp/checkpoint.pt", "~/mlp/checkpoint.prev.pt")["epoch"] == 1


def _open_run(home, trained):
    with runs.open_run("~/run", "mlp", _mlp_config(), log=lambda line: None) as config:
        assert config["depth"] == 2
    assert (home / "run" / "config.json").is_file()


def _start_sweep(home, trained):
    folder, _ = runs.start_sweep("~/sweep", "depth", DepthConfig(), log=lambda line: None)
    assert folder == home / "sweep" and (home / "sweep" / "sweep.json").is_file()


def _files(home, trained):
    files.claim("~/own", "run")
    files.make_folder("~/own/sub")
    files.write_text("~/own/a.txt", "a")
    files.append_line("~/own/b.txt", "b")
    files.save_torch({"x": 1}, "~/own/c.pt")
    assert files.read_regular("~/own", "a.txt") == b"a" and files.marker("~/own")["kind"] == "run"
    assert {"a.txt", "b.txt", "c.pt", "sub"} <= files.written("~/own") and files.read_marker("~/own")[0]
    assert files.remove_written("~/own", {"a.txt"}) == ["a.txt"]
    files.clear("~/own")
    assert not (home / "own" / "b.txt").exists()


def _mlp_run(home, trained):
    (home / "data").mkdir()
    mlp.run(_mlp_config(), "~/run", data_dir="~/data", **QUIET)
    assert (home / "run" / "results.json").is_file()


def _gates(home, trained):
    _copy(trained, "mlp", home)
    gates.analyze_gates("~/mlp", "~/gates")
    gates.lesion_layers("~/mlp")
    assert (home / "gates" / "gates.json").is_file() and (home / "mlp" / "lesion" / "lesion.json").is_file()


def _sentences_run(home, trained):
    _write_sentences(home / "sentences")
    sentences.run(SentenceConfig(task="~/sentences", encoder="cnn", embed_dim=8, train=TRAIN), "~/run", **QUIET)
    assert (home / "run" / "vocab.json").is_file()


def _sentences_predict(home, trained):
    _copy(trained, "sentences", home)
    assert len(sentences.predict("~/sentences", ["good film"])) == 1


def _lm_load_trained(home, trained):
    _copy(trained, "lm", home)
    assert lm.load_trained("~/lm")[2].vocab


def _write_html(home, trained):
    _copy(trained, "mlp", home)
    assert report.write_html("~/mlp") == home / "mlp" / "report.html"


ENTRY_POINTS = [
    _read_options, _read_weights, _bilm_from_files, _bilm_from_options, _elmo_from_files, _save_files,
    _download_model, _embed_file, _load_corpus_folder, _load_digits, _load_image_data, _load_sentences, _read_idx,
    _read_labelled, _search_folders, _load_word_vectors, _sweep_config, _trainer, _read_metrics, _run_dir_readers,
    _open_run, _start_sweep, _files, _mlp_run, _gates, _sentences_run, _sentences_predict, _lm_load_trained,
    _write_html,
]


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=lambda f: f.__name__.strip("_"))
def test_a_path_given_as_tilde_is_the_home_folders(entry, trained, tmp_path, monkeypatch):
    home, working = tmp_path / "home", tmp_path / "working"
    home.mkdir()
    working.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(working)
    entry(home, trained)
    assert not (working / "~").exists() and list(working.iterdir()) == []


@pytest.mark.parametrize("value", [3, None, b"~/x", ["~/x"]])
def test_a_path_that_is_not_one_is_refused_by_name(value):
    with pytest.raises(TypeError, match="run_dir must be a path"):
        check_path("run_dir", value)
    with pytest.raises(TypeError, match="folder must be a path"):
        _bilm().save_files(value)


def test_the_check_expands_the_home_folder_once_and_leaves_other_paths_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert check_path("p", "~/a/b") == tmp_path / "a" / "b" and check_path("p", Path("~")) == tmp_path
    assert check_path("p", "a/~/b") == Path("a/~/b") and check_path("p", "/x/~") == Path("/x/~")
    assert check_path("p", "x") == Path("x")  # (a relative path stays relative)
