"""The public API fuzzed (Hypothesis): every public constructor, ``forward`` and function, called with
one argument made wrong (a wrong type, a bool or a string where a size is meant, NaN and infinity, a
tensor of another dtype, with a dimension more or less, or an empty one, non-finite values, ids out
of the vocabulary), either works (and then gives finite outputs for finite inputs) or raises a
``TypeError`` or ``ValueError`` (an ``IndexError`` for an index out of range) that highwaynet itself
raises, whose message names an argument: never an error from deep inside torch or Python.

The public API is enumerated from the packages' ``__all__`` (:func:`public_api`): a new public class or
function is fuzzed once it has a valid example in :data:`EXAMPLES`, and
:func:`test_every_public_name_has_an_example` fails until it has one. Each example's arguments are
mutated from its signature, so a new argument is fuzzed without editing this file.

Derandomized (the same examples every run, so that CI is repeatable); ``HYPOTHESIS_PROFILE=explore``
draws new ones.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import re
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch
from elmo_reference import options as elmo_options  # noqa: E402
from elmo_reference import write_model  # noqa: E402
from torch import Tensor, nn

import highwaynet
from highwaynet import analysis, data, elmo, functional, kernels, models
from highwaynet import nn as hnn
from highwaynet.data import DataNotFoundError

hypothesis = pytest.importorskip("hypothesis", reason="the dev extra installs Hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

settings.register_profile("api-ci", max_examples=12, deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors])
settings.register_profile("api-explore", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors])
PROFILE = "api-explore" if os.environ.get("HYPOTHESIS_PROFILE") == "explore" else "api-ci"

PACKAGE = Path(highwaynet.__file__).resolve().parent
FOLDER = Path("(set by the fuzz_data fixture, below)")  # the small data files the data examples read

# -- the examples: one valid call of each public name ----------------------------------------------


@dataclass
class Example:
    """A valid call: ``target(**kwargs())`` (for a module class, its construction), then, for a module,
    ``module(**forward(module))``. (A target that needs a context, a context manager entered or an
    instance's method, is a function below that wraps it with the same argument names.)"""

    target: Callable[..., Any]
    kwargs: Callable[[], dict[str, Any]]
    forward: Callable[[nn.Module], dict[str, Any]] | None = None
    # outcomes that are not errors: a loader that finds no data says so (DataNotFoundError)
    documented: tuple[type[BaseException], ...] = ()


def _randn(*shape: int) -> Tensor:
    return torch.randn(*shape)


def _ids(high: int, *shape: int, low: int = 0) -> Tensor:
    return torch.randint(low, high, shape)


VOCAB = hnn.CharVocab.from_words(["the", "cat", "sat", "on", "a", "mat"])
WORD_CHARS = VOCAB.encode(["<unk>", "the", "cat", "sat", "on", "a", "mat"])  # (7, 5)


def _highway_net() -> nn.Module:
    return hnn.Highway(4, 2)


def _lesion(model: nn.Module, layers: Any) -> None:
    with analysis.lesion(model, layers):
        model(torch.randn(2, 4))


def _record_gates(model: nn.Module, device: Any = "cpu") -> Tensor:
    with analysis.record_gates(model, device) as record:
        model(torch.randn(2, 4))
    return record.mean_per_gate()


def _gate_means(model: nn.Module) -> dict[str, float]:
    with analysis.gate_means(model) as means:
        model(torch.randn(2, 4))
    return means


def _gated_residual(sublayer: Any, dim: Any, kind: Any = "highway", gate_bias: Any = None, gate_reads: Any = "stream",
                    device: Any = None, dtype: Any = None) -> nn.Module:
    with warnings.catch_warnings():  # (deprecated: Residual with a combiner; still checked until it goes)
        warnings.simplefilter("ignore", DeprecationWarning)
        return hnn.GatedResidual(sublayer, dim, kind=kind, gate_bias=gate_bias, gate_reads=gate_reads, device=device,
                                 dtype=dtype)


_gated_residual.forward = hnn.GatedResidual.forward  # type: ignore[attr-defined]  # (its forward's names)


def _explain(model: nn.Module, x: Any) -> Any:
    return kernels.explain(model, x)


TANH = kernels.gating.Activation.TANH


def _encode(words: Any, length: Any = None) -> Tensor:
    return VOCAB.encode(words, length)


def _crop_flip(x: Any, padding: Any = 2, flip: Any = 0.5) -> Tensor:
    return data.RandomCropFlip(padding, flip)(x)


def _corpus() -> data.Corpus:
    return data.load_corpus(str(FOLDER / "corpus"), "char")


def _corpus_encode(text: Any) -> Tensor:
    return _corpus().encode(text)


def _corpus_decode(ids: Any) -> str:
    return _corpus().decode(ids)


def _no_data(*args: Any, **kwargs: Any) -> Any:
    raise DataNotFoundError("(the fuzz test lets no image loader read its files)")


def _bilm() -> nn.Module:
    return elmo.ELMoBiLM(4, 8, 1, filters=((1, 4), (2, 4)), num_highway=1, char_dim=4)


def _char_ids() -> Tensor:
    return elmo.batch_to_ids([["the", "cat"], ["a"]])


def _elmo_files() -> tuple[Path, Path]:
    return FOLDER / "elmo" / "options.json", FOLDER / "elmo" / "weights.hdf5"


def _image_settings() -> dict[str, Any]:
    return {"data_dir": str(FOLDER), "split_seed": 0, "max_train": 100}

EXAMPLES: dict[str, list[Example]] = {
    # layers
    "Highway": [Example(hnn.Highway, lambda: {"dim": 4, "num_layers": 2}, lambda m: {"x": _randn(3, 4)})],
    "HighwayConv1d": [Example(hnn.HighwayConv1d, lambda: {"channels": 4, "kernel_size": 3},
                              lambda m: {"x": _randn(2, 4, 5)})],
    "HighwayConv2d": [Example(hnn.HighwayConv2d, lambda: {"channels": 4, "kernel_size": 2, "dilation": 2},
                              lambda m: {"x": _randn(2, 4, 5, 5)})],
    "RHN": [Example(hnn.RHN, lambda: {"input_size": 3, "hidden_size": 4, "num_layers": 2, "depth": 2},
                    lambda m: {"input": _randn(5, 2, 3), "state": torch.zeros(2, 2, 4),
                               "lengths": torch.tensor([5, 3])}),
            Example(hnn.RHN, lambda: {"input_size": 3, "hidden_size": 4, "depth": 2, "bidirectional": True,
                                      "batch_first": True},
                    lambda m: {"input": _randn(2, 5, 3), "lengths": torch.tensor([5, 3])})],
    "RHNCell": [Example(hnn.RHNCell, lambda: {"input_size": 3, "hidden_size": 4, "depth": 2},
                        lambda m: {"input": _randn(2, 3), "state": torch.zeros(2, 4)})],
    "HighwayLSTM": [Example(hnn.HighwayLSTM, lambda: {"input_size": 3, "hidden_size": 4, "num_layers": 2},
                            lambda m: {"input": _randn(5, 2, 3), "state": (torch.zeros(4, 2, 4), torch.zeros(4, 2, 4)),
                                       "lengths": torch.tensor([5, 3])})],
    "HighwayLSTMBlock": [Example(hnn.HighwayLSTMBlock, lambda: {"input_size": 3, "hidden_size": 4},
                                 lambda m: {"x": _randn(2, 5, 3), "lengths": torch.tensor([5, 3]),
                                            "state": (torch.zeros(2, 2, 4), torch.zeros(2, 2, 4))})],
    "Projection": [Example(hnn.Projection, lambda: {"in_features": 4, "out_features": 6},
                           lambda m: {"input": _randn(3, 4)})],
    "ZeroPad": [Example(hnn.ZeroPad, lambda: {"in_features": 4, "out_features": 6}, lambda m: {"x": _randn(3, 4)})],
    "TransformGate": [Example(hnn.TransformGate, lambda: {"carry": "coupled"},
                              lambda m: {"h": _randn(3, 4), "t_logits": _randn(3, 4), "x": _randn(3, 4)})],
    "BranchGate": [Example(hnn.BranchGate, dict, lambda m: {"branch": _randn(3, 4), "x": _randn(3, 4),
                                                            "scale": _randn(3, 1)})],
    "Gate": [Example(hnn.Gate, dict)],  # (the base class: its forward is its subclasses')
    "Residual": [Example(hnn.Residual, lambda: {"sublayer": nn.Linear(4, 4), "combine": hnn.HighwayGate(4)},
                         lambda m: {"x": _randn(2, 3, 4)})],
    "Sum": [Example(hnn.Sum, dict, lambda m: {"branch": _randn(3, 4), "x": _randn(3, 4)})],
    "FixedGate": [Example(hnn.FixedGate, lambda: {"bias": -1.0},
                          lambda m: {"branch": _randn(3, 4), "x": _randn(3, 4)})],
    "ReZero": [Example(hnn.ReZero, lambda: {"init": 0.5}, lambda m: {"branch": _randn(3, 4), "x": _randn(3, 4)})],
    "LayerScale": [Example(hnn.LayerScale, lambda: {"dim": 4, "init": 0.1},
                           lambda m: {"branch": _randn(3, 4), "x": _randn(3, 4)})],
    "DeepNormSum": [Example(hnn.DeepNormSum, lambda: {"alpha": 2.0},
                            lambda m: {"branch": _randn(3, 4), "x": _randn(3, 4)})],
    "HighwayGate": [Example(hnn.HighwayGate, lambda: {"dim": 4, "bias": -2.0, "reads": "both"},
                            lambda m: {"branch": _randn(3, 4), "x": _randn(3, 4)})],
    "GRUGate": [Example(hnn.GRUGate, lambda: {"dim": 4, "bias": -2.0, "relu": True},
                        lambda m: {"branch": _randn(3, 4), "x": _randn(3, 4)})],
    **{name: [Example(getattr(hnn, name), lambda: {"num_layers": 4})]
       for name in ("deepnorm_alpha", "deepnorm_beta", "layerscale_init")},
    "GatedResidual": [Example(_gated_residual, lambda: {"sublayer": nn.Linear(4, 4), "dim": 4},
                              lambda m: {"x": _randn(2, 3, 4)}),
                      Example(_gated_residual, lambda: {"sublayer": nn.Linear(4, 4), "dim": 4, "kind": "gtrxl",
                                                          "gate_bias": -1.0}, lambda m: {"x": _randn(2, 3, 4)})],
    "GatedResidualNetwork": [Example(hnn.GatedResidualNetwork, lambda: {"input_size": 4, "hidden_size": 5,
                                                                        "context_size": 2},
                                     lambda m: {"a": _randn(3, 4), "context": _randn(3, 2)})],
    "CharCNNHighway": [Example(hnn.CharCNNHighway, lambda: {"num_chars": len(VOCAB), "filters": ((1, 4), (2, 4))},
                               lambda m: {"chars": VOCAB.encode(["the", "mat", "x"])})],
    "CharVocab": [Example(hnn.CharVocab, lambda: {"chars": "abc", "max_word_length": 6}),
                  Example(hnn.CharVocab.from_words, lambda: {"words": ["ab", "c"], "min_count": 1}),
                  Example(hnn.CharVocab.from_state_dict, lambda: {"state": VOCAB.state_dict()}),
                  Example(_encode, lambda: {"words": ["the", "cat"], "length": 4})],
    "make_resize": [Example(hnn.make_resize, lambda: {"kind": "zeropad", "in_features": 4, "out_features": 6})],
    # the gate maths
    "highway_combine": [Example(functional.highway_combine,
                                lambda: {"t": torch.rand(3, 4), "h": _randn(3, 4), "x": _randn(3, 4)})],
    "highway_combine_independent": [Example(functional.highway_combine_independent,
                                            lambda: {"t": torch.rand(3, 4), "c": torch.rand(3, 4), "h": _randn(3, 4),
                                                     "x": _randn(3, 4)})],
    "split_halves": [Example(functional.split_halves, lambda: {"z": _randn(3, 4), "parts": 2, "dim": -1})],
    "get_activation": [Example(functional.get_activation, lambda: {"activation": "tanh"})],
    # analysis
    "gate_modules": [Example(analysis.gate_modules, lambda: {"model": _highway_net()})],
    "lesion": [Example(_lesion, lambda: {"model": _highway_net(), "layers": [0, "gates.1"]})],
    "gate_means": [Example(_gate_means, lambda: {"model": _highway_net()})],
    "record_gates": [Example(_record_gates, lambda: {"model": _highway_net(), "device": "cpu"})],
    "explain": [Example(_explain, lambda: {"model": _highway_net(), "x": _randn(2, 4)})],
    # the kernels' functions (highwaynet.kernels)
    "gate_forward": [Example(kernels.gate_forward, lambda: {"z": _randn(3, 8), "x": _randn(3, 4), "code": TANH,
                                                            "keep_activations": False, "out": torch.empty(3, 4)})],
    "gate_backward": [Example(kernels.gate_backward, lambda: {"dy": _randn(3, 4), "z": _randn(3, 8), "x": _randn(3, 4),
                                                              "code": TANH, "grad_z": torch.empty(3, 8),
                                                              "bias_grad": True, "activated": False})],
    "highway_layer": [Example(kernels.highway_layer, lambda: {"x": _randn(2, 3, 4), "weight": _randn(8, 4),
                                                              "bias": _randn(8), "code": TANH})],
    "rhn_recurrence": [Example(kernels.rhn_recurrence, lambda: {"x_proj": _randn(5, 2, 8), "s0": torch.zeros(2, 4),
                                                                "weights": [_randn(8, 4), _randn(8, 4)],
                                                                "biases": [_randn(8), _randn(8)],
                                                                "mask": torch.ones(2, 4)})],
    "lstmp_recurrence": [Example(kernels.lstmp_recurrence,
                                 lambda: {"gates": _randn(4, 2, 20), "weight_hh": _randn(20, 3),
                                          "weight_proj": _randn(3, 5), "h0": torch.zeros(2, 3), "c0": torch.zeros(2, 5),
                                          "lengths": torch.tensor([4, 2]), "cell_clip": 3.0, "proj_clip": 2.0,
                                          "overwrite_gates": False})],
    # models
    "HighwayMLP": [Example(models.HighwayMLP, lambda: {"in_features": 12, "num_classes": 3, "depth": 2, "width": 5},
                           lambda m: {"x": _randn(2, 3, 4)})],
    "PlainMLP": [Example(models.PlainMLP, lambda: {"in_features": 12, "num_classes": 3, "depth": 2, "width": 5},
                         lambda m: {"x": _randn(2, 3, 4)})],
    "HighwayCNN": [Example(models.HighwayCNN, lambda: {"in_channels": 1, "num_classes": 3, "channels": (4,),
                                                       "layers_per_stage": 1}, lambda m: {"x": _randn(2, 1, 4, 4)})],
    "RHNLanguageModel": [Example(models.RHNLanguageModel, lambda: {"vocab_size": 9, "hidden_size": 4, "depth": 2},
                                 lambda m: {"tokens": _ids(9, 5, 2), "state": torch.zeros(1, 2, 4)})],
    "LSTMLanguageModel": [Example(models.LSTMLanguageModel, lambda: {"vocab_size": 9, "hidden_size": 4},
                                  lambda m: {"tokens": _ids(9, 5, 2),
                                             "state": (torch.zeros(1, 2, 4), torch.zeros(1, 2, 4))})],
    "CharAwareLanguageModel": [Example(models.CharAwareLanguageModel,
                                       lambda: {"word_chars": WORD_CHARS.clone(), "num_chars": len(VOCAB),
                                                "hidden_size": 4, "num_layers": 1, "encoder": "compact"},
                                       lambda m: {"tokens": _ids(7, 4, 2)})],
    "CausalTransformer": [Example(models.CausalTransformer, lambda: {"vocab_size": 9, "dim": 8, "num_layers": 1,
                                                                     "heads": 2, "context": 8, "residual": "highway"},
                                  lambda m: {"tokens": _ids(9, 5, 2), "state": _ids(9, 3, 2)})],
    "SentenceClassifier": [
        Example(models.SentenceClassifier, lambda: {"vocab_size": 9, "num_classes": 3, "embed_dim": 6, "hidden_size": 4,
                                                    "num_layers": 2},
                lambda m: {"tokens": _ids(9, 2, 6, low=1), "lengths": torch.tensor([6, 4])}),
        Example(models.SentenceClassifier, lambda: {"vocab_size": 7, "num_classes": 3, "embed_dim": 6,
                                                    "encoder": "cnn-highway", "feature_maps": 4,
                                                    "word_features": "words+chars", "word_chars": WORD_CHARS.clone(),
                                                    "num_chars": len(VOCAB)},
                lambda m: {"tokens": _ids(7, 2, 6, low=1), "lengths": torch.tensor([6, 5])})],
    # data
    "RandomCropFlip": [Example(_crop_flip, lambda: {"x": _randn(2, 1, 5, 5), "padding": 2, "flip": 0.5})],
    "load_corpus": [Example(data.load_corpus, lambda: {"name": str(FOLDER / "corpus"), "level": "word",
                                                       "max_vocab": 50, "min_count": 1})],
    "Corpus": [Example(_corpus_encode, lambda: {"text": "the cat"}),
               Example(_corpus_decode, lambda: {"ids": torch.tensor([1, 2, 3])})],
    "tokenize_words": [Example(data.tokenize_words, lambda: {"text": "The cat.\n\nIt sat."})],
    "load_sentences": [Example(data.load_sentences, lambda: {"task": str(FOLDER / "sentences"), "fold": 0, "folds": 10,
                                                             "seed": 0, "min_count": 1, "dev_fraction": 0.2})],
    "read_labelled": [Example(data.read_labelled, lambda: {"path": FOLDER / "sentences" / "train",
                                                           "encoding": "utf-8"}, documented=(FileNotFoundError,))],
    "encode_words": [Example(data.encode_words, lambda: {"words": ["the", "cat"],
                                                         "index": {"<pad>": 0, "<unk>": 1, "the": 2}})],
    "read_idx": [Example(data.read_idx, lambda: {"path": FOLDER / "labels.idx"}, documented=(FileNotFoundError,))],
    **{name: [Example(getattr(data, name), _image_settings, documented=(DataNotFoundError,))]
       for name in ("load_digits", "load_mnist5k", "load_fashion_mnist", "load_mnist")},
    "load_image_data": [Example(data.load_image_data, lambda: {"name": "digits", **_image_settings()},
                                documented=(DataNotFoundError,))],
    # ELMo (small bilm-tf files written by the fuzz_data fixture; nothing is downloaded)
    "batch_to_ids": [Example(elmo.batch_to_ids, lambda: {"sentences": [["the", "cat"], ["a"]], "max_characters": 50})],
    "ELMoBiLM": [Example(elmo.ELMoBiLM, lambda: {"projection_dim": 4, "cell_dim": 8, "num_layers": 1,
                                                 "filters": ((1, 4), (2, 4)), "num_highway": 1, "char_dim": 4,
                                                 "cell_clip": 3.0, "proj_clip": 3.0},
                         lambda m: {"ids": _char_ids()})],
    "ELMo": [Example(elmo.ELMo, lambda: {"bilm": _bilm(), "num_outputs": 2, "dropout": 0.1, "layer_norm": True},
                     lambda m: {"ids": _char_ids()})],
    "ScalarMix": [Example(elmo.ScalarMix, lambda: {"num_layers": 2, "layer_norm": True},
                          lambda m: {"layers": [_randn(2, 3, 4), _randn(2, 3, 4)],
                                     "mask": torch.tensor([[True, True, False], [True, True, True]])})],
    "ProjectedLSTM": [Example(elmo.ProjectedLSTM, lambda: {"input_size": 4, "hidden_size": 3, "cell_size": 5,
                                                           "cell_clip": 1.0, "proj_clip": 1.0, "reverse": True},
                              lambda m: {"x": _randn(2, 3, 4), "mask": torch.tensor([[True, True, False]] * 2),
                                         "state": (torch.zeros(2, 3), torch.zeros(2, 5))})],
    "remove_sentence_boundaries": [Example(elmo.remove_sentence_boundaries,
                                           lambda: {"layer": _randn(2, 4, 3),
                                                    "mask": torch.tensor([[True] * 4, [True] * 3 + [False]])})],
    "read_options": [Example(elmo.read_options, lambda: {"options": _elmo_files()[0]},
                             documented=(FileNotFoundError,))],
    "read_weights": [Example(elmo.read_weights, lambda: {"weights": _elmo_files()[1],
                                                         "opts": elmo.read_options(_elmo_files()[0])},
                             documented=(FileNotFoundError,))],
    "download_model": [Example(elmo.download_model, lambda: {"name": "small", "data_dir": FOLDER, "download": False,
                                                             "sha256": ("0" * 64, "1" * 64)},
                               documented=(DataNotFoundError,))],
}

#: Public names that are not called: constants, records and errors (with why).
NOT_CALLED = {
    "RESIDUAL_KINDS": "a constant", "ACTIVATIONS": "a constant", "AUSTEN_NOVELS": "a constant",
    "IMAGE_DATASETS": "a constant", "SENTENCE_TASKS": "a constant", "NGRAM_CELLS": "a constant",
    "GateRecord": "a record record_gates makes (record_gates is fuzzed)",
    "ImageData": "a record the loaders make", "SentenceData": "a record load_sentences makes",
    "DataNotFoundError": "an exception", "default_data_dir": "takes no argument",
    "ELMO_FILTERS": "a constant", "MODELS": "a constant", "ELMoOptions": "a record read_options makes",
    "analysis": "a module", "elmo": "a package (its names are fuzzed)",
    "functional": "a module", "kernels": "a module", "nn": "a module",
}


def public_api() -> dict[str, object]:
    """Every public name of the packages whose ``__all__`` is the API: highwaynet, highwaynet.nn,
    highwaynet.functional, highwaynet.analysis, highwaynet.models, highwaynet.data, highwaynet.elmo,
    highwaynet.kernels."""
    found: dict[str, object] = {}
    for package in (highwaynet, hnn, functional, analysis, models, data, elmo, kernels):
        for name in package.__all__:
            found[name] = getattr(package, name)
    return found


def test_every_public_name_has_an_example():
    missing = sorted(set(public_api()) - set(EXAMPLES) - set(NOT_CALLED))
    assert not missing, f"give each public name a valid call in EXAMPLES (or say why not in NOT_CALLED): {missing}"


# -- the data the data examples read ---------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def fuzz_data(tmp_path_factory):
    """Small files for the loaders (the module-level FOLDER points here while the tests run)."""
    global FOLDER
    folder = tmp_path_factory.mktemp("fuzz_data")
    (folder / "corpus").mkdir()
    for split in ("train", "valid", "test"):
        (folder / "corpus" / f"{split}.txt").write_text("the cat sat on the mat\na cat sat\n")
    (folder / "sentences").mkdir()
    for split in ("train", "test"):
        (folder / "sentences" / split).write_text("0 a bad film\n1 a good film\n0 bad\n1 good\n" * 5)
    labels = bytes([0, 0, 8, 1, 0, 0, 0, 3, 1, 2, 3])  # an IDX file of 3 unsigned bytes
    (folder / "labels.idx").write_bytes(labels)
    write_model(folder / "elmo", elmo_options(layers=1, projection=4, cells=8, highway=1))
    previous, FOLDER = FOLDER, folder
    with mock.patch.dict(os.environ, {"HIGHWAYNET_DATA": str(folder)}), \
            mock.patch("highwaynet.data.images.locate", _no_data), mock.patch("highwaynet.elmo.files.locate", _no_data):
        yield folder
    FOLDER = previous


# -- wrong values ----------------------------------------------------------------------------------

ODD = [None, True, False, 0, -1, 2.5, math.nan, math.inf, -math.inf, "8", "", "nope", [], (), [1, 2], {},
       b"ab", torch.tensor(2.0), torch.tensor(3), np.int64(4), np.float64(0.5), 10**20]


def _tensor_variants(t: Tensor) -> list[Callable[[], Any]]:
    """Ways to make the tensor ``t`` wrong: another dtype, a dimension more or less, an empty or a
    longer dimension, non-finite or out-of-range values, the same values not as a tensor."""
    ways: list[Callable[[], Any]] = [
        lambda: t.to(torch.float64), lambda: t.to(torch.float16), lambda: t.to(torch.int64), lambda: t.to(torch.int16),
        lambda: t.to(torch.bool), lambda: t.to(torch.complex64), lambda: t[None], lambda: t.reshape(-1),
        lambda: t.tolist(), lambda: t.numpy(), lambda: t.transpose(0, -1), lambda: t.sum(),
    ]
    for d in range(t.dim()):
        ways += [lambda d=d: t.narrow(d, 0, 0), lambda d=d: torch.cat([t, t], d), lambda d=d: t.narrow(d, 0, 1),
                 lambda d=d: t.select(d, 0)]
    if t.is_floating_point() and t.numel():
        for bad in (math.nan, math.inf, -math.inf):
            ways.append(lambda bad=bad: t.clone().view(-1).index_fill_(0, torch.tensor([0]), bad).view(t.shape))
    if not t.is_floating_point() and t.numel():
        for bad in (-1, 10**6):
            ways.append(lambda bad=bad: t.clone().view(-1).index_fill_(0, torch.tensor([0]), bad).view(t.shape))
    return ways


def wrong(value: Any) -> st.SearchStrategy[Any]:
    """Values that may be wrong where ``value`` is right: first those most likely wrong for its kind
    (a float's NaN and infinities, a size's bool, float and string), then odd values of any kind and
    variations of it."""
    odd = st.sampled_from(ODD)
    if isinstance(value, Tensor):
        return st.one_of(st.sampled_from(_tensor_variants(value)).map(lambda make: make()), odd)
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, Tensor) for v in value):
        return st.one_of(st.integers(0, len(value) - 1).flatmap(
            lambda i: wrong(value[i]).map(lambda v: type(value)((*value[:i], v, *value[i + 1:])))),
            st.sampled_from([value[:1], tuple(value) * 2, value[0]]), odd)
    if isinstance(value, bool):
        return st.one_of(st.sampled_from(["yes", None, -1, 0.5, "False"]), odd)
    if isinstance(value, int):
        return st.one_of(st.sampled_from([True, float(value), str(value), None, 0, -1, 2**63]), st.integers(-3, 8),
                         odd)
    if isinstance(value, float):
        return st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, None, str(value), True, 3.4e38]),
                         st.floats(allow_nan=True, allow_infinity=True), odd)
    if isinstance(value, str):
        return st.one_of(st.sampled_from(["", "nope", value.upper(), None, 3]), st.text(max_size=4), odd)
    if isinstance(value, (tuple, list)):
        return st.one_of(st.sampled_from([(), "abc", [list(v) if isinstance(v, tuple) else v for v in value][:1],
                                          [0], [[0, 3]], [(2,)], [2.5]]),
                         st.lists(st.one_of(st.integers(-2, 6), st.sampled_from(ODD)), max_size=3), odd)
    return odd


# -- what a call may do ----------------------------------------------------------------------------


def _names(target: Callable[..., Any]) -> set[str]:
    """The words a message may name the argument by: the call's parameter names, the parts of a state,
    and what torch.nn calls a layer's first argument."""
    return {*inspect.signature(target).parameters, "input", "inputs", "h_0", "c_0"}


def _raised_here(error: BaseException) -> bool:
    """Whether highwaynet's own code raised ``error`` (its innermost frame is in the package)."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and Path(frames[-1].filename).resolve().is_relative_to(PACKAGE)


def _finite(result: Any) -> bool:
    """Whether every float tensor in ``result`` (a tensor or nested tuples of them) is finite."""
    if isinstance(result, Tensor):
        return not result.is_floating_point() or bool(torch.isfinite(result).all())
    if isinstance(result, (tuple, list)):
        return all(_finite(r) for r in result)
    return True


@contextlib.contextmanager
def refused_or_works(names: set[str], documented: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """The call inside either works or raises a TypeError / ValueError (IndexError: an index out of
    range) of highwaynet's own whose message names one of ``names``."""
    try:
        yield
    except documented:
        pass
    except (TypeError, ValueError, IndexError) as error:
        message = str(error)
        where = traceback.extract_tb(error.__traceback__)[-1]
        assert _raised_here(error), f"{type(error).__name__} from inside {where}: {message}"
        assert any(re.search(rf"\b{re.escape(n)}\b", message) for n in names), \
            f"the message names no argument ({sorted(names)}): {type(error).__name__}: {message}"


def _call(example: Example, kwargs: dict[str, Any]) -> Any:
    return example.target(**kwargs)


def _run_forward(module: nn.Module, inputs: dict[str, Any], finite_inputs: bool) -> None:
    result = module(**inputs)
    if finite_inputs:
        assert _finite(result), f"{type(module).__name__} gave non-finite outputs for finite inputs"


# -- the tests -------------------------------------------------------------------------------------

CASES = [(name, i) for name, examples in EXAMPLES.items() for i in range(len(examples))]


def _parameters(example: Example) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(example.target).parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _inputs(example: Example) -> dict[str, Any]:
    torch.manual_seed(0)
    module = _call(example, example.kwargs())
    assert example.forward is not None
    return example.forward(module)


# each argument of each call, and each input of each forward call, fuzzed on its own
ARGUMENTS = [(name, i, p.name) for name, i in CASES for p in _parameters(EXAMPLES[name][i])]
INPUTS = [(name, i, argument) for name, i in CASES if EXAMPLES[name][i].forward is not None
          for argument in sorted(_inputs(EXAMPLES[name][i]))]


@pytest.mark.parametrize("name, index", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_each_example_works_as_given(name, index):
    example = EXAMPLES[name][index]
    torch.manual_seed(0)
    with contextlib.suppress(*example.documented):
        result = _call(example, example.kwargs())
        if example.forward is not None:
            _run_forward(result, example.forward(result), finite_inputs=True)


@pytest.mark.parametrize("name, index, argument", ARGUMENTS, ids=[f"{n}-{i}-{a}" for n, i, a in ARGUMENTS])
def test_a_wrong_argument_is_refused_by_name_or_works(name, index, argument):
    """One argument of the call (of the constructor, for a module) made wrong; a module that accepts
    it must then run its valid forward call with finite outputs, or refuse it by name."""
    example = EXAMPLES[name][index]
    parameter = inspect.signature(example.target).parameters[argument]
    right = example.kwargs().get(argument, parameter.default)
    names = _names(example.target) | (_names(example.target.forward) if example.forward else set())

    @settings(settings.get_profile(PROFILE))
    @given(wrong(None if right is inspect.Parameter.empty else right))
    def fuzz(value):
        torch.manual_seed(0)
        with refused_or_works(names, example.documented):
            result = _call(example, {**example.kwargs(), argument: value})
            if example.forward is not None:
                _run_forward(result, example.forward(result), finite_inputs=True)

    fuzz()


@pytest.mark.parametrize("name, index, argument", INPUTS, ids=[f"{n}-{i}-{a}" for n, i, a in INPUTS])
def test_forward_refuses_a_wrong_input_by_name_or_works(name, index, argument):
    """One input of ``forward`` made wrong: a wrong type, dtype, shape, an empty dimension, non-finite
    values or ids out of range."""
    example = EXAMPLES[name][index]
    torch.manual_seed(0)
    module = _call(example, example.kwargs())
    inputs = example.forward(module)

    @settings(settings.get_profile(PROFILE))
    @given(wrong(inputs[argument]))
    def fuzz(value):
        torch.manual_seed(0)
        with refused_or_works(_names(module.forward)):
            _run_forward(module, {**inputs, argument: value}, finite_inputs=_finite(value))

    fuzz()
