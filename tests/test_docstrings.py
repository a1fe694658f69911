"""The examples in the public API's docstrings run and print what they show."""

import doctest
import importlib

import pytest
import torch

import highwaynet.models
import highwaynet.nn
from highwaynet import analysis

MODULES = ["highwaynet.functional", "highwaynet.analysis", "highwaynet.nn.gate", "highwaynet.nn.highway",
           "highwaynet.nn.conv", "highwaynet.nn.resize", "highwaynet.nn.rhn", "highwaynet.nn.lstm",
           "highwaynet.nn.char", "highwaynet.nn.residual", "highwaynet.models.transformer",
           "highwaynet.models.sentence", "highwaynet.models.lm", "highwaynet.models.mlp",
           "highwaynet.models.cnn", "highwaynet.elmo.chars", "highwaynet.elmo.bilm", "highwaynet.elmo.mix"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    # The examples assume what a user of the package has imported: torch and the layers.
    names = {"torch": torch, **{n: getattr(highwaynet.nn, n) for n in highwaynet.nn.__all__},
             **{n: getattr(analysis, n) for n in analysis.__all__},
             **{n: getattr(highwaynet.models, n) for n in highwaynet.models.__all__}}
    torch.manual_seed(0)
    result = doctest.testmod(importlib.import_module(name), extraglobs=names, optionflags=doctest.ELLIPSIS,
                             raise_on_error=False, verbose=False, report=True)
    assert result.attempted > 0, f"{name} shows no example"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed (printed above)"


def test_every_layer_is_importable_from_the_package():
    # `from highwaynet import RHN` as `from torch.nn import LSTM`: every layer class of highwaynet.nn is
    # re-exported at the top (its helper functions stay in highwaynet.nn).
    import highwaynet

    layers = {n for n in highwaynet.nn.__all__ if isinstance(getattr(highwaynet.nn, n), type)}
    missing = sorted(layers - set(highwaynet.__all__))
    assert not missing, f"missing from highwaynet.__all__: {missing}"
    assert all(getattr(highwaynet, n) is getattr(highwaynet.nn, n) for n in layers)


# Public modules whose docstring need not state shapes: the base class of the gates (each gate states its
# own) and a deprecated class (its docstring sends the reader to Residual's).
NO_SHAPES = {"highwaynet.nn.Gate", "highwaynet.nn.GatedResidual"}


def test_every_public_module_states_its_shapes_and_every_combiner_its_equation():
    # As torch.nn's reference does: a "Shape:" section (or "Inputs:"/"Outputs:", nn.LSTM's), or the shapes
    # in the summary, "(N, C, L) -> (N, C, L)"; and each residual combiner its output in maths, with the
    # order its call takes, combine(f, x).
    import inspect
    import re

    import highwaynet.elmo
    from highwaynet.nn.residual import _Combine

    missing_shapes, missing_maths = [], []
    for module in (highwaynet.nn, highwaynet.models, highwaynet.elmo):
        for name in module.__all__:
            cls = getattr(module, name)
            if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
                continue
            doc = inspect.getdoc(cls) or ""
            summary = doc.split("\n\n", 1)[0]
            if f"{module.__name__}.{name}" not in NO_SHAPES and not (
                    re.search(r"^(Shape|Inputs|Outputs):", doc, re.M) or re.search(r"\)`*\s*->\s*`*\(", summary)):
                missing_shapes.append(f"{module.__name__}.{name}")
            if issubclass(cls, _Combine) and not (":math:" in doc and "combine(f, x)" in doc):
                missing_maths.append(name)
    assert not missing_shapes, f"public modules whose docstring states no shapes: {missing_shapes}"
    assert not missing_maths, f"combiners whose docstring gives no equation or no call order: {missing_maths}"


@pytest.mark.parametrize(("shown", "layer", "args", "shapes"), [
    ("``(..., features)`` dense", lambda: highwaynet.nn.Highway(16), (torch.randn(4, 7, 16),), [(4, 7, 16)]),
    ("``(N, C, H, W)`` convolutional", lambda: highwaynet.nn.HighwayConv2d(8, kernel_size=3),
     (torch.randn(2, 8, 5, 5),), [(2, 8, 5, 5)]),
    ("``(B, T, out)`` a highway LSTM block", lambda: highwaynet.nn.HighwayLSTM(8, 16, bidirectional=True),
     (torch.randn(5, 2, 8),), [(2, 5, 32)]),
    ("``(B, hidden_size)`` an RHN micro-layer, called once per time step",
     lambda: highwaynet.nn.RHN(8, 16, depth=2), (torch.randn(3, 2, 8),), [(2, 16)] * 6),
    ("``()`` for :class:`~highwaynet.nn.FixedGate`",
     lambda: highwaynet.nn.Residual(torch.nn.Linear(8, 8), highwaynet.nn.FixedGate()), (torch.randn(2, 8),), [()]),
    ("``(features,)`` for :class:`~highwaynet.nn.LayerScale`",
     lambda: highwaynet.nn.Residual(torch.nn.Linear(8, 8), highwaynet.nn.LayerScale(8)), (torch.randn(2, 8),),
     [(8,)]),
])
def test_add_observer_says_what_the_observer_receives_and_when(shown, layer, args, shapes):
    """``Gate.add_observer``'s docstring says what an observer gets, with shapes, and when; each shape it names is
    the one a layer's observers receive (it said only ``fn(gate, T, C)``, on each forward pass)."""
    doc = " ".join(highwaynet.nn.Gate.add_observer.__doc__.split())
    assert shown in doc
    model, seen = layer(), []
    for gate in (m for m in model.modules() if isinstance(m, highwaynet.nn.Gate)):
        gate.add_observer(lambda gate, t, c: seen.append(tuple(t.shape)))
    model(*args)
    assert seen == shapes
