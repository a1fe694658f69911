"""Every public module prints as ``nn.LSTM`` does: its sizes, then only the settings that differ from
their defaults (and printing never fails, whatever options the module was built with). The two
width changers print as ``nn.Linear`` does, whose place they take."""

import inspect

import pytest
import torch

import highwaynet.models as models
import highwaynet.nn as hnn
from highwaynet.nn import CharVocab

CHARS = CharVocab.from_words(["the", "cat", "sat"])
WORD_CHARS = CHARS.encode(["<pad>", "<unk>", "the", "cat", "sat"])

# name -> (sizes, one non-default keyword setting, how it prints)
CASES = {
    "BranchGate": ((), {}, ""),  # (no settings)
    "Gate": ((), {}, ""),
    "GatedResidual": ((torch.nn.Linear(4, 4), 4), {"kind": "gtrxl", "gate_bias": -1.0}, "kind='gtrxl', gate_bias=-1.0"),
    "Residual": ((torch.nn.Linear(4, 4), hnn.Sum()), {}, ""),  # (its parts print themselves)
    "Sum": ((), {}, ""),
    "FixedGate": ((), {"bias": -5.0}, "bias=-5.0"),
    "ReZero": ((), {"init": 0.5}, "init=0.5"),
    "LayerScale": ((4,), {"init": 0.1}, "init=0.1"),
    "DeepNormSum": ((), {"alpha": 2.0}, "alpha=2.0"),
    "HighwayGate": ((4,), {"reads": "both"}, "reads='both'"),
    "GRUGate": ((4,), {"relu": False}, "relu=False"),
    "GatedResidualNetwork": ((4, 8), {"context_size": 3}, "context_size=3"),
    "CausalTransformer": ((30, 8, 2), {"residual": "highway", "norm": "post"}, "residual='highway', norm='post'"),
    "CharCNNHighway": ((20,), {"num_highway": 2}, "num_highway=2"),
    "Highway": ((8,), {"gate_bias": -1.0}, "gate_bias=-1.0"),
    "HighwayConv1d": ((4, 3), {"dilation": 2}, "dilation=2"),
    "HighwayConv2d": ((4, 3), {"carry": "independent"}, "carry='independent'"),
    "HighwayLSTM": ((4, 6), {"batch_first": True}, "batch_first=True"),
    "HighwayLSTMBlock": ((4, 6), {"bidirectional": False}, "bidirectional=False"),
    "Projection": ((4, 6), {"bias": True}, "in_features=4, out_features=6, bias=True"),
    "RHN": ((4, 6), {"depth": 2}, "depth=2"),
    "RHNCell": ((4, 6), {"depth": 2}, "depth=2"),
    "TransformGate": ((), {"carry": "independent"}, "carry='independent'"),
    "ZeroPad": ((4, 6), {}, ""),  # (no settings)
    "CharAwareLanguageModel": ((WORD_CHARS, len(CHARS), 8), {"rnn": "rhn"},
                               "rnn='rhn'"),
    "HighwayCNN": ((1, 10), {"plain": True}, "plain=True"),
    "HighwayMLP": ((4, 3, 2), {"width": 8}, ""),
    "LSTMLanguageModel": ((30, 8), {"tie_weights": False}, "tie_weights=False"),
    "PlainMLP": ((4, 3, 2), {"dropout": 0.1}, "dropout=0.1"),
    "RHNLanguageModel": ((30, 8), {"depth": 2}, "depth=2"),
    "SentenceClassifier": ((30, 2), {"encoder": "cnn"}, "encoder='cnn'"),
}

LIKE_LINEAR = {"Projection": "in_features=4, out_features=6, bias=False", "ZeroPad": "in_features=4, out_features=6"}


def _public_modules():
    for package in (hnn, models):
        for name in package.__all__:
            value = getattr(package, name)
            if inspect.isclass(value) and issubclass(value, torch.nn.Module):
                yield name, value


def test_every_public_module_has_a_case():
    assert sorted(name for name, _ in _public_modules()) == sorted(CASES)


@pytest.mark.parametrize("name, cls", list(_public_modules()), ids=lambda v: v if isinstance(v, str) else "")
def test_repr_shows_sizes_and_only_non_default_settings(name, cls):
    sizes, setting, shown = CASES[name]
    if name == "DeepNormSum":  # (alpha has no default: its one setting, always shown)
        assert cls(**setting).extra_repr() == shown
        return
    if name == "GatedResidual":  # (deprecated: it says so each time it is made)
        with pytest.warns(DeprecationWarning, match="deprecated since highwaynet"):
            assert "=" not in cls(*sizes).extra_repr()
        with pytest.warns(DeprecationWarning, match="deprecated since highwaynet"):
            assert shown in cls(*sizes, **setting).extra_repr()
        return
    default = cls(*sizes).extra_repr()
    if name in LIKE_LINEAR:
        assert default == LIKE_LINEAR[name]
    else:
        assert "=" not in default, f"{name} prints a default setting: {default!r}"
    changed = cls(*sizes, **setting).extra_repr()
    assert shown in changed
    if shown:
        assert changed != default


def test_sentence_classifier_with_characters_prints_its_features():
    model = models.SentenceClassifier(5, 2, word_features="words+chars", word_chars=WORD_CHARS,
                                      num_chars=len(CHARS))
    text = repr(model)
    assert "word_features='words+chars'" in text and f"word_chars=<tensor {tuple(WORD_CHARS.shape)}>" in text


def test_the_default_activation_as_another_function_object_is_not_shown():
    # torch.relu is not F.relu (which "relu" names): the same activation all the same, the default.
    import torch.nn.functional as F

    assert hnn.Highway(4, activation=torch.relu).extra_repr() == "4"
    assert hnn.Highway(4, activation=F.relu).extra_repr() == "4"
    assert hnn.RHNCell(3, 4, activation=F.tanh).extra_repr() == "3, 4"
    assert hnn.Highway(4, activation=torch.tanh).extra_repr() == "4, activation=tanh"
