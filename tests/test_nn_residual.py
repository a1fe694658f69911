"""The residual family's parts against their equations written out here in float64, gradcheck, how each
starts, their gates recorded and lesioned, the deprecated GatedResidual, and the errors a user meets."""

import math
import warnings

import pytest
import torch
from conftest import reference_combine
from torch import nn

from highwaynet.analysis import gate_modules, lesion, record_gates
from highwaynet.nn import (
    BranchGate,
    DeepNormSum,
    FixedGate,
    GatedResidual,
    GatedResidualNetwork,
    GRUGate,
    HighwayGate,
    LayerScale,
    Residual,
    ReZero,
    Sum,
    TransformGate,
    deepnorm_alpha,
    deepnorm_beta,
    layerscale_init,
)

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


def branch_of(layer, x):
    s = layer.sublayer
    return (s.b.weight @ torch.tanh(s.a.weight @ x.unsqueeze(-1) + s.a.bias.unsqueeze(-1))).squeeze(-1)


def expected(layer: Residual, x: torch.Tensor) -> torch.Tensor:
    return reference_combine(layer.combine, branch_of(layer, x), x)


def combiners(dim):
    return {"sum": Sum(), "fixed": FixedGate(bias=-1.5), "rezero": ReZero(dtype=F64),
            "layerscale": LayerScale(dim, init=0.1, dtype=F64), "deepnorm": DeepNormSum(alpha=1.7),
            "highway": HighwayGate(dim, dtype=F64), "highway-both": HighwayGate(dim, reads="both", dtype=F64),
            "gtrxl": GRUGate(dim, dtype=F64), "gtrxl-no-relu": GRUGate(dim, relu=False, dtype=F64)}


@pytest.mark.parametrize("name", list(combiners(1)))
def test_each_combiner_is_its_equation_and_passes_gradcheck(name):
    torch.manual_seed(0)
    layer = Residual(Branch(5), combiners(5)[name])
    with torch.no_grad():  # (away from where each starts, so that every parameter shows)
        for p in layer.combine.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(3, 4, 5, dtype=F64, requires_grad=True)
    assert (layer(x) - expected(layer, x)).abs().max() < 1e-12
    assert torch.autograd.gradcheck(layer, (x,))
    params = [p for p in layer.combine.parameters()]
    if params:  # (the combiner's own parameters' gradients too)
        assert torch.autograd.gradcheck(lambda *ps: torch.func.functional_call(
            layer.combine, dict(zip([n for n, _ in layer.combine.named_parameters()], ps, strict=True)),
            (branch_of(layer, x.detach()), x.detach())), tuple(p.detach().requires_grad_() for p in params))


def test_gtrxl_puts_the_papers_relu_on_the_branch_and_can_leave_it_out():
    torch.manual_seed(1)
    paper, without = GRUGate(4, dtype=F64), GRUGate(4, relu=False, dtype=F64)
    without.load_state_dict(paper.state_dict())
    x, f = torch.randn(6, 4, dtype=F64), -torch.rand(6, 4, dtype=F64)  # a branch all negative
    assert torch.equal(paper(f, x), paper(torch.zeros_like(f), x))  # ReLU(f) = 0: the branch is not seen
    assert not torch.allclose(without(f, x), paper(f, x))


def test_each_part_starts_as_documented():
    torch.manual_seed(0)
    dim, x, f = 8, torch.randn(64, 8, dtype=F64), torch.randn(64, 8, dtype=F64)
    assert torch.equal(Sum()(f, x), x + f)
    assert torch.equal(ReZero(dtype=F64)(f, x), x)  # α = 0: the identity
    assert ReZero(init=0.25).alpha.item() == 0.25
    assert LayerScale(dim).gamma.eq(1e-5).all() and LayerScale(dim, init=0.1).gamma.eq(0.1).all()
    assert [layerscale_init(n) for n in (2, 18, 19, 24, 25, 48)] == [0.1, 0.1, 1e-5, 1e-5, 1e-6, 1e-6]  # Touvron
    assert deepnorm_alpha(48) == pytest.approx(96 ** 0.25) and deepnorm_beta(48) == pytest.approx(384 ** -0.25)
    fixed = FixedGate(bias=-3.0)
    with record_gates(fixed) as record:
        out = fixed(f, x)
    t = 1 / (1 + math.exp(3.0))
    assert record.values(0).item() == pytest.approx(t, abs=1e-7) and (out - (t * f + (1 - t) * x)).abs().max() < 1e-7
    assert not list(fixed.parameters()) and not list(DeepNormSum(alpha=2.0).parameters())  # no parameters
    for gate in (HighwayGate(dim, bias=-2.5, dtype=F64), GRUGate(dim, bias=-2.5, dtype=F64)):
        bias = gate.proj.bias if isinstance(gate, HighwayGate) else gate.z_bias
        assert bias.eq(-2.5).all()
        for layer in [m for m in gate.modules() if isinstance(m, nn.Linear)]:  # nn.Linear's: U(±1/√fan-in)
            assert layer.weight.abs().max() <= 1 / math.sqrt(layer.in_features)
            assert layer.weight.std() > 0.5 / math.sqrt(3 * layer.in_features)
        with record_gates(gate) as record:
            gate(f, x)
        assert abs(record.values(0).mean().item() - float(sigmoid(torch.tensor(-2.5)))) < 0.03  # σ(−2.5) = 0.076
    gtrxl = GRUGate(dim)
    assert sum(p.numel() for p in gtrxl.parameters()) == 6 * dim * dim + dim  # six D × D matrices and b_z


@pytest.mark.parametrize("name", list(combiners(1)))
def test_a_recorded_gate_is_its_value_and_a_lesioned_one_carries_the_stream(name):
    torch.manual_seed(1)
    layer = Residual(Branch(6), combiners(6)[name])
    x = torch.randn(2, 3, 6, dtype=F64)
    (gate_name, gate), = gate_modules(layer)
    assert gate_name == "combine.gate"
    assert isinstance(gate, TransformGate if name.startswith(("fixed", "highway", "gtrxl")) else BranchGate)
    with record_gates(layer) as record:
        layer(x)
    values, c = record.values(0), layer.combine
    if name == "highway":
        assert (values - sigmoid(x @ c.proj.weight.t() + c.proj.bias)).abs().max() < 1e-12
    elif name in ("sum", "deepnorm"):
        assert values.eq(1).all()
    elif name == "rezero":
        assert values.eq(0).all()
    elif name == "layerscale":
        assert values.eq(0.1).all()
    elif name == "fixed":
        assert values.item() == pytest.approx(1 / (1 + math.exp(1.5)))
    else:
        assert values.shape[-1] == 6 and ((values > 0) & (values < 1)).all()
    with lesion(layer, [gate_name]):
        shut = layer(x)
    assert torch.equal(shut, 1.7 * x if name == "deepnorm" else x)
    assert name == "rezero" or not torch.equal(layer(x), shut)


def test_the_deprecated_gated_residual_warns_and_is_the_new_parts():
    torch.manual_seed(3)
    x = torch.randn(4, 6, dtype=F64)
    for kind, combine in [("residual", Sum), ("highway", HighwayGate), ("gtrxl", GRUGate), ("rezero", ReZero)]:
        with pytest.warns(DeprecationWarning, match="deprecated since highwaynet 0.4.0.*Residual"):
            old = GatedResidual(Branch(6), 6, kind=kind, dtype=F64)
        assert isinstance(old, Residual) and isinstance(old.combine, combine)
        new = Residual(Branch(6), combine(6, dtype=F64) if combine in (HighwayGate, GRUGate) else combine())
        if kind == "gtrxl":
            assert old.combine.relu is False  # (0.3's form: no ReLU)
            new = Residual(Branch(6), GRUGate(6, relu=False, dtype=F64))
        new.load_state_dict(old.state_dict())
        assert torch.equal(old(x), new(x))
    with pytest.warns(DeprecationWarning):
        assert "kind='gtrxl', gate_bias=-1.0" in repr(GatedResidual(nn.Identity(), 4, kind="gtrxl", gate_bias=-1.0))


def gtrxl_of_0_3(old, y, x):
    """0.3's GatedResidual(kind="gtrxl") written out: no ReLU on y = F(x); from_stream's bias [b_r | b_z]."""
    r_y, z_y, g_y = (y @ old["from_branch.weight"].t()).chunk(3, dim=-1)
    r_x, z_x = (x @ old["from_stream.weight"].t() + old["from_stream.bias"]).chunk(2, dim=-1)
    r, z = sigmoid(r_y + r_x), sigmoid(z_y + z_x)
    candidate = torch.tanh(g_y + (r * x) @ old["candidate.weight"].t())
    return (1 - z) * x + z * candidate


def test_a_state_dict_of_0_3s_gated_residual_loads_exactly_where_it_can():
    # 0.3's GatedResidual kept its gates' parameters on the connection: gate_proj, from_branch, from_stream
    # (with [b_r | b_z]), candidate, alpha. A CausalTransformer run folder of 0.3 holds such names. Highway,
    # plain and ReZero connections load exactly; GTrXL's only while its reset-gate bias b_r is 0 (its initial
    # value: GRUGate has no b_r), and a trained b_r is dropped with a warning: the outputs differ.
    torch.manual_seed(4)
    d = 5
    x = torch.randn(3, d, dtype=F64)
    highway = Residual(Branch(d), HighwayGate(d, dtype=F64))
    old = {"sublayer.a.weight": highway.sublayer.a.weight, "sublayer.a.bias": highway.sublayer.a.bias,
           "sublayer.b.weight": highway.sublayer.b.weight, "gate_proj.weight": torch.randn(d, d, dtype=F64),
           "gate_proj.bias": torch.full((d,), -3.0, dtype=F64)}
    highway.load_state_dict(old)
    assert torch.equal(highway.combine.proj.weight, old["gate_proj.weight"]) and highway.combine.proj.bias.eq(-3).all()
    for reset_bias in (torch.zeros(d, dtype=F64), 0.5 * torch.randn(d, dtype=F64)):
        gtrxl = Residual(Branch(d), GRUGate(d, relu=False, dtype=F64))
        old = {**{k: v for k, v in gtrxl.state_dict().items() if k.startswith("sublayer")},
               "from_branch.weight": torch.randn(3 * d, d, dtype=F64),
               "from_stream.weight": torch.randn(2 * d, d, dtype=F64),
               "from_stream.bias": torch.cat([reset_bias, torch.full((d,), -1.5, dtype=F64)]),
               "candidate.weight": torch.randn(d, d, dtype=F64)}
        want = gtrxl_of_0_3(old, gtrxl.sublayer(x), x)
        if reset_bias.any():
            with pytest.warns(UserWarning, match="reset-gate bias b_r that is not 0.*outputs differ from 0.3's"):
                gtrxl.load_state_dict(dict(old))
            assert (gtrxl(x) - want).abs().max() > 1e-3
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                gtrxl.load_state_dict(dict(old))
            assert (gtrxl(x) - want).abs().max() < 1e-12
        assert gtrxl.combine.z_bias.eq(-1.5).all()
    rezero = Residual(Branch(d), ReZero(dtype=F64))
    rezero.load_state_dict({**{k: v for k, v in rezero.state_dict().items() if k.startswith("sublayer")},
                            "alpha": torch.tensor(0.5, dtype=F64)})
    assert rezero.combine.alpha.item() == 0.5


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
    with pytest.raises(TypeError, match="sublayer must be an nn.Module, got builtin_function_or_method"):
        Residual(torch.relu, Sum())
    with pytest.raises(TypeError, match="combine must be one of highwaynet.nn's combiners"):
        Residual(nn.Identity(), nn.Linear(4, 4))
    with pytest.raises(ValueError, match=r"sublayer must return its input's shape \(2, 4\), got \(2, 3\)"):
        Residual(nn.Linear(4, 3), Sum())(torch.randn(2, 4))
    with pytest.raises(ValueError, match=r"expects inputs of shape \(\.\.\., 4\)"):
        Residual(nn.Identity(), HighwayGate(4))(torch.randn(2, 5))
    with pytest.raises(TypeError, match="dim must be an int, got bool"):
        HighwayGate(True)
    with pytest.raises(ValueError, match="dim must be positive, got 0"):
        LayerScale(0)
    with pytest.raises(ValueError, match="bias must be finite, got nan"):
        FixedGate(bias=float("nan"))
    with pytest.raises(TypeError, match="alpha must be a real number, got str"):
        DeepNormSum(alpha="2")
    with pytest.raises(ValueError, match="reads must be one of 'stream', 'both', got 'branch'"):
        HighwayGate(4, reads="branch")
    with pytest.raises(TypeError, match="relu must be a bool, got int"):
        GRUGate(4, relu=1)
    with pytest.raises(ValueError, match="init must be finite, got inf"):
        ReZero(init=float("inf"))
    with pytest.raises(TypeError, match="num_layers must be an int"):
        layerscale_init(2.5)
    with pytest.raises(ValueError, match="kind must be one of 'residual', 'highway', 'gtrxl', 'rezero'"):
        GatedResidual(nn.Identity(), 4, kind="gated")
    with pytest.raises(ValueError, match="kind 'rezero' has no gate bias"):
        GatedResidual(nn.Identity(), 4, kind="rezero", gate_bias=-1.0)


@pytest.mark.parametrize("which", range(4))
def test_the_gates_refuse_integer_tensors_by_name(which):
    """TransformGate and BranchGate, called by themselves, take floating-point tensors as every layer does:
    an integer h or x was mixed in as a float, an integer sum returned as integers."""
    floats = {"h": torch.ones(3), "t_logits": torch.zeros(3), "x": torch.zeros(3), "c_logits": torch.zeros(3)}
    name = list(floats)[which]
    args = {**floats, name: floats[name].long()}
    gate = TransformGate(carry="independent")
    with pytest.raises(TypeError, match=rf"^TransformGate expects {name} to be a floating-point tensor, got dtype "
                                        rf"torch.int64$"):
        gate(**args)
    if name != "c_logits":
        del args["c_logits"]
        with pytest.raises(TypeError, match=rf"^TransformGate expects {name} to be a floating-point tensor"):
            TransformGate()(**args)
    branch = {"branch": torch.ones(3), "x": torch.zeros(3), "scale": torch.tensor(0.5)}
    name = list(branch)[min(which, 2)]
    with pytest.raises(TypeError, match=rf"^BranchGate expects {name} to be a floating-point tensor, got dtype "
                                        rf"torch.int64$"):
        BranchGate()(**{**branch, name: branch[name].long()})
    assert BranchGate()(**branch).dtype == TransformGate()(**{k: v for k, v in floats.items() if k != "c_logits"}
                                                            ).dtype == torch.float32


def test_extra_arguments_go_to_the_sublayer():
    class Scaled(nn.Module):
        def forward(self, x, scale=1.0):
            return x * scale

    layer = Residual(Scaled(), Sum())
    x = torch.ones(2, 3)
    assert torch.equal(layer(x, scale=2.0), 3 * x)
