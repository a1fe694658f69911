import pytest
import torch

from highwaynet.nn import Projection, ZeroPad, make_resize


def test_zero_pad():
    x = torch.randn(2, 3, 4)
    y = ZeroPad(4, 7)(x)
    assert y.shape == (2, 3, 7)
    assert torch.equal(y[..., :4], x) and torch.equal(y[..., 4:], torch.zeros(2, 3, 3))


def test_zero_pad_errors():
    with pytest.raises(ValueError, match="can only widen"):
        ZeroPad(5, 4)
    with pytest.raises(ValueError, match=r"\(\.\.\., 4\), got \(2, 5\)"):
        ZeroPad(4, 6)(torch.randn(2, 5))


def test_projection_is_linear_without_bias():
    p = Projection(3, 5)
    x = torch.randn(4, 3)
    assert p.bias is None
    torch.testing.assert_close(p(x), x @ p.weight.T)


def test_make_resize():
    assert isinstance(make_resize("zeropad", 4, 4), torch.nn.Identity)
    assert isinstance(make_resize("zeropad", 4, 6), ZeroPad)
    assert isinstance(make_resize("projection", 6, 4), Projection)
    with pytest.raises(ValueError, match="unknown resize 'crop'"):
        make_resize("crop", 4, 6)
