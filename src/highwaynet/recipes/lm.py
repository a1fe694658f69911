"""Recipe: a character- or word-level language model, RHN or LSTM, on a text corpus.

``highwaynet train lm --corpus tinyshakespeare --level char --model rhn --depth 4`` runs it;
``highwaynet generate RUN_DIR`` samples from the result.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from .._checks import check_path
from ..config import LMConfig
from ..data.corpora import UNK, Corpus, load_corpus
from ..models.lm import (
    CharAwareLanguageModel,
    LanguageModel,
    LSTMLanguageModel,
    RHNLanguageModel,
    count_parameters,
    sample_tokens,
)
from ..models.transformer import GATED, CausalTransformer
from ..nn import CharVocab
from ..training import LanguageModelTask, Trainer
from ..training.run_dir import load_best_weights, load_run_config, open_run, read_json, saved_config, write_text
from ..training.trainer import seed_everything

__all__ = ["LMConfig", "build_model", "load_trained", "run", "sample", "scale", "stream"]




def build_model(config: LMConfig, vocab: Sequence[str], device: str | torch.device | None = None) -> LanguageModel:
    """The model the config describes for a vocabulary (its words, in id order), initialised from
    ``config.train.seed``: an RHN or LSTM language model, reading words or (``input="chars"``) their
    characters."""
    seed_everything(config.train.seed)
    with torch.device(device or "cpu"):
        if config.input == "chars":
            chars = CharVocab.from_words(vocab)
            options: dict[str, Any] = {"highway": not config.char_mlp}
            if config.char_layers is not None:
                options["num_highway"] = config.char_layers
            return CharAwareLanguageModel(chars.encode(vocab), len(chars), config.hidden, config.layers,
                                          rnn=config.model, depth=config.depth, encoder=config.char_encoder,
                                          encoder_options=options, input_dropout=config.input_dropout,
                                          state_dropout=config.state_dropout,
                                          output_dropout=config.output_dropout)
        if config.model == "rhn":
            return RHNLanguageModel(len(vocab), config.hidden, config.layers, depth=config.depth,
                                    tie_weights=config.tie_weights, input_dropout=config.input_dropout,
                                    state_dropout=config.state_dropout, output_dropout=config.output_dropout,
                                    gate_bias=config.gate_bias)
        if config.model == "transformer":
            return CausalTransformer(len(vocab), config.hidden, config.layers, heads=config.heads, context=config.bptt,
                                     residual=config.residual, norm=config.norm, final_norm=config.final_norm,
                                     mlp_hidden=config.mlp_hidden, dropout=config.output_dropout,
                                     embed_dropout=config.input_dropout, tie_weights=config.tie_weights,
                                     gate_bias=config.gate_bias if config.residual in GATED else None)
        return LSTMLanguageModel(len(vocab), config.hidden, config.layers, tie_weights=config.tie_weights,
                                 input_dropout=config.input_dropout, output_dropout=config.output_dropout)


def parameters_for(config: LMConfig, vocab: Sequence[str], hidden: int, field: str = "hidden") -> int:
    """Parameters of the config's model with ``field`` (default: the state size) set to ``hidden``
    (built on the meta device: free)."""
    probe = LMConfig(**{**asdict(config), field: hidden})
    return count_parameters(build_model(probe, vocab, device="meta"))


def hidden_for_budget(config: LMConfig, vocab: Sequence[str], budget: int, field: str = "hidden") -> int:
    """The state size (or another size, ``field``: the Transformer's ``mlp_hidden``, say) whose model
    has the parameter count closest to ``budget``."""
    lo, hi = 1, 8192
    while lo < hi:  # the count grows with the size: the first size at or above the budget
        mid = (lo + hi) // 2
        if parameters_for(config, vocab, mid, field) < budget:
            lo = mid + 1
        else:
            hi = mid
    return min((max(1, lo - 1), lo), key=lambda h: abs(parameters_for(config, vocab, h, field) - budget))


def run(config: LMConfig, out: str | Path, *, resume: bool = False, restart: bool = False,
        data_dir: str | Path | None = None, download: bool = False, corpus: Corpus | None = None,
        max_time: float | None = None, log=None, progress: bool = True, gate_means: bool = False,
        write_sample: bool = True, test: bool = True, max_epochs: int | None = None) -> dict[str, Any]:
    """Train, evaluate on the test split, write ``results.json`` (and a generated sample) in ``out``.

    ``resume`` and ``restart`` as :func:`highwaynet.recipes.mlp.run`; ``max_time``: stop after the
    first epoch at which the training time reaches this many seconds, ``max_epochs``: after this many
    epochs, the schedule still set for ``config.train.epochs`` (both as :meth:`Trainer.fit`);
    ``gate_means``: each epoch's metrics hold every gate's mean on the validation split
    (``gate/NAME``, as :class:`~highwaynet.training.Trainer`'s option); ``write_sample=False`` leaves
    the generated sample out (a study of hundreds of runs: ``highwaynet generate`` samples any of them);
    ``test=False`` leaves the test split alone (a search's runs: nothing is chosen on it; ``"test"`` is
    then None)."""
    out = check_path("out", out)
    with open_run(out, "lm", config, resume=resume, restart=restart, device=config.train.device,
                  log=log) as saved:
        return _train(saved_config(LMConfig, saved, out), out, resume=resume, data_dir=data_dir, download=download,
                      corpus=corpus,
                      max_time=max_time, log=log, progress=progress, gate_means=gate_means, write_sample=write_sample,
                      test=test, max_epochs=max_epochs)


def _train(config: LMConfig, out: str | Path, *, resume: bool, data_dir: str | Path | None, download: bool,
           corpus: Corpus | None, max_time: float | None, log, progress: bool, gate_means: bool,
           write_sample: bool, test: bool, max_epochs: int | None = None) -> dict[str, Any]:
    start = time.perf_counter()
    corpus = corpus or load_corpus(config.corpus, config.level, data_dir, download=download,
                                   max_vocab=config.max_vocab)
    # The vocabulary in the run folder: generating text then needs no corpus (see load_trained).
    write_text(Path(out, "vocab.json"), json.dumps({"level": corpus.level, "vocab": corpus.vocab}))
    model = build_model(config, corpus.vocab)
    task = LanguageModelTask(corpus, config.batch_size, config.bptt, seed=config.train.seed,
                             eval_batch_size=config.eval_batch_size, steps_per_epoch=config.steps_per_epoch,
                             carry_state=config.model != "transformer", eval_windows=config.eval_windows)
    trainer = Trainer(model, task, config.train, out, log=log, progress=progress, gate_means=gate_means)
    history = trainer.fit(resume=resume, max_time=max_time, max_epochs=max_epochs)
    # Test with the best weights by validation loss, as is usual for language models.
    load_best_weights(model, out)
    tested = trainer.evaluate("test") if test else None
    results = {
        "model": config.model, "depth": config.depth if config.model == "rhn" else None, "layers": config.layers,
        "hidden": config.hidden, "parameters": count_parameters(model),
        "epochs": len(history), "best_val": min(m["val_loss"] for m in history), "final": history[-1],
        "test": tested, "train_seconds": round(sum(m["time"] for m in history), 1),
        "seconds": round(time.perf_counter() - start + trainer.earlier_seconds, 1), "device": str(trainer.device),
        "unigram_bits": corpus.unigram_entropy_bits("test"),
    }
    prompt = "\n" if config.level == "char" else "the"
    if write_sample:
        results["sample"] = sample(model, corpus, prompt, 300 if config.level == "char" else 80, 0.8, seed=0)
    write_text(Path(out, "results.json"), json.dumps(results, indent=2) + "\n")
    return results


def scale(summary: dict[str, Any], unit: str) -> str:
    """A language-model study's scale, for a sentence that states its result: the parameter budget, the
    steps, batch and window, the tokens (``unit``: ``"words"`` or ``"characters"``) trained on, and
    the seeds (``summary["config"]``: ``budget``, ``seeds`` and the models' ``base`` settings)."""
    config, base = summary["config"], summary["config"]["base"]
    steps = base.get("steps_per_epoch")
    if steps:
        steps *= base["train"]["epochs"]
        trained = (f"{steps:,} steps of {base['batch_size']} × {base['bptt']} {unit} "
                   f"({steps * base['batch_size'] * base['bptt']:,} {unit})")
    else:
        trained = f"{base['train']['epochs']} epochs of batch {base['batch_size']} × {base['bptt']} {unit}"
    seeds = len(config.get("seeds", [0]))
    return f"about {config['budget']:,} parameters, {trained}, {seeds} seed{'s' if seeds > 1 else ''}"


def sample(model: LanguageModel, corpus: Corpus, prompt: str, length: int, temperature: float,
           seed: int = 0) -> str:
    """``prompt`` followed by ``length`` sampled tokens, as text."""
    return prompt + "".join(stream(model, corpus, prompt, length, temperature, seed))


class _Never(torch.nn.Module):
    """A language model whose next-token logits never pick ``tokens`` (set to -inf): what sampling uses
    where a token is not text (a character-level model's ``<unk>``, which would print as five
    characters the corpus may never have had in a row)."""

    def __init__(self, model: LanguageModel, tokens: list[int]) -> None:
        super().__init__()
        self.model, self.tokens = model, tokens

    def forward(self, x: torch.Tensor, state: Any = None) -> tuple[torch.Tensor, Any]:
        logits, state = self.model(x, state)
        return logits.index_fill(-1, torch.tensor(self.tokens, device=logits.device), float("-inf")), state


def stream(model: LanguageModel, corpus: Corpus, prompt: str, length: int,
           temperature: float, seed: int = 0) -> Iterator[str]:
    """The text :func:`sample` adds after ``prompt``, piece by piece as each token is drawn (a word
    comes with the space or paragraph break before it), for a command that shows it as it comes. A
    character-level model draws characters only: never ``<unk>``, which stands for none."""
    previous = corpus.encode(prompt)[-1:].tolist()
    drawn = _Never(model, [corpus.index[UNK]]) if corpus.level == "char" and UNK in corpus.index else model
    for token in sample_tokens(drawn, corpus.encode(prompt), length, temperature,
                               torch.Generator().manual_seed(seed)):
        yield corpus.decode(previous + [token])[len(corpus.decode(previous)):] if corpus.level == "word" \
            else corpus.decode([token])
        previous = [token]


def load_trained(run_dir: str | Path, data_dir: str | Path | None = None,
                 ) -> tuple[LanguageModel, LMConfig, Corpus]:
    """The best weights of a trained language model, its config and its vocabulary as a
    :class:`Corpus` (with empty splits: the run folder's ``vocab.json``; for a run folder without
    one, written before it was kept, the corpus itself is loaded from ``data_dir``)."""
    run_dir = check_path("run_dir", run_dir)
    config = saved_config(LMConfig, load_run_config(run_dir, "lm")["config"], run_dir)
    saved = run_dir / "vocab.json"
    if saved.is_file() or saved.is_symlink():
        vocab = read_json(saved)
        if not (isinstance(vocab, dict) and vocab.get("level") in ("char", "word")
                and isinstance(vocab.get("vocab"), list) and all(isinstance(token, str) for token in vocab["vocab"])):
            raise ValueError(f"{saved} is not the vocabulary a language-model run writes ({{'level': 'char' or 'word', "
                             f"'vocab': [tokens]}}): it was damaged or edited; put back the file the run wrote")
        if vocab["level"] != config.level or len(set(vocab["vocab"])) != len(vocab["vocab"]):
            wrong = (f"its level is {vocab['level']!r}, the run's {config.level!r}" if vocab["level"] != config.level
                     else "it lists a token more than once")
            raise ValueError(f"{saved} is not the vocabulary this run wrote ({wrong}): it was edited or comes from "
                             f"another run; put back the file the run wrote")
        empty = torch.zeros(0, dtype=torch.long)
        corpus = Corpus(config.corpus, vocab["level"], vocab["vocab"], empty, empty, empty)
    else:
        corpus = load_corpus(config.corpus, config.level, data_dir, max_vocab=config.max_vocab)
    model = build_model(config, corpus.vocab)
    load_best_weights(model, run_dir)
    return model.eval(), config, corpus
