"""Highway against the peers' formulas, written out in float64 numpy."""

import numpy as np
import pytest
import torch
from conftest import cuda
from torch import nn

from highwaynet.nn import Highway, HighwayConv1d, RHNCell

NP_ACT = {
    "relu": lambda z: np.maximum(z, 0),
    "tanh": np.tanh,
    "sigmoid": lambda z: 1 / (1 + np.exp(-z)),
    "identity": lambda z: z,
}


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def params(net):
    return [(p.weight.detach().double().numpy(), p.bias.detach().double().numpy()) for p in net.layers]


def gluonnlp(x, layers, act):
    # GluonNLP Highway: one projection, split into [H | T].
    for w, b in layers:
        z = x @ w.T + b
        d = z.shape[-1] // 2
        h, t = act(z[..., :d]), sigmoid(z[..., d:])
        x = t * h + (1 - t) * x
    return x


def chainer(x, layers, act):
    # Chainer links.Highway: separate "plain" and "transform" links.
    for w, b in layers:
        d = w.shape[0] // 2
        w_h, b_h, w_t, b_t = w[:d], b[:d], w[d:], b[d:]
        h = act(x @ w_h.T + b_h)
        t = sigmoid(x @ w_t.T + b_t)
        x = h * t + x * (1 - t)
    return x


def lasagne(x, layers, act):
    # Lasagne: DenseLayer for H, DenseLayer(sigmoid) for the gate, MultiplicativeGatingLayer.
    def gating(gate, input1, input2):
        return gate * input1 + (1 - gate) * input2

    for w, b in layers:
        d = w.shape[0] // 2
        x = gating(sigmoid(x @ w[d:].T + b[d:]), act(x @ w[:d].T + b[:d]), x)
    return x


@pytest.mark.parametrize("reference", [gluonnlp, chainer, lasagne])
@pytest.mark.parametrize("num_layers", [1, 3, 7])
@pytest.mark.parametrize("activation", ["relu", "tanh", "sigmoid", "identity"])
def test_matches_reference_formulas(reference, num_layers, activation):
    torch.manual_seed(num_layers)
    net = Highway(6, num_layers, activation=activation, gate_bias=-1.0).double()
    with torch.no_grad():  # non-zero biases everywhere, so that a mixed-up half would show
        for p in net.layers:
            p.bias.uniform_(-1, 1)
    x = np.random.default_rng(0).standard_normal((5, 6))
    expected = reference(x, params(net), NP_ACT[activation])
    got = net(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


def test_default_biases():
    net = Highway(4, 2, gate_bias=-3.0)
    for p in net.layers:
        assert p.weight.shape == (8, 4)
        assert torch.equal(p.bias[:4], torch.zeros(4))
        assert torch.equal(p.bias[4:], torch.full((4,), -3.0))
    assert torch.equal(Highway(4).layers[0].bias[4:], torch.full((4,), -2.0))


def test_independent_carry_formula():
    torch.manual_seed(0)
    net = Highway(5, 2, activation="tanh", carry="independent").double()
    assert net.layers[0].weight.shape == (15, 5)
    assert torch.equal(net.layers[0].bias[10:], torch.full((5,), 2.0, dtype=torch.float64))
    x = np.random.default_rng(1).standard_normal((3, 5))
    y = x
    for w, b in params(net):
        z = y @ w.T + b
        h, t, c = np.tanh(z[:, :5]), sigmoid(z[:, 5:10]), sigmoid(z[:, 10:])
        y = t * h + c * y
    np.testing.assert_allclose(net(torch.from_numpy(x)).detach().numpy(), y, rtol=1e-10)


def test_any_leading_shape_and_module_activation():
    net = Highway(8, 2, activation=torch.nn.SiLU())
    assert net(torch.randn(2, 3, 4, 8)).shape == (2, 3, 4, 8)
    assert isinstance(net.activation, torch.nn.SiLU) and "activation" in dict(net.named_children())


def test_gradcheck():
    torch.manual_seed(0)
    net = Highway(4, 3, activation="tanh", carry="coupled").double()
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(net, (x,))
    ind = Highway(4, 2, activation="tanh", carry="independent").double()
    assert torch.autograd.gradcheck(ind, (x,))


def test_dropout_only_in_training():
    torch.manual_seed(0)
    net = Highway(16, 2, dropout=0.5)
    x = torch.randn(4, 16)
    net.eval()
    assert torch.equal(net(x), net(x))
    net.train()
    assert not torch.equal(net(x), net(x))


def test_wrong_last_dimension():
    with pytest.raises(ValueError, match=r"expects inputs of shape \(\.\.\., 8\), got \(2, 7\)"):
        Highway(8)(torch.randn(2, 7))


def test_non_tensor():
    with pytest.raises(TypeError, match="Highway expects x to be a torch.Tensor, got ndarray"):
        Highway(8)(np.zeros((2, 8)))


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="unknown activation 'reluu'"):
        Highway(8, activation="reluu")
    with pytest.raises(ValueError, match="carry must be one of"):
        Highway(8, carry="both")
    with pytest.raises(ValueError, match="num_layers must be positive, got 0"):
        Highway(8, num_layers=0)


def test_float64_and_bf16_autocast():
    net = Highway(8, 2)
    x = torch.randn(4, 8)
    assert net.double()(x.double()).dtype == torch.float64
    net.float()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = net(x)
    assert y.dtype == torch.float32  # the carried input keeps the stack in the input's precision
    torch.testing.assert_close(y, net(x), rtol=2e-2, atol=2e-2)
    y.sum().backward()
    assert all(p.grad is not None for p in net.parameters())


def test_torch_export_matches_eager():
    torch.manual_seed(0)
    net = Highway(16, 3, activation="gelu").eval()
    x = torch.randn(8, 16)
    exported = torch.export.export(net, (x,))
    torch.testing.assert_close(exported.module()(x), net(x))


@cuda
def test_cuda_matches_cpu():
    torch.manual_seed(0)
    net = Highway(32, 4)
    x = torch.randn(16, 32)
    torch.testing.assert_close(net.cuda()(x.cuda()).cpu(), net.cpu()(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("make, shape", [
    (lambda activation: Highway(4, 2, activation=activation), (3, 4)),
    (lambda activation: Highway(4, carry="independent", activation=activation), (3, 4)),
    (lambda activation: HighwayConv1d(4, 3, activation=activation), (2, 4, 5)),
    (lambda activation: RHNCell(4, 4, depth=2, activation=activation), (3, 4)),
], ids=["Highway", "independent carry", "HighwayConv1d", "RHNCell"])
def test_an_in_place_activation_gives_the_outputs_and_gradients_of_its_function(make, shape):
    # (nn.ReLU(inplace=True), as CNN code writes it: the layers split [H | T] with chunk, whose views autograd
    # refuses to let an in-place function write, "Output 0 of Split is a view and is being modified inplace")
    torch.manual_seed(0)
    in_place = make(nn.ReLU(inplace=True)).double()
    plain = make("relu").double()
    plain.load_state_dict(in_place.state_dict())
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    outputs = [layer(x) for layer in (in_place, plain)]
    torch.testing.assert_close(outputs[0], outputs[1], rtol=0, atol=0)
    grads = [torch.autograd.grad(y.square().sum(), [x, *layer.parameters()])
             for y, layer in zip(outputs, (in_place, plain), strict=True)]
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)
