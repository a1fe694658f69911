"""The public functions of highwaynet.kernels check their arguments as torch.nn does: a TypeError or
ValueError that names the argument, never an error from deep inside torch (the cases a user's attack
found; tests/test_api_fuzz.py fuzzes every argument of every one of them)."""

import pytest
import torch

from highwaynet.kernels import gate_backward, gate_forward, highway_layer, lstmp_recurrence, rhn_recurrence
from highwaynet.kernels.gating import Activation, activation_code
from highwaynet.kernels.lstmp import LSTMPPath, choose_path, lstmp_recurrence_reference
from highwaynet.kernels.rhn_recurrence import RHNPath

F64 = torch.float64
TANH = Activation.TANH


# -- gate_forward, gate_backward, highway_layer ------------------------------------------------------

def _gate(m=3, d=4, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return torch.randn(m, 2 * d, generator=g, dtype=dtype), torch.randn(m, d, generator=g, dtype=dtype)


@pytest.mark.parametrize("code, error, match", [
    ("tanh", TypeError, r"code must be an Activation .*activation_code.*got str 'tanh'"),
    (True, TypeError, r"code must be an Activation"),
    (2.0, TypeError, r"code must be an Activation"),
    (None, TypeError, r"code must be an Activation"),
    (7, ValueError, r"code must be an Activation, one of IDENTITY \(0\), .*got 7"),
])
def test_the_gate_functions_refuse_a_code_that_is_no_activation_by_name(code, error, match):
    z, x = _gate()
    with pytest.raises(error, match=match):
        gate_forward(z, x, code)
    with pytest.raises(error, match=match):
        gate_backward(torch.ones_like(x), z, x, code)
    with pytest.raises(error, match=match):
        highway_layer(x, torch.randn(8, 4), torch.randn(8), code)


def test_a_code_given_as_its_int_or_found_by_name_is_the_activation():
    z, x = _gate()
    want = gate_forward(z, x, TANH)
    torch.testing.assert_close(gate_forward(z, x, 2), want, rtol=0, atol=0)
    torch.testing.assert_close(gate_forward(z, x, activation_code("tanh")), want, rtol=0, atol=0)


def test_the_gate_functions_refuse_a_list_for_a_tensor_by_name():
    z, x = _gate()
    with pytest.raises(TypeError, match=r"^z must be a torch.Tensor, got list"):
        gate_forward(z.tolist(), x, TANH)
    with pytest.raises(TypeError, match=r"^x must be a torch.Tensor, got list"):
        gate_forward(z, x.tolist(), TANH)
    with pytest.raises(TypeError, match=r"^dy must be a torch.Tensor, got list"):
        gate_backward(x.tolist(), z, x, TANH)
    with pytest.raises(TypeError, match=r"^x must be a floating-point tensor, got dtype torch.int64"):
        gate_forward(z, x.long(), TANH)
    with pytest.raises(TypeError, match=r"^x must be a torch.Tensor, got list"):
        highway_layer(x.tolist(), torch.randn(8, 4), torch.randn(8), TANH)
    with pytest.raises(TypeError, match=r"^weight must be a torch.Tensor"):
        highway_layer(x, torch.randn(8, 4).tolist(), torch.randn(8), TANH)
    with pytest.raises(TypeError, match=r"^bias must be a floating-point tensor"):
        highway_layer(x, torch.randn(8, 4), torch.ones(8, dtype=torch.long), TANH)


def test_the_gate_functions_refuse_wrong_buffers_and_flags_by_name():
    z, x = _gate()
    with pytest.raises(TypeError, match=r"^out must have the output's dtype torch.float64"):
        gate_forward(z.double(), x, TANH, out=torch.empty(3, 4))
    with pytest.raises(ValueError, match=r"^out must have the shape \(3, 4\) and contiguous rows"):
        gate_forward(z, x, TANH, out=torch.empty(4, 3).t())
    with pytest.raises(ValueError, match=r"^grad_z must have the shape \(3, 8\)"):
        gate_backward(torch.ones_like(x), z, x, TANH, grad_z=torch.empty(3, 4))
    with pytest.raises(TypeError, match=r"^keep_activations must be a bool, got str 'yes'"):
        gate_forward(z, x, TANH, keep_activations="yes")
    with pytest.raises(TypeError, match=r"^bias_grad must be a bool"):
        gate_backward(torch.ones_like(x), z, x, TANH, bias_grad=None)
    with pytest.raises(TypeError, match=r"^activated must be a bool"):
        gate_backward(torch.ones_like(x), z, x, TANH, activated=1)


def test_highway_layer_refuses_wrong_shapes_by_name():
    x = torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match=r"^weight must be \(2D, D\) = \(8, 4\) for x of shape \(2, 3, 4\), "
                                         r"got \(4, 8\)"):
        highway_layer(x, torch.randn(4, 8), torch.randn(8), TANH)
    with pytest.raises(ValueError, match=r"^bias must be \(2D,\) = \(8,\), got \(4,\)"):
        highway_layer(x, torch.randn(8, 4), torch.randn(4), TANH)
    with pytest.raises(ValueError, match=r"^x must be \(\*, D\) with D >= 1 features, got shape \(\)"):
        highway_layer(torch.tensor(1.0), torch.randn(8, 4), torch.randn(8), TANH)
    with pytest.raises(ValueError, match=r"^x must be \(\*, D\) with D >= 1 features, got shape \(3, 0\)"):
        highway_layer(torch.randn(3, 0), torch.randn(0, 0), torch.randn(0), TANH)


def test_the_kernels_refuse_a_tensor_on_another_device_by_name():
    """A tensor on the meta device stands for one on another GPU: each function names it and the device."""
    z, x = _gate()
    with pytest.raises(ValueError, match=r"^x must be on cpu, the device of z, got meta"):
        gate_forward(z, x.to("meta"), TANH)
    with pytest.raises(ValueError, match=r"^out must be on cpu, the device of z, got meta"):
        gate_forward(z, x, TANH, out=torch.empty(3, 4, device="meta"))
    with pytest.raises(ValueError, match=r"^dy must be on cpu, the device of z, got meta"):
        gate_backward(torch.ones_like(x, device="meta"), z, x, TANH)
    with pytest.raises(ValueError, match=r"^bias must be on cpu, the device of x, got meta"):
        highway_layer(x, torch.randn(8, 4), torch.randn(8, device="meta"), TANH)
    with pytest.raises(ValueError, match=r"^biases\[1\] must be on cpu, the device of x_proj, got meta"):
        args = _rhn()
        rhn_recurrence(**{**args, "biases": [args["biases"][0], args["biases"][1].to("meta")]})


# -- rhn_recurrence ----------------------------------------------------------------------------------

def _rhn(steps=5, batch=2, hidden=4, depth=2, dtype=torch.float32):
    g = torch.Generator().manual_seed(1)
    return {"x_proj": torch.randn(steps, batch, 2 * hidden, generator=g, dtype=dtype),
            "s0": torch.randn(batch, hidden, generator=g, dtype=dtype),
            "weights": [torch.randn(2 * hidden, hidden, generator=g, dtype=dtype) / 4 for _ in range(depth)],
            "biases": [torch.randn(2 * hidden, generator=g, dtype=dtype) for _ in range(depth)]}


@pytest.mark.parametrize("change, error, match", [
    ({"x_proj": torch.randn(5, 8)}, ValueError, r"^x_proj must be \(T, B, 2H\) with H >= 1, got shape \(5, 8\)"),
    ({"x_proj": torch.randn(5, 2, 7)}, ValueError, r"^x_proj must be \(T, B, 2H\)"),
    ({"x_proj": torch.randn(0, 2, 8)}, ValueError, r"^x_proj must hold at least one step \(T >= 1\)"),
    ({"s0": torch.randn(2, 5)}, ValueError, r"^s0 must be \(B, H\) = \(2, 4\) for x_proj of shape \(5, 2, 8\), "
                                            r"got \(2, 5\)"),
    ({"s0": torch.randn(4)}, ValueError, r"^s0 must be \(B, H\)"),
    ({"weights": []}, ValueError, r"^weights must hold one tensor per micro-layer \(a depth of at least 1\)"),
    ({"weights": [], "biases": []}, ValueError, r"^weights must hold one tensor per micro-layer"),
    ({"biases": [torch.randn(8)]}, ValueError, r"^biases must hold one tensor per micro-layer, as weights \(2\), "
                                               r"got 1"),
    ({"weights": [torch.randn(8, 4), torch.randn(4, 8)]}, ValueError,
     r"^weights\[1\] must be \(2H, H\) = \(8, 4\), got \(4, 8\)"),
    ({"biases": [torch.randn(8), torch.randn(4)]}, ValueError, r"^biases\[1\] must be \(2H,\) = \(8,\), got \(4,\)"),
    ({"mask": torch.ones(2, 5)}, ValueError, r"^mask must be \(B, H\) = \(2, 4\) or None, got \(2, 5\)"),
    ({"x_proj": torch.ones(5, 2, 8, dtype=torch.long)}, TypeError,
     r"^x_proj must be a floating-point tensor, got dtype torch.int64"),
    ({"s0": torch.zeros(2, 4, dtype=torch.int32)}, TypeError, r"^s0 must be a floating-point tensor"),
    ({"weights": [torch.ones(8, 4, dtype=torch.long)] * 2}, TypeError,
     r"^weights\[0\] must be a floating-point tensor"),
    ({"mask": torch.ones(2, 4, dtype=torch.bool)}, TypeError, r"^mask must be a floating-point tensor"),
    ({"weights": torch.tensor(1.0)}, TypeError, r"^weights must be a list of tensors, one per micro-layer, "
                                                r"got a tensor"),
    ({"weights": {0: torch.randn(8, 4)}}, TypeError, r"^weights must be a list of tensors"),
    ({"biases": None}, TypeError, r"^biases must be a list of tensors"),
    ({"s0": torch.zeros(2, 4, dtype=F64)}, TypeError,
     r"^s0 must have x_proj's dtype torch.float32, got torch.float64 \(convert one to the other"),
    ({"biases": [torch.randn(8), torch.randn(8, dtype=F64)]}, TypeError, r"^biases\[1\] must have x_proj's dtype"),
    ({"path": "eager"}, TypeError, r"^path must be an RHNPath or None, got str 'eager'"),
    ({"path": RHNPath.LOOP}, ValueError, r"^path must be a fused RHNPath"),
])
def test_rhn_recurrence_refuses_a_wrong_argument_by_name(change, error, match):
    with pytest.raises(error, match=match):
        rhn_recurrence(**{**_rhn(), **change})


def test_rhn_recurrence_takes_the_micro_layers_as_a_parameter_list_or_stacked():
    args = _rhn()
    want = rhn_recurrence(**args)
    listed = torch.nn.ParameterList(args["weights"]), torch.nn.ParameterList(args["biases"])
    stacked = torch.stack(args["weights"]), torch.stack(args["biases"])
    for weights, biases in (listed, stacked, (tuple(args["weights"]), tuple(args["biases"]))):
        torch.testing.assert_close(rhn_recurrence(**{**args, "weights": weights, "biases": biases}), want,
                                   rtol=0, atol=0)


def test_rhn_recurrence_mixes_dtypes_under_autocast_only_as_autocast_casts():
    """Under autocast (an RHN's input projection in bfloat16, its state and weights float32) the recurrence
    runs, close to float32's; float64 beside float32 is refused there too (autocast does not cast it)."""
    args = _rhn()
    want = rhn_recurrence(**args)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = rhn_recurrence(**{**args, "x_proj": args["x_proj"].bfloat16()})
        with pytest.raises(TypeError, match=r"^s0 must have x_proj's dtype .*not float64"):
            rhn_recurrence(**{**args, "s0": args["s0"].double()})
    assert got.shape == want.shape and torch.isfinite(got).all()
    torch.testing.assert_close(got.float(), want, rtol=0.05, atol=0.05)


# -- lstmp_recurrence: mixed dtypes --------------------------------------------------------------------

def _lstmp(steps=4, batch=2, cells=5, proj=3):
    g = torch.Generator().manual_seed(2)
    return (torch.randn(steps, batch, 4 * cells, generator=g), torch.randn(4 * cells, proj, generator=g) / 2,
            torch.randn(proj, cells, generator=g) / 2, torch.randn(batch, proj, generator=g),
            torch.randn(batch, cells, generator=g))


@pytest.mark.parametrize("which, name", [(1, "weight_hh"), (2, "weight_proj"), (3, "h0"), (4, "c0")])
@pytest.mark.parametrize("path", [None, LSTMPPath.CPP, LSTMPPath.PYTORCH])
def test_lstmp_recurrence_refuses_mixed_dtypes_by_name(which, name, path):
    args = list(_lstmp())
    args[which] = args[which].double()
    with pytest.raises(TypeError, match=rf"^lstmp_recurrence: {name} must have gates' dtype torch.float32, "
                                        rf"got torch.float64 \(convert one to the other"), torch.no_grad():
        lstmp_recurrence(*args, path=path)


def test_lstmp_choose_path_takes_only_the_tensors_that_decide():
    """Every path runs per-row lengths, so choose_path takes none (it took them, unused): a caller passing
    them is told, rather than led to think a padded batch changes the choice."""
    args = _lstmp()
    assert isinstance(choose_path(*args).path, LSTMPPath)
    with pytest.raises(TypeError, match="positional argument"):
        choose_path(*args, torch.tensor([4, 2]))


@pytest.mark.parametrize("mixed", ["gates", "h0"])
def test_lstmp_recurrence_under_autocast_runs_mixed_dtypes_on_the_pytorch_path(mixed):
    """Under CPU autocast a float32 window beside a bfloat16 tensor (gates, as an autocast product makes
    them, or a state) runs: the PyTorch path, which the choice names, close to float32's; the C++ loop,
    which runs one dtype, refuses it when forced; float64 beside float32 is refused still."""
    args = _lstmp()
    lengths = torch.tensor([4, 2])
    want = lstmp_recurrence_reference(*args, lengths, cell_clip=3.0, proj_clip=2.0)
    low = list(args)
    low[0 if mixed == "gates" else 3] = low[0 if mixed == "gates" else 3].bfloat16()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        choice = choose_path(*low)
        got = lstmp_recurrence(*low, lengths, cell_clip=3.0, proj_clip=2.0)
        why = "runs float32 and float64, not bfloat16" if mixed == "gates" else r"mixed dtypes \(bfloat16, float32\)"
        with pytest.raises(RuntimeError, match=rf"the C\+\+ loop cannot run: .*{why}"):
            lstmp_recurrence(*low, lengths, path=LSTMPPath.CPP)
        with pytest.raises(TypeError, match=r"^lstmp_recurrence: weight_hh must have gates' dtype"):
            lstmp_recurrence(args[0], args[1].double(), *args[2:], lengths)
    assert choice.path is LSTMPPath.PYTORCH and "mixed dtypes" in choice.why
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and torch.isfinite(a).all()
        torch.testing.assert_close(a.float(), b, rtol=0.05, atol=0.05)
