"""Gated residual connections against their equations written out here in float64, gradcheck, their
gates recorded and lesioned, and the errors a user meets."""

import pytest
import torch
from torch import nn

from highwaynet.analysis import gate_modules, lesion, record_gates
from highwaynet.nn import RESIDUAL_KINDS, BranchGate, GatedResidual, GatedResidualNetwork, TransformGate

F64 = torch.float64


def sigmoid(v):
    return 1 / (1 + torch.exp(-v))


class Branch(nn.Module):
    """A sublayer F of its own: tanh(x A + a) B."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.a = nn.Linear(dim, 2 * dim, dtype=F64)
        self.b = nn.Linear(2 * dim, dim, bias=False, dtype=F64)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def expected(layer: GatedResidual, x: torch.Tensor) -> torch.Tensor:
    """Each kind's output written out from its parameters."""
    f = layer.sublayer.b.weight @ torch.tanh(layer.sublayer.a.weight @ x.unsqueeze(-1)
                                             + layer.sublayer.a.bias.unsqueeze(-1))
    f = f.squeeze(-1)
    d = x.shape[-1]
    if layer.kind == "residual":
        return x + f
    if layer.kind == "rezero":
        return x + layer.alpha * f
    if layer.kind == "highway":
        reads = x if layer.gate_reads == "stream" else torch.cat([x, f], -1)
        t = sigmoid(reads @ layer.gate_proj.weight.t() + layer.gate_proj.bias)
        return t * f + (1 - t) * x
    w = layer.from_branch.weight  # rows [W_r; W_z; W_g]
    u, bias = layer.from_stream.weight, layer.from_stream.bias  # rows [U_r; U_z], bias [0 | b_z]
    r = sigmoid(f @ w[:d].t() + x @ u[:d].t() + bias[:d])
    z = sigmoid(f @ w[d:2 * d].t() + x @ u[d:].t() + bias[d:])
    h = torch.tanh(f @ w[2 * d:].t() + (r * x) @ layer.candidate.weight.t())
    return (1 - z) * x + z * h


CONNECTIONS = [(kind, "stream") for kind in RESIDUAL_KINDS] + [("highway", "both")]


@pytest.mark.parametrize("kind, reads", CONNECTIONS)
def test_each_connection_is_its_equation_and_passes_gradcheck(kind, reads):
    torch.manual_seed(0)
    layer = GatedResidual(Branch(5), 5, kind=kind, gate_reads=reads, dtype=F64)
    if kind == "rezero":
        with torch.no_grad():
            layer.alpha.fill_(0.7)  # (0 at first: the identity)
    x = torch.randn(3, 4, 5, dtype=F64, requires_grad=True)
    assert (layer(x) - expected(layer, x)).abs().max() < 1e-12
    assert torch.autograd.gradcheck(layer, (x,))


def test_the_gates_start_as_their_papers_say():
    torch.manual_seed(0)
    x = torch.randn(64, 8, dtype=F64)
    rezero = GatedResidual(Branch(8), 8, kind="rezero", dtype=F64)
    assert torch.equal(rezero(x), x)  # ReZero: the identity at initialisation
    for kind in ("highway", "gtrxl"):
        layer = GatedResidual(Branch(8), 8, kind=kind, dtype=F64)
        with record_gates(layer) as record:
            layer(x)
        assert abs(record.values(0).mean().item() - float(sigmoid(torch.tensor(-2.0)))) < 0.05  # σ(−2) = 0.12
    assert GatedResidual(Branch(8), 8, kind="highway", gate_bias=-3.0).gate_proj.bias.eq(-3.0).all()
    gtrxl = GatedResidual(Branch(8), 8, kind="gtrxl", gate_bias=-1.5)
    assert gtrxl.from_stream.bias[:8].eq(0).all() and gtrxl.from_stream.bias[8:].eq(-1.5).all()


@pytest.mark.parametrize("kind", RESIDUAL_KINDS)
def test_a_recorded_gate_is_its_value_and_a_lesioned_one_carries_x(kind):
    torch.manual_seed(1)
    layer = GatedResidual(Branch(6), 6, kind=kind, dtype=F64)
    x = torch.randn(2, 3, 6, dtype=F64)
    (name, gate), = gate_modules(layer)
    assert isinstance(gate, TransformGate if kind in ("highway", "gtrxl") else BranchGate)
    with record_gates(layer) as record:
        layer(x)
    values = record.values(0)
    if kind == "highway":
        t = sigmoid(x @ layer.gate_proj.weight.t() + layer.gate_proj.bias)
        assert (values - t).abs().max() < 1e-12
    elif kind == "residual":
        assert values.eq(1).all()
    elif kind == "rezero":
        assert values.eq(0).all()
    else:
        assert values.shape == x.shape and ((values > 0) & (values < 1)).all()
    with lesion(layer, [name]):
        assert torch.equal(layer(x), x)
    assert not torch.equal(layer(x), x) or kind == "rezero"


def test_the_gated_residual_network_is_its_equation():
    torch.manual_seed(2)
    grn = GatedResidualNetwork(5, 7, 4, context_size=3, dtype=F64)
    a, c = torch.randn(6, 5, dtype=F64, requires_grad=True), torch.randn(6, 3, dtype=F64, requires_grad=True)
    eta2 = torch.nn.functional.elu(a @ grn.input.weight.t() + grn.input.bias + c @ grn.context.weight.t())
    eta1 = eta2 @ grn.hidden.weight.t() + grn.hidden.bias
    glu = eta1 @ grn.glu.weight.t() + grn.glu.bias
    gated = sigmoid(glu[:, :4]) * glu[:, 4:]
    pre = a @ grn.skip.weight.t() + grn.skip.bias + gated
    mean, var = pre.mean(-1, keepdim=True), pre.var(-1, unbiased=False, keepdim=True)
    want = (pre - mean) / torch.sqrt(var + grn.norm.eps) * grn.norm.weight + grn.norm.bias
    assert (grn(a, c) - want).abs().max() < 1e-12
    assert torch.autograd.gradcheck(grn, (a, c))
    same = GatedResidualNetwork(5, 7, dtype=F64)  # no context, no skip projection: a itself
    assert same.skip is None and torch.autograd.gradcheck(same, (a,))
    with lesion(same, 0):  # the GLU shut: LayerNorm(a)
        assert (same(a) - torch.nn.functional.layer_norm(a, (5,), same.norm.weight, same.norm.bias)).abs().max() \
            < 1e-12


def test_errors_say_what_to_do():
    with pytest.raises(ValueError, match="kind must be one of residual, highway, gtrxl, rezero"):
        GatedResidual(nn.Identity(), 4, kind="gated")
    with pytest.raises(ValueError, match="kind 'rezero' has no gate bias"):
        GatedResidual(nn.Identity(), 4, kind="rezero", gate_bias=-1.0)
    with pytest.raises(ValueError, match="gate_reads is the highway gate's setting"):
        GatedResidual(nn.Identity(), 4, kind="gtrxl", gate_reads="both")
    with pytest.raises(TypeError, match="wraps an nn.Module"):
        GatedResidual(torch.relu, 4)
    with pytest.raises(ValueError, match=r"sublayer must return its input's shape \(2, 4\), got \(2, 3\)"):
        GatedResidual(nn.Linear(4, 3), 4)(torch.randn(2, 4))
    with pytest.raises(ValueError, match=r"expects inputs of shape \(\.\.\., 4\)"):
        GatedResidual(nn.Identity(), 4)(torch.randn(2, 5))
    with pytest.raises(ValueError, match="takes a context"):
        GatedResidualNetwork(4, 8, context_size=2)(torch.randn(3, 4))
    with pytest.raises(ValueError, match="built without context_size"):
        GatedResidualNetwork(4, 8)(torch.randn(3, 4), torch.randn(3, 2))


def test_extra_arguments_go_to_the_sublayer():
    class Scaled(nn.Module):
        def forward(self, x, scale=1.0):
            return x * scale

    layer = GatedResidual(Scaled(), 3, kind="residual")
    x = torch.ones(2, 3)
    assert torch.equal(layer(x, scale=2.0), 3 * x)
