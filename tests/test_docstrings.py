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
