"""Every layer takes ``device=`` and ``dtype=`` for its parameters, as ``torch.nn``'s layers do."""

import pytest
import torch

from highwaynet.nn import (
    RHN,
    CharCNNHighway,
    GatedResidualNetwork,
    Highway,
    HighwayConv1d,
    HighwayConv2d,
    HighwayLSTM,
    Projection,
    make_resize,
)

# name -> (constructor taking the factory keywords, an input shape (the input itself where it is ids), the
# gate biases' tensors)
LAYERS = {
    "Highway": (lambda **k: Highway(8, 2, gate_bias=-3.0, **k), (4, 8),
                lambda m: [p.bias[8:] for p in m.layers]),
    "HighwayConv1d": (lambda **k: HighwayConv1d(4, 2, gate_bias=-3.0, **k), (2, 4, 7),
                      lambda m: [m.conv.bias[4:]]),
    "HighwayConv2d": (lambda **k: HighwayConv2d(4, 3, gate_bias=-3.0, **k), (2, 4, 5, 5),
                      lambda m: [m.conv.bias[4:]]),
    "HighwayLSTM": (lambda **k: HighwayLSTM(5, 3, 2, gate_bias=-3.0, **k), (6, 2, 5),
                    lambda m: [b.transform.bias for b in m.blocks]),
    "RHN": (lambda **k: RHN(5, 6, depth=2, bidirectional=True, gate_bias=-3.0, **k), (6, 2, 5),
            lambda m: [p.bias[6:] for c in m.cells for p in c.hidden_proj]),
    "CharCNNHighway": (lambda **k: CharCNNHighway(9, filters=((1, 4), (2, 4)), num_highway=2, gate_bias=-3.0,
                                                  projection=5, **k),
                       torch.tensor([[2, 5, 7, 3, 0], [2, 8, 3, 0, 0]]),
                       lambda m: [p.bias[8:] for p in m.layers.layers] + [m.embedding.weight[0] - 3.0]),
    "GatedResidualNetwork": (lambda **k: GatedResidualNetwork(4, 6, 5, context_size=3, **k), (3, 4),
                             lambda m: []),
}


def _call(layer, shape, dtype=None, device=None):
    """The layer on an input of ``shape`` (random values; the ids given in its place for a character
    encoder; with a context of its own for a gated residual network)."""
    if isinstance(shape, torch.Tensor):
        return layer(shape.to(device))
    x = torch.randn(*shape, dtype=dtype, device=device)
    if isinstance(layer, GatedResidualNetwork):
        return layer(x, torch.randn(shape[0], layer.context_size, dtype=dtype, device=device))
    return layer(x)


def _output(y):
    return y[0] if isinstance(y, tuple) else y  # the recurrent layers return (output, state)


@pytest.mark.parametrize("name", list(LAYERS))
def test_parameters_made_in_the_dtype_asked_with_gate_biases_set(name):
    make, shape, gate_biases = LAYERS[name]
    layer = make(dtype=torch.float64)
    assert {p.dtype for p in layer.parameters()} == {torch.float64}
    for bias in gate_biases(layer):
        assert torch.equal(bias, torch.full_like(bias, -3.0))
    out = _call(layer, shape, torch.float64)
    assert _output(out).dtype == torch.float64


@pytest.mark.parametrize("name", list(LAYERS))
def test_parameters_made_on_the_meta_device(name):
    layer = LAYERS[name][0](device="meta")
    assert {p.device.type for p in layer.parameters()} == {"meta"}


@pytest.mark.parametrize("name", list(LAYERS))
def test_made_on_the_meta_device_then_materialised_by_reset_parameters(name):
    make, shape, gate_biases = LAYERS[name]
    layer = make(device="meta").to_empty(device="cpu")
    with torch.no_grad():
        for p in layer.parameters():
            p.fill_(float("nan"))  # so that a parameter reset_parameters misses shows
    layer.reset_parameters()
    assert all(torch.isfinite(p).all() for p in layer.parameters())
    for bias in gate_biases(layer):
        assert torch.equal(bias, torch.full_like(bias, -3.0))
    out = _call(layer, shape)
    assert torch.isfinite(_output(out)).all()


def test_projection_and_resize_take_the_factory_keywords():
    assert Projection(3, 4, dtype=torch.float64).weight.dtype == torch.float64
    assert make_resize("projection", 3, 4, device="meta").weight.is_meta


@pytest.mark.parametrize("name", [*LAYERS, "ELMoBiLM"])
def test_a_cuda_device_the_machine_lacks_is_refused_by_name(name, monkeypatch):
    from elmo_reference import options

    from highwaynet.elmo import ELMoBiLM

    make = (lambda **k: ELMoBiLM.from_options(options(), **k)) if name == "ELMoBiLM" else LAYERS[name][0]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"device='cuda': this machine has no CUDA device.*pass device='cpu'"):
        make(device="cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ValueError, match=r"device=device\(type='cuda', index=2\): this machine has 2 CUDA"):
        make(device=torch.device("cuda", 2))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", list(LAYERS))
def test_parameters_made_on_the_gpu(name):
    make, shape, _ = LAYERS[name]
    layer = make(device="cuda")
    assert {p.device.type for p in layer.parameters()} == {"cuda"}
    out = _call(layer, shape, device="cuda")
    assert _output(out).is_cuda
