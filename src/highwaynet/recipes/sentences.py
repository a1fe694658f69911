"""Recipe: sentence classification with HBiLSTM, BiLSTM and Kim-CNN encoders (the HBiLSTM article).

One run trains one encoder on one task (one seed, or one cross-validation fold); a sweep runs
tasks x encoders x depths x seeds (or folds), skips finished runs, and reports mean ± std next to
Kim (2014)'s CNN-rand.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any, cast

import torch

from .._checks import check_path
from ..config import SentenceConfig, SweepConfig
from ..data.sentences import PAD, SENTENCE_TASKS, UNK, SentenceData, encode_words, load_sentences
from ..models.sentence import STACKED_ENCODERS, SentenceClassifier, load_word_vectors
from ..nn import CharVocab
from ..training import SentenceTask, Trainer, files
from ..training.progress import SweepProgress
from ..training.run_dir import (
    check_complete_summary,
    count,
    finish_sweep,
    flat_settings,
    held_by,
    load_best_weights,
    load_run_config,
    look_again,
    mean_std,
    open_run,
    read_json,
    run_once,
    saved_config,
    start_sweep,
    write_text,
)
from ..training.trainer import seed_everything
from .sentences_report import choose, write_choice_report, write_report

__all__ = ["LABEL_NAMES", "SentenceConfig", "SweepConfig", "build_model", "choose_setting", "predict", "run",
           "spell", "spelling", "sweep", "unseen_accuracy"]

#: Each named set's class names, in label order (what ``predict`` prints).
LABEL_NAMES = {
    "sst1": ["very negative", "negative", "neutral", "positive", "very positive"],
    "sst2": ["negative", "positive"],
    "mr": ["negative", "positive"],
    "subj": ["subjective", "objective"],
    "trec": ["description", "entity", "abbreviation", "human", "location", "numeric"],
}
CROSS_VALIDATED = tuple(t for t, files in SENTENCE_TASKS.items() if "all" in files)


def task_name(task: str) -> str:
    """How runs, tables and figures name ``task``: a known task as it is, a folder of the user's own
    set (``train``, ``test`` and maybe ``dev`` files) by the folder's name."""
    return task if task in SENTENCE_TASKS else Path(task).name




def spelling(vocab: list[str], num_words: int | None = None) -> CharVocab:
    """The characters of the training words (the first ``num_words`` of ``vocab``): a character that
    only validation or test words have reads as unknown, as it would in a sentence never seen."""
    return CharVocab.from_words(vocab[2:num_words])  # (<pad> and <unk> are spelt as markers alone)


def spell(char_vocab: CharVocab, words: list[str], length: int | None = None) -> torch.Tensor:
    """``(len(words), L)`` character ids of ``words``; ``<pad>`` (id 0) reads as nothing."""
    table = char_vocab.encode(words, length)
    if words and words[0] == "<pad>":
        table[0] = CharVocab.PAD
    return table


def build_model(config: SentenceConfig, vocab: list[str], num_classes: int,
                num_words: int | None = None) -> SentenceClassifier:
    """The classifier the config describes for ``vocab`` (the first ``num_words`` of which have word
    vectors: :attr:`SentenceData.num_words`), initialised from ``config.train.seed``."""
    seed_everything(config.train.seed)
    chars: dict[str, Any] = {}
    if config.word_features != "words":
        char_vocab = spelling(vocab, num_words)
        chars = {"word_chars": spell(char_vocab, vocab), "num_chars": len(char_vocab),
                 "char_encoder": config.char_encoder}
    model = SentenceClassifier(len(vocab), num_classes, encoder=config.encoder, embed_dim=config.embed_dim,
                               hidden_size=config.hidden, num_layers=config.layers, dropout=config.dropout,
                               resize=config.resize, gate_bias=config.gate_bias, embed_dropout=config.embed_dropout,
                               word_features=config.word_features, num_words=num_words, **chars)
    if config.vectors:
        load_word_vectors(config.vectors, vocab[:model.num_words], model.embedding)
    return model


def load_data(config: SentenceConfig, data_dir: str | Path | None, download: bool = False) -> SentenceData:
    # Folds and dev splits are drawn from seed 0, so that every seed sees the same split.
    return load_sentences(config.task, data_dir, fold=config.fold, min_count=config.min_count, download=download,
                          spellings=config.word_features != "words")


def unseen_accuracy(model: SentenceClassifier, data: SentenceData, device: torch.device) -> dict[str, float]:
    """Test accuracy on the sentences with a word the training split does not have, and how many."""
    from ..training.sentences import pad_batch

    sentences, labels = data.test
    picked = [i for i, ids in enumerate(sentences) if bool(((ids >= data.num_words) | (ids == 1)).any())]
    correct = 0
    model.eval()
    with torch.no_grad():
        for start in range(0, len(picked), 500):
            part = picked[start:start + 500]
            tokens, lengths = pad_batch([sentences[i] for i in part], model.min_length)
            predicted = model(tokens.to(device), lengths.to(device)).argmax(-1).cpu()
            correct += int((predicted == labels[part]).sum())
    return {"acc": correct / len(picked) if picked else float("nan"), "n": len(picked)}


def run(config: SentenceConfig, out: str | Path, *, resume: bool = False, restart: bool = False,
        data_dir: str | Path | None = None, download: bool = False, data: SentenceData | None = None, log=None,
        progress: bool = True) -> dict[str, Any]:
    """Train, test the best weights by validation accuracy, write ``results.json`` and ``vocab.json``
    (``resume`` and ``restart`` as :func:`highwaynet.recipes.mlp.run`)."""
    out = check_path("out", out)
    with open_run(out, "sentences", config, resume=resume, restart=restart, device=config.train.device,
                  log=log) as saved:
        return _train(saved_config(SentenceConfig, saved, out), out, resume=resume, data_dir=data_dir,
                      download=download, data=data,
                      log=log, progress=progress)


def _train(config: SentenceConfig, out: str | Path, *, resume: bool, data_dir: str | Path | None, download: bool,
           data: SentenceData | None, log, progress: bool) -> dict[str, Any]:
    start = time.perf_counter()
    data = data or load_data(config, data_dir, download)
    write_text(Path(out, "vocab.json"), json.dumps({"vocab": data.vocab, "num_classes": data.num_classes,
                                                    "num_words": data.num_words}))
    model = build_model(config, data.vocab, data.num_classes, data.num_words)
    task = SentenceTask(data, config.batch_size, seed=config.train.seed, min_length=model.min_length,
                        adversarial=config.adversarial)
    trainer = Trainer(model, task, config.train, out, log=log, progress=progress)
    history = trainer.fit(resume=resume)
    load_best_weights(model, out)
    results = {"task": task_name(config.task), "encoder": config.encoder, "layers": config.layers,
               "seed": config.train.seed, "fold": config.fold, "parameters": sum(p.numel() for p in model.parameters()),
               "best_val_acc": max(m["val_acc"] for m in history), "test": trainer.evaluate("test"),
               "test_unseen": unseen_accuracy(model, data, trainer.device), "word_features": config.word_features,
               "seconds": round(time.perf_counter() - start + trainer.earlier_seconds, 1),
               "device": str(trainer.device)}
    write_text(Path(out, "results.json"), json.dumps(results, indent=2) + "\n")
    return results


def load_trained(run_dir: str | Path) -> tuple[SentenceClassifier, SentenceConfig, list[str]]:
    run_dir = check_path("run_dir", run_dir)
    config = saved_config(SentenceConfig, load_run_config(run_dir, "sentences")["config"], run_dir)
    path = run_dir / "vocab.json"
    saved = read_json(path, "the run's vocabulary, written when it started")
    if not (isinstance(saved, dict) and isinstance(saved.get("vocab"), list)
            and isinstance(saved.get("num_classes"), int) and all(isinstance(word, str) for word in saved["vocab"])):
        raise ValueError(f"{path} is not the vocabulary a sentence run writes ({{'vocab': [words], 'num_classes': N, "
                         f"...}}): it was damaged or edited; put back the file the run wrote")
    wrong = _vocab_problem(saved)
    if wrong:
        raise ValueError(f"{path} is not the vocabulary this run wrote ({wrong}): it was edited or comes from another "
                         f"run; put back the file the run wrote")
    model = build_model(SentenceConfig(**{**asdict(config), "vectors": None}), saved["vocab"], saved["num_classes"],
                        saved.get("num_words"))
    load_best_weights(model, run_dir)
    return model.eval(), config, saved["vocab"]


def _vocab_problem(saved: dict[str, Any]) -> str | None:
    """What is wrong with a sentence run's ``vocab.json`` (its words, classes and words with vectors)
    beyond its kind: what :func:`~highwaynet.data.load_sentences` writes starts with the padding and
    the unknown word, lists each word once, and has at least two classes."""
    vocab, classes, words = saved["vocab"], saved["num_classes"], saved.get("num_words")
    if vocab[:2] != [PAD, UNK]:
        return f"its words do not start with {PAD!r} and {UNK!r}"
    if len(set(vocab)) != len(vocab):
        return "it lists a word more than once"
    if isinstance(classes, bool) or classes < 2:
        return f"its num_classes is {classes!r}, not a count of two classes or more"
    if words is not None and (not isinstance(words, int) or isinstance(words, bool) or not 2 <= words <= len(vocab)):
        return f"its num_words is {words!r}, not a count of its words"
    return None


@torch.no_grad()
def predict(run_dir: str | Path, sentences: list[str]) -> list[tuple[str, dict[str, float]]]:
    """``(label, {class name: probability})`` for each sentence (split on white space, as the training
    files are; a word missing from the vocabulary as typed is looked up lower-cased); the dictionary
    keeps the classes' order."""
    from ..training.sentences import pad_batch

    for number, sentence in enumerate(sentences, 1):
        if not sentence.split():
            raise ValueError(f"sentence {number} is empty: give each sentence as words, quoted "
                             f"(highwaynet predict RUN_DIR \"a sentence\" \"another\")")
    model, config, vocab = load_trained(run_dir)
    index = {w: i for i, w in enumerate(vocab)}
    if model.word_features != "words":  # a model that reads characters spells a word it has never seen
        new = list(dict.fromkeys(w for s in sentences for w in s.split() if w not in index and w.lower() not in index))
        index.update({w: len(vocab) + i for i, w in enumerate(new)})
        table = cast(torch.Tensor, model.word_chars)
        model.word_chars = torch.cat([table, spell(spelling(vocab, model.num_words), new, table.shape[1])])
    tokens, lengths = pad_batch([encode_words(s.split(), index, fold_case=True) for s in sentences],
                                model.min_length)
    if model.word_features == "words":  # (a word it holds no vector for reads as <unk>)
        tokens = torch.where(tokens < model.num_words, tokens, 1)
    probs = torch.softmax(model(tokens, lengths), dim=-1)
    names = LABEL_NAMES.get(config.task, [str(i) for i in range(probs.shape[1])])
    return [(names[int(p.argmax())], dict(zip(names, p.tolist(), strict=True))) for p in probs]


def sweep(config: SweepConfig, out: str | Path, *, resume: bool = False, restart: bool = False,
          data_dir: str | Path | None = None, download: bool = False, log=print, progress: bool = True,
          report_only: bool = False) -> dict[str, Any]:
    """Run every combination into ``out/<task>/<encoder>-L<layers>/<seed or fold>``; write the report.

    With ``report_only``, nothing is trained: the report covers the combinations already finished in
    ``out`` (for a sweep split over several processes, each running part of it with ``resume``).
    """
    out = check_path("out", out)
    if report_only and not out.is_dir():
        raise FileNotFoundError(f"{out} does not exist: --report-only reports the finished runs of a sweep folder")
    out, config = start_sweep(out, "sentences", config, resume=resume, restart=restart, report_only=report_only,
                              log=log)
    start = time.perf_counter()
    runs: list[tuple[Path, dict[str, Any] | None]] = []  # (each run's folder, its results: None, left to another)
    left_out: dict[Path, str | None] = {}  # (a report's: runs another process is writing)
    stacked = sum(len(config.layers) if e in STACKED_ENCODERS else 1 for e in config.encoders)
    sweep = SweepProgress(stacked * sum(config.folds if t in CROSS_VALIDATED else len(config.seeds)
                                        for t in config.tasks))
    for task in config.tasks:
        # Cross-validated sets: one run per fold (seed 0); the others: one run per seed.
        repeats = [("fold", f) for f in range(config.folds)] if task in CROSS_VALIDATED else \
            [("seed", s) for s in config.seeds]
        for kind, k in repeats:
            base = SentenceConfig(**{**asdict(config.base), "task": task, "fold": k if kind == "fold" else 0})
            base.train.seed = k if kind == "seed" else 0
            data = None
            for encoder in config.encoders:
                for layers in (config.layers if encoder in STACKED_ENCODERS else [1]):
                    run_dir = out / task_name(task) / f"{encoder}-L{layers}" / f"{kind}{k}"
                    if report_only and not (run_dir / "results.json").is_file():
                        if holder := held_by(run_dir):  # (being written: the report is partial; one not started, not)
                            left_out[run_dir] = holder
                        continue
                    one = SentenceConfig(**{**asdict(base), "encoder": encoder, "layers": layers})
                    if data is None and not (run_dir / "results.json").is_file():
                        data = load_data(base, data_dir, download)
                    runs.append((run_dir, run_once(
                        run_dir, partial(run, one, run_dir, data=data, log=log, progress=progress),
                        log, f"{task} {encoder} {layers} layer(s), {kind} {k}",
                        config=None if report_only else one, progress=None if report_only else sweep)))
    # A run another process of a split sweep was training (None) is looked at again: finished since, it is taken.
    found = look_again(sweep, log)
    runs = [(run_dir, result if result is not None else found.get(run_dir)) for run_dir, result in runs]
    results = [result for _, result in runs if result is not None]
    # The report gives each run's own settings (a finished run keeps those it was trained with).
    settings = [run_settings(load_run_config(run_dir)["config"]) for run_dir, result in runs if result is not None]
    if not results:
        raise RuntimeError(f"no finished runs in {out} match the sweep's tasks, encoders, layers and seeds"
                           + (f" ({count(len(sweep.held | left_out), 'run')} being written by another process: "
                              f"run the command again once it has ended)" if sweep.held or left_out else ""))
    summary = {"recipe": "sentences", "config": asdict(config), "runs": results,
               "seconds": round(time.perf_counter() - start, 1), "table": summarize(results),
               "settings": common_settings(settings)}
    return finish_sweep(out, summary, write_report, progress=sweep, log=log, left_out=left_out)


#: A sweep's label in a choice: words of letters, digits and ``-_.+:``, parted by one space.
_LABEL = re.compile(r"[\w.+:-]+(?: [\w.+:-]+)*")


def choose_setting(sweeps: dict[str, str | Path], out: str | Path, *, encoder: str = "hbilstm",
                   baseline: str = "cnn", data_dir: str | Path | None = None, download: bool = False
                   ) -> dict[str, Any]:
    """Choose ``encoder``'s setting on each task among finished sweeps (``sweeps``: a label for each
    sweep's folder) by mean best validation accuracy, and test it against ``baseline``'s, chosen the same
    way among the sweeps that ran it, paired by seed (:func:`~highwaynet.recipes.sentences_report.choose`);
    trains nothing. Writes ``out/summary.json``
    (with each task's split sizes, from its data, and the sweeps' folders) and ``out/report.md``.

    ``out`` is a folder of its own (:func:`~highwaynet.training.files.claim`, as an analysis): a
    sweep's or a run's folder, one holding files of the user's, or one holding another analysis (a run's
    gates' analysis or lesion study: :func:`~highwaynet.training.files.check_analysis_folder`) is refused, so
    that the choice never writes over what a sweep or an analysis wrote. Run again, it writes its two files
    again."""
    if not isinstance(sweeps, dict) or not sweeps:
        raise TypeError(f"sweeps must be a dict of a label for each finished sweep's folder, got {sweeps!r}")
    for label in sweeps:  # (a label names its sweep in the report's tables and the README's: markdown there)
        if not isinstance(label, str) or not _LABEL.fullmatch(label):
            raise ValueError(f"sweep label {label!r}: a label is letters, digits, '-', '_', '.', '+' or ':', words "
                             f"parted by one space (it names its sweep in the report's tables, where | and ` are "
                             f"markdown)")
    out = check_path("out", out)
    files.check_analysis_folder(out, "summary.json")  # (a gates' analysis or lesion study there is refused)
    folders = {label: check_path(f"sweeps[{label!r}]", folder) for label, folder in sweeps.items()}
    summaries = {label: _sweep_summary(folder) for label, folder in folders.items()}
    seen: dict[Path, str] = {}
    for label, folder in folders.items():  # (a sweep against itself is no choice: "a beats b by 0.0")
        first = seen.setdefault(folder.resolve(), label)
        if first != label:
            raise ValueError(f"sweeps {first!r} and {label!r} name one folder ({folders[first]}, {folder}): give each "
                             f"sweep's folder once")
    sizes = {}
    for task in dict.fromkeys(t for s in summaries.values() for t in s["config"]["tasks"]):
        data = load_sentences(task, data_dir, download=download)
        sizes[task_name(task)] = {split: len(getattr(data, split)[1]) for split in ("train", "val", "test")}
    summary = {**choose(summaries, encoder, baseline, sizes), "sweeps": {k: str(v) for k, v in sweeps.items()}}
    files.claim(out, "analysis", files.ANALYSES["summary.json"])
    write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    write_choice_report(out, summary)
    return summary


def _sweep_summary(folder: Path) -> dict[str, Any]:
    """A finished sentence sweep's ``summary.json``, checked for what a choice reads: its runs (each with
    its task, encoder, depth, seed, fold and accuracies), its settings and its tasks."""
    path = folder / "summary.json"
    summary = read_json(path, "a finished sweep's summary: run the sweep, or report what it finished with "
                              "--report-only")
    check_complete_summary(summary, path)  # (a split sweep's, written while another process trained some of its runs)
    try:
        runs, tasks = summary["runs"], summary["config"]["tasks"]
        shared, epochs = summary["settings"]["shared"], summary["config"]["base"]["train"]["epochs"]
        well_formed = (isinstance(runs, list) and isinstance(tasks, list) and isinstance(shared, dict)
                       and type(epochs) is int)
    except (KeyError, TypeError):
        well_formed = False
    if not well_formed:  # (checked by an if, not an assert: python -O strips asserts)
        raise ValueError(f"{path} is not a finished sentence sweep's summary (its runs, settings or tasks are "
                         f"missing or of another form): give the folder of a `highwaynet reproduce sentences` "
                         f"sweep, or put back the summary.json it wrote (--report-only writes it again)")
    seen: dict[tuple, int] = {}
    for i, r in enumerate(runs):
        fault = _run_fault(r)
        if not fault:
            first = seen.setdefault(tuple(r[k] for k in _RUN_KEYS), i)
            fault = f"repeats run {first} (the same task, encoder, depth, seed and fold)" if first != i else ""
        if fault:  # (a hand edit: named, rather than a crash deep in the choice or a choice made on it)
            name = (f" ({', '.join(str(r.get(k)) for k in _RUN_KEYS)})" if isinstance(r, dict) else "")
            raise ValueError(f"{path}: run {i}{name} {fault}: put back the summary.json its sweep wrote "
                             f"(--report-only writes it again), or give another sweep's folder")
    return summary


#: What tells a sentence sweep's runs apart: none is run twice.
_RUN_KEYS = ("task", "encoder", "layers", "seed", "fold")


def _run_fault(r: object) -> str:
    """What is wrong with a run's record in a sweep's summary, in words (``""``: nothing): a key of
    :data:`_RUN_KEYS` missing or of another type, an accuracy (``best_val_acc``, ``test.acc``) that is not a
    number from 0 to 1 (NaN included), ``seconds`` not a number."""
    if not isinstance(r, dict):
        return f"is {r!r}, not a run's record"
    for key in _RUN_KEYS:
        kind = str if key in ("task", "encoder") else int
        if key not in r:
            return f"lacks {key}"
        if type(r[key]) is not kind:
            return f"has {key} {r[key]!r}, not {'a string' if kind is str else 'a whole number'}"
    test = r.get("test")
    for key, value in (("best_val_acc", r.get("best_val_acc")), ("test.acc", test.get("acc") if isinstance(test, dict)
                                                                  else None), ("seconds", r.get("seconds"))):
        if value is None:
            return f"lacks {key}"
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return f"has {key} {value!r}, not a number"
        if key != "seconds" and not 0 <= value <= 1:  # (NaN fails both)
            return f"has {key} {value!r}, not an accuracy from 0 to 1"
    return ""


def run_settings(config: dict[str, Any]) -> dict[str, Any]:
    """A run's settings other than those a sweep varies by design (task, encoder, depth, fold, seed)
    and its device, flat: the Trainer's prefixed ``train.``."""
    varied = ("task", "encoder", "layers", "fold", "train.seed", "train.device")
    return {k: v for k, v in flat_settings(config).items() if k not in varied}


def common_settings(settings: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{"shared": {key: value}, "varying": {key: [values]}}`` over the runs' :func:`run_settings`."""
    values: dict[str, list[Any]] = {}
    for one in settings:
        for key, value in one.items():
            if value not in values.setdefault(key, []):
                values[key].append(value)
    return {"shared": {k: v[0] for k, v in values.items() if len(v) == 1},
            "varying": {k: v for k, v in values.items() if len(v) > 1}}


def summarize(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and std of test accuracy (%) per (task, encoder, layers)."""
    groups: dict[tuple, list[float]] = {}
    for r in results:
        groups.setdefault((r["task"], r["encoder"], r["layers"]), []).append(100 * r["test"]["acc"])
    return [{"task": t, "encoder": e, "layers": n, "runs": len(v), **mean_std(v)}
            for (t, e, n), v in sorted(groups.items())]
