"""Constructors mean what their signatures say, as ``torch.nn``'s do: sizes by position, settings by
keyword, and ``RHN(10, 20, 2)`` the two-layer RHN that ``nn.LSTM(10, 20, 2)`` is for an LSTM."""

import inspect

import pytest
from torch import nn

from highwaynet import models
from highwaynet import nn as highway_nn
from highwaynet.nn import RHN, Highway, HighwayLSTM

#: Positional parameters with a default: sizes (as nn.LSTM's num_layers), and what nn.Linear takes by position.
SIZES_AND_TORCH_POSITIONAL = {"num_layers", "width", "output_size", "bias", "device", "dtype"}


def public_modules() -> dict[str, type]:
    found = {}
    for package in (highway_nn, models):
        for name in package.__all__:
            obj = getattr(package, name)
            if isinstance(obj, type) and issubclass(obj, nn.Module):
                found[name] = obj
    return found


def test_the_third_positional_argument_is_num_layers_as_for_nn_lstm():
    assert RHN(10, 20, 2).num_layers == nn.LSTM(10, 20, 2).num_layers == 2
    assert len(RHN(10, 20, 2).cells) == 2 and RHN(10, 20, 2).depth == RHN(10, 20).depth
    assert HighwayLSTM(10, 20, 2).num_layers == 2
    assert Highway(8, 3).num_layers == 3


@pytest.mark.parametrize("name, cls", sorted(public_modules().items()))
def test_every_setting_is_keyword_only(name, cls):
    """Every setting (a parameter with a default that is not a size) is keyword-only."""
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    by_position = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty
                   and p.name not in SIZES_AND_TORCH_POSITIONAL]
    assert not by_position, f"{name}: {by_position} should be keyword-only"


def test_a_setting_passed_by_position_is_refused():
    with pytest.raises(TypeError):
        RHN(10, 20, 2, 3)  # depth is a setting: RHN(10, 20, 2, depth=3)
    with pytest.raises(TypeError):
        Highway(8, 2, "relu")
