import numpy as np
import pytest
import torch
import torch.nn.functional as F

from highwaynet.nn import HighwayConv1d, HighwayConv2d


@pytest.mark.parametrize("k", range(1, 7))
def test_same_padding_keeps_size(k):
    assert HighwayConv2d(3, k)(torch.randn(2, 3, 9, 10)).shape == (2, 3, 9, 10)
    assert HighwayConv1d(3, k)(torch.randn(2, 3, 7)).shape == (2, 3, 7)
    assert HighwayConv2d(3, (k, 7 - k))(torch.randn(3, 5, 6)).shape == (3, 5, 6)  # unbatched


def reference_conv2d(x, w, b, k):
    """float64 numpy: zero 'same' padding, (k-1)//2 before and k//2 after; a direct correlation."""
    n, c, hgt, wid = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), ((k - 1) // 2, k // 2), ((k - 1) // 2, k // 2)))
    out = np.empty((n, w.shape[0], hgt, wid))
    for i in range(hgt):
        for j in range(wid):
            patch = xp[:, :, i:i + k, j:j + k]
            out[:, :, i, j] = np.einsum("nckl,ockl->no", patch, w) + b
    return out


@pytest.mark.parametrize("k", [2, 3, 4])
def test_conv2d_matches_reference(k):
    torch.manual_seed(k)
    layer = HighwayConv2d(3, k, activation="tanh").double()
    x = np.random.default_rng(k).standard_normal((2, 3, 5, 6))
    z = reference_conv2d(x, layer.conv.weight.detach().numpy(), layer.conv.bias.detach().numpy(), k)
    h, t = np.tanh(z[:, :3]), 1 / (1 + np.exp(-z[:, 3:]))
    expected = t * h + (1 - t) * x
    np.testing.assert_allclose(layer(torch.from_numpy(x)).detach().numpy(), expected, rtol=1e-10, atol=1e-12)


def test_conv1d_matches_functional_with_explicit_padding():
    torch.manual_seed(0)
    layer = HighwayConv1d(4, 4, activation="relu", carry="independent").double()
    x = torch.randn(2, 4, 9, dtype=torch.float64)
    z = F.conv1d(F.pad(x, (1, 2)), layer.conv.weight, layer.conv.bias)
    h, t, c = z.chunk(3, dim=1)
    torch.testing.assert_close(layer(x), torch.sigmoid(t) * torch.relu(h) + torch.sigmoid(c) * x)


def test_gate_bias_initialised():
    layer = HighwayConv2d(5, 3, gate_bias=-1.5)
    assert torch.equal(layer.conv.bias[:5], torch.zeros(5))
    assert torch.equal(layer.conv.bias[5:], torch.full((5,), -1.5))


@pytest.mark.parametrize("k", [2, 3])
def test_gradcheck(k):
    torch.manual_seed(0)
    x = torch.randn(1, 2, 4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(HighwayConv2d(2, k, activation="tanh").double(), (x,))
    x1 = torch.randn(2, 2, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(HighwayConv1d(2, k, activation="tanh").double(), (x1,))


def test_wrong_channels():
    with pytest.raises(ValueError, match=r"expects inputs of shape \(N, 4, \*, \*\), got \(2, 3, 8, 8\)"):
        HighwayConv2d(4, 3)(torch.randn(2, 3, 8, 8))
    with pytest.raises(ValueError, match=r"HighwayConv1d expects inputs of shape \(N, 4, \*\), got \(2, 4\)"):
        HighwayConv1d(4, 3)(torch.randn(2, 4))
    with pytest.raises(TypeError, match="got list"):
        HighwayConv1d(4, 3)([1, 2])


@pytest.mark.parametrize("make", [lambda: HighwayConv2d(4, 0), lambda: HighwayConv2d(4, (3, 3, 3)),
                                  lambda: HighwayConv1d(4, 3, dilation=0), lambda: HighwayConv2d(4, (3, -1))])
def test_bad_kernel(make):
    with pytest.raises(ValueError, match="kernel_size must be a positive int or"):
        make()
