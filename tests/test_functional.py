import numpy as np
import pytest
import torch
from torch import nn

from highwaynet import Highway
from highwaynet.functional import get_activation, highway_combine, highway_combine_independent


def test_combine_matches_formula_float64():
    rng = np.random.default_rng(0)
    t, h, x = (rng.random((4, 5)) for _ in range(3))
    expected = t * h + (1 - t) * x
    got = highway_combine(*(torch.from_numpy(a) for a in (t, h, x)))
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_combine_broadcasts_and_promotes():
    t = torch.full((3, 1), 0.25)
    h = torch.ones(3, 4, dtype=torch.bfloat16)
    x = torch.zeros(4)
    y = highway_combine(t, h, x)
    assert y.shape == (3, 4) and y.dtype == torch.float32
    assert torch.allclose(y, torch.full((3, 4), 0.25))


def test_combine_shape_error_names_shapes():
    with pytest.raises(ValueError, match=r"t\(3, 4\).*h\(3, 5\).*x\(3, 4\)"):
        highway_combine(torch.ones(3, 4), torch.ones(3, 5), torch.ones(3, 4))


def test_combine_type_error():
    with pytest.raises(TypeError, match="h must be a torch.Tensor, got list"):
        highway_combine(torch.ones(2), [1.0, 2.0], torch.ones(2))


def test_combine_gradcheck():
    args = [torch.rand(3, 4, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    assert torch.autograd.gradcheck(highway_combine, args)


def test_independent_combine():
    t, c, h, x = (torch.rand(2, 3, dtype=torch.float64) for _ in range(4))
    assert torch.allclose(highway_combine_independent(t, c, h, x), t * h + c * x)


def test_unknown_activation_lists_choices():
    with pytest.raises(ValueError, match="unknown activation 'swishy'.*gelu.*relu"):
        get_activation("swishy")
    with pytest.raises(TypeError, match="got int"):
        get_activation(3)


def test_an_activation_given_as_a_module_class_is_refused_by_name():
    # (a class is callable: nn.ReLU(h) made a module with inplace=h, and the layer's forward then failed
    # inside torch, "Boolean value of Tensor with more than one value is ambiguous")
    with pytest.raises(TypeError, match=r"activation must be .*got the class ReLU: pass an instance, ReLU\(\)"):
        get_activation(nn.ReLU)
    with pytest.raises(TypeError, match="activation .*class Tanh"):
        Highway(4, activation=nn.Tanh)
    net = Highway(4, activation=nn.ReLU())  # an instance is taken as it is
    x = torch.randn(2, 4)
    assert torch.equal(net(x), net.gates[0](torch.relu(net.layers[0](x)[:, :4]), net.layers[0](x)[:, 4:], x))
