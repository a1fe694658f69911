"""The fused gate kernels and the dense highway layer around them, against maths written out here.

The CPU tests exercise the PyTorch reference path (what runs without Triton or a GPU) and the
hand-written backward. The Triton tests run the kernels against that reference on fresh random
inputs, including sizes that do not fill a tile: on a GPU, or without one on the CPU under
Triton's interpreter (the same kernel code, run by NumPy: the arithmetic and the masks, not the
speed), so that CI checks the kernels too.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import (
    DEVICE,
    INTERPRETING,
    interpreter_run,
    interpreter_runs_micro_steps,
    needs_triton,
    process_timeout,
    run_triton_tests_under_the_interpreter,
    triton_elsewhere,
    triton_kernels,
)

from highwaynet.kernels import explain, gating, highway_layer, rhn_layout
from highwaynet.kernels.gating import ACTIVATION_CODES, activation_code
from highwaynet.nn import RHN, Highway

F64 = torch.float64
ACTS = {"identity": lambda v: v, "relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}

@pytest.fixture
def rhn_step():
    """The Triton micro-step kernels' module (it imports Triton: skipped without it)."""
    if gating.triton_version() is None:
        pytest.skip("needs Triton")
    from highwaynet.kernels import rhn_step

    return rhn_step


def expected_gate(z, x, act):
    """The highway gate written out: y = t * f(z_H) + (1 - t) * x, t = 1 / (1 + exp(-z_T))."""
    d = x.shape[-1]
    t = 1 / (1 + torch.exp(-z[:, d:]))
    return t * ACTS[act](z[:, :d]) + (1 - t) * x


@pytest.mark.parametrize("act", list(ACTS))
def test_reference_gate_matches_written_out_maths_and_autograd(act):
    g = torch.Generator().manual_seed(1)
    m, d, code = 9, 7, ACTIVATION_CODES[act]
    z = torch.randn(m, 2 * d, dtype=F64, generator=g, requires_grad=True)
    x = torch.randn(m, d, dtype=F64, generator=g, requires_grad=True)
    dy = torch.randn(m, d, dtype=F64, generator=g)
    y = gating.gate_forward(z.detach(), x.detach(), code)
    torch.testing.assert_close(y, expected_gate(z, x, act).detach())
    expected_gate(z, x, act).backward(dy)
    gz, dx_carry, db = gating.gate_backward(dy, z.detach(), x.detach(), code, bias_grad=True)
    torch.testing.assert_close(gz, z.grad)
    # the carry's share of dx is what autograd gives x when z does not depend on x
    torch.testing.assert_close(dx_carry, x.grad)
    torch.testing.assert_close(db, z.grad.sum(0).float())


@pytest.mark.parametrize("act", list(ACTS))
def test_kept_activations_give_the_same_backward(act):
    g = torch.Generator().manual_seed(2)
    code = ACTIVATION_CODES[act]
    z = torch.randn(6, 10, dtype=F64, generator=g)
    x, dy = torch.randn(6, 5, dtype=F64, generator=g), torch.randn(6, 5, dtype=F64, generator=g)
    kept = z.clone()
    y = gating.gate_forward(kept, x, code, keep_activations=True)
    torch.testing.assert_close(y, gating.gate_forward(z, x, code))
    torch.testing.assert_close(kept[:, 5:], torch.sigmoid(z[:, 5:]))
    for a, b in zip(gating.gate_backward(dy, kept, x, code, activated=True)[:2],
                    gating.gate_backward(dy, z, x, code)[:2], strict=True):
        torch.testing.assert_close(a, b)


def test_gate_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"z of shape \(M, 2D\)"):
        gating.gate_forward(torch.zeros(4, 6), torch.zeros(4, 4), 1)
    with pytest.raises(ValueError, match=r"dy of x.s shape"):
        gating.gate_backward(torch.zeros(3, 4), torch.zeros(4, 8), torch.zeros(4, 4), 1)


def test_activation_codes():
    assert activation_code("ReLU") == ACTIVATION_CODES["relu"]
    assert activation_code(torch.tanh) == ACTIVATION_CODES["tanh"]
    assert activation_code(F.relu) == ACTIVATION_CODES["relu"]
    # (torch's and torch.nn.functional's spellings of one function are different objects: the same code)
    assert activation_code(torch.relu) == ACTIVATION_CODES["relu"]
    assert activation_code(F.tanh) == ACTIVATION_CODES["tanh"]
    assert activation_code(F.sigmoid) == ACTIVATION_CODES["sigmoid"]
    assert activation_code("gelu") is None and activation_code(F.gelu) is None
    assert activation_code(lambda v: v) is None


@pytest.mark.parametrize("act", ["relu", "tanh"])
def test_highway_layer_gradcheck(act):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 4, dtype=F64, generator=g, requires_grad=True)
    w = torch.randn(8, 4, dtype=F64, generator=g, requires_grad=True)
    b = torch.randn(8, dtype=F64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: highway_layer(*a, ACTIVATION_CODES[act]), (x, w, b))


def test_highway_layer_refuses_gradients_of_gradients():
    # its backward records no graph, so create_graph would silently drop the layer's share
    x = torch.randn(2, 4, dtype=F64, requires_grad=True)
    w = torch.randn(8, 4, dtype=F64, requires_grad=True)
    b = torch.zeros(8, dtype=F64, requires_grad=True)
    with pytest.raises(RuntimeError, match="Highway's fused path.*fused=False"):
        torch.autograd.grad(highway_layer(x, w, b, ACTIVATION_CODES["tanh"]).sum(), (x, w), create_graph=True)


def test_highway_layer_matches_the_unfused_layer():
    torch.manual_seed(4)
    net = Highway(6, num_layers=3).double()
    x = torch.randn(5, 6, dtype=F64, requires_grad=True)
    expected = net(x)  # on the CPU Highway runs unfused
    fused = x
    for proj in net.layers:
        fused = highway_layer(fused, proj.weight, proj.bias, ACTIVATION_CODES["relu"])
    torch.testing.assert_close(fused, expected)
    params = [x, *net.parameters()]
    for a, b in zip(torch.autograd.grad(fused.sum(), params), torch.autograd.grad(expected.sum(), params),
                    strict=True):
        torch.testing.assert_close(a, b)


# -- the Triton kernels (GPU, or the CPU under the interpreter) ------------------------------

def _relative_error(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


# Sizes that fill no tile, one and several tiles; the interpreter (NumPy, one program at a time)
# skips the GPU-sized one, which takes it half a minute.
SHAPES = [(1, 1), (37, 5), (300, 130)] + ([] if INTERPRETING else [(1000, 1024)])


@triton_kernels
@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_kernels_match_the_reference(act, shape, dtype):
    m, d = shape
    code = ACTIVATION_CODES[act]
    torch.manual_seed(m * d + code)
    z = torch.randn(m, 2 * d, device=DEVICE, dtype=dtype)
    x, dy = torch.randn(m, d, device=DEVICE, dtype=dtype), torch.randn(m, d, device=DEVICE, dtype=dtype)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    ref_y = gating.gate_forward_reference(z.double(), x.double(), code)
    y = gating.gate_forward(z, x, code)
    assert y.dtype == dtype and _relative_error(y, ref_y) < tol
    ref = gating.gate_backward_reference(dy.double(), z.double(), x.double(), code, bias_grad=True)
    out = gating.gate_backward(dy, z, x, code, bias_grad=True)
    for a, b in zip(out, ref, strict=True):
        assert torch.isfinite(a).all() and _relative_error(a, b) < tol
    # Kept activations: z becomes [f(z_H) | t] in its own dtype, and the backward reads them. Its
    # reference starts from those stored values (in bfloat16 a rounded t makes 1 - t coarse near 1).
    kept = z.clone()
    gating.gate_forward(kept, x, code, keep_activations=True)
    activations = torch.cat([ACTS[act](z[:, :d].double()), torch.sigmoid(z[:, d:].double())], dim=1)
    assert _relative_error(kept, activations) < tol
    ref_kept = gating.gate_backward_reference(dy.double(), kept.double(), x.double(), code, activated=True)
    for a, b in zip(gating.gate_backward(dy, kept, x, code, activated=True)[:2], ref_kept[:2], strict=True):
        assert _relative_error(a, b) < tol


@triton_kernels
def test_triton_backward_sums_the_bias_gradient_over_several_row_blocks():
    """Tall inputs: a program of the backward walks several row blocks, the bias gradient's partial
    sums one row per program (with a last, partial block)."""
    d = 128
    from highwaynet.kernels import triton_gating

    _, block_m, _ = triton_gating._blocks(d)
    m = 2 * 256 * block_m + 7  # the launcher then gives each program two row blocks
    torch.manual_seed(9)
    z, x, dy = (torch.randn(m, k, device=DEVICE) for k in (2 * d, d, d))
    ref = gating.gate_backward_reference(dy.double(), z.double(), x.double(), 2, bias_grad=True)
    out = gating.gate_backward(dy, z, x, 2, bias_grad=True)
    for a, b in zip(out, ref, strict=True):
        assert _relative_error(a, b) < 1e-5
    torch.testing.assert_close(out[2], ref[2], rtol=1e-5, atol=1e-4)  # and column by column


@triton_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_highway_matches_unfused(dtype):
    torch.manual_seed(5)
    net = Highway(200, num_layers=4).to(DEVICE).to(dtype)
    x = torch.randn(3, 111, 200, device=DEVICE, dtype=dtype, requires_grad=True)
    params = [x, *net.parameters()]
    net.fused = True
    y_fused = net(x)
    g_fused = torch.autograd.grad(y_fused.square().sum(), params)
    net.fused = False
    y = net(x)
    g = torch.autograd.grad(y.square().sum(), params)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert _relative_error(y_fused, y) < tol
    for a, b in zip(g_fused, g, strict=True):
        assert _relative_error(a, b) < tol * 10  # gradients sum over rows in another order


@triton_kernels
def test_fused_highway_under_autocast():
    torch.manual_seed(6)
    net = Highway(64, num_layers=2).to(DEVICE)
    x = torch.randn(1100, 64, device=DEVICE, requires_grad=True)
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        y = net(x)
        net.fused = False
        y_ref = net(x)
    assert y.dtype == y_ref.dtype == torch.float32
    assert _relative_error(y, y_ref) < 2e-2
    y.sum().backward()
    assert net.layers[0].weight.grad.dtype == torch.float32 and x.grad.dtype == torch.float32


def expected_micro_steps(s0, mask, weights, adds, grad, extra):
    """Two coupled-carry tanh RHN micro-steps written out in float64, their backward by autograd:
    each one's ``[h | t]`` and new state, and the gradients of each ``z`` and of ``s0``, given the
    last state's gradient ``grad`` and the first's ``extra`` (or None)."""
    s = s0.double().requires_grad_()
    state, hidden, zs, kept, states = s, s0.shape[1], [], [], []
    for w, add in zip(weights, adds, strict=True):
        u = state if mask is None else state * mask.double()
        z = u @ w.double().t() + add.double()
        h, t = torch.tanh(z[:, :hidden]), 1 / (1 + torch.exp(-z[:, hidden:]))
        state = t * h + (1 - t) * state
        zs.append(z), kept.append(torch.cat([h, t], 1).detach()), states.append(state)
    loss = (states[1] * grad.double()).sum() + (0 if extra is None else (states[0] * extra.double()).sum())
    *dz, ds = torch.autograd.grad(loss, (*zs, s))
    return kept, [x.detach() for x in states], dz, ds


# The interpreter computes products of bfloat16 tiles wrongly (NumPy has no bfloat16; the gate
# kernels convert to float32 first): the RHN micro-step's bfloat16 products are checked on a GPU.
MICRO_STEP_DTYPES = [torch.float32] + ([] if INTERPRETING else [torch.bfloat16])


@triton_kernels
@pytest.mark.parametrize("shape, padded", [((1, 1), None), ((5, 70), "halves"), ((20, 33), None), ((37, 130), "states"),
                                           ((37, 130), "halves")])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("dtype", MICRO_STEP_DTYPES)
def test_rhn_micro_step_kernels_match_the_maths(shape, padded, masked, dtype, rhn_step):
    """Two micro-steps, one kernel each way, chained as the RHN runs them: the second's backward
    launch goes on through the first's gate in its epilogue, the first's launch ends at ``s0``.
    Batches of one and of several row tiles, widths that fill no tile or several; the masked case
    also has an output gradient on the first step (``extra``) and a per-row input projection.
    The kernels get the weights and states as they are, or in rows padded to a multiple of 16, as
    the RHN keeps them (``padded="states"``: the states then views of wider rows), and with
    ``"halves"`` each half of ``[h | t]`` and ``dz`` padded too (``RHNPath.ONE_KERNEL_PADDED_HALVES``)."""
    batch, hidden = shape
    torch.manual_seed(batch * hidden + masked)

    def rand(*size):
        return torch.randn(*size, device=DEVICE).to(dtype)
    s0, grad = rand(batch, hidden), rand(batch, hidden)
    weights = [rand(2 * hidden, hidden) / hidden ** 0.5 for _ in range(2)]
    mask = (torch.rand(batch, hidden, device=DEVICE) > 0.3).to(dtype) / 0.7 if masked else None
    adds = [rand(batch, 2 * hidden) if masked else rand(2 * hidden), rand(2 * hidden)]
    extra = rand(batch, hidden) if masked else None
    kept = [torch.empty(batch, 2 * hidden, device=DEVICE, dtype=dtype) for _ in range(2)]
    states = [s0] + [torch.empty_like(s0) for _ in range(2)]
    kernel_weights = weights
    if padded:
        kernel_weights = [rhn_layout.padded_weight(w) for w in weights]
        buffer = rhn_layout.padded_states((3, batch, hidden), s0)
        buffer[0, :, :hidden] = s0
        states = list(buffer[..., :hidden].unbind(0))
        assert states[0].stride(0) > hidden
    if padded == "halves":
        kept = list(rhn_layout.padded_halves((2, batch, 2 * hidden), s0).unbind(0))
        assert kept[0].shape[1] > 2 * hidden
    for k in range(2):
        rhn_step.micro_step_forward(states[k], mask, kernel_weights[k], adds[k], kept[k], states[k + 1])
    # dz in kept's layout (padded halves: zeros between them)
    dz, carried0 = [torch.zeros_like(kept[0]) for _ in range(2)], torch.empty_like(s0)
    # the second micro-step's gate backward (the Triton gate kernel, as the RHN starts its walk)
    kept1 = rhn_layout.unpadded_halves(kept[1], hidden)
    dz1 = torch.empty(batch, 2 * hidden, device=DEVICE, dtype=dtype)
    carried1 = gating.gate_backward(grad, kept1, states[1], ACTIVATION_CODES["tanh"], grad_z=dz1, activated=True)[1]
    rhn_layout.halves(dz[1], hidden).copy_(rhn_layout.halves(dz1, hidden))
    previous = rhn_step.Previous(kept[0], states[0], extra, dz[0], carried0)
    rhn_step.micro_step_backward(dz[1], carried1, kernel_weights[1], mask, previous=previous)
    ds0 = torch.empty_like(s0)
    rhn_step.micro_step_backward(dz[0], carried0, kernel_weights[0], mask, out=ds0)
    ref_kept, ref_states, ref_dz, ref_ds0 = expected_micro_steps(s0, mask, weights, adds, grad, extra)
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    got = [*(rhn_layout.unpadded_halves(a, hidden) for a in kept), *states[1:],
           *(rhn_layout.unpadded_halves(a, hidden) for a in dz), ds0]
    want = [*ref_kept, *ref_states, *ref_dz, ref_ds0]
    names = ["[h | t] 1", "[h | t] 2", "state 1", "state 2", "dz 1", "dz 2", "ds0"]
    for name, a, b in zip(names, got, want, strict=True):
        assert a.dtype == dtype and _relative_error(a, b) < tol, name


def test_padded_halves_round_trip():
    rows = torch.randn(3, 5, 2 * 70)
    buffer = rhn_layout.padded_halves(rows.shape, rows)
    assert buffer.shape == (3, 5, 160) and not buffer.any()
    rhn_layout.halves(buffer, 70).copy_(rhn_layout.halves(rows, 70))
    assert torch.equal(buffer[..., :70], rows[..., :70]) and torch.equal(buffer[..., 80:150], rows[..., 70:])
    assert not buffer[..., 70:80].any() and not buffer[..., 150:].any()
    assert torch.equal(rhn_layout.unpadded_halves(buffer, 70), rows)
    assert rhn_layout.unpadded_halves(rows, 70).data_ptr() == rows.data_ptr()  # unpadded: a view


def test_padded_weight_pads_rows_with_zeros_to_a_multiple_of_16():
    w = torch.randn(2 * 830, 830)
    padded = rhn_layout.padded_weight(w)
    assert padded.shape == (1660, 832) and padded.is_contiguous()
    assert torch.equal(padded[:, :830], w) and not padded[:, 830:].any()
    square = torch.randn(64, 32)
    assert rhn_layout.padded_weight(square) is square


def test_micro_step_refuses_a_weight_of_the_wrong_shape_and_states_without_contiguous_rows(rhn_step):
    state = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"weight of shape \(6, 3\)"):
        rhn_step.micro_step_forward(state, None, torch.zeros(3, 6), torch.zeros(6), torch.zeros(2, 6), state)
    with pytest.raises(ValueError, match="state with contiguous rows"):
        rhn_step.micro_step_forward(torch.zeros(3, 2).t(), None, torch.zeros(6, 3), torch.zeros(6),
                                    torch.zeros(2, 6), state)


def test_micro_step_backward_needs_one_destination(rhn_step):
    t = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="either out or the previous"):
        rhn_step.micro_step_backward(torch.zeros(2, 6), t, torch.zeros(6, 3), None)


@triton_kernels
@pytest.mark.parametrize("path", ["gate kernel", "one kernel", "one kernel, halves padded"])
@pytest.mark.parametrize("loss", ["squares", "sum"])
def test_fused_rhn_with_triton_matches_the_loop(path, loss, monkeypatch):
    """The fused RHN on the Triton paths against the autograd loop: cuBLAS with the gate kernels
    (exact float32), and one kernel a micro-step (TF32 allowed: on a GPU the products round).
    ``sum`` hands the layer an expanded output gradient (stride 0); ``squares`` runs a padded batch.
    Bidirectional: the backward reading takes the same paths on the reversed sequences."""
    import highwaynet.nn.rhn as rhn_module
    from highwaynet.kernels.dispatch import Choice
    from highwaynet.kernels.rhn_recurrence import RHNPath, choose_path

    def choose(*args, **kwargs):  # the layer's own choice; the padded layout where it takes one kernel
        choice = choose_path(*args, **kwargs)
        if choice.path is RHNPath.PERSISTENT:  # (on a GPU, where it takes the window's kernel: one a micro-step here)
            choice = Choice(RHNPath.ONE_KERNEL, "test")
        if path.endswith("halves padded") and choice.path is RHNPath.ONE_KERNEL:
            choice = Choice(RHNPath.ONE_KERNEL_PADDED_HALVES, "test")
        paths.append(choice.path.value)
        return choice

    paths = []
    monkeypatch.setattr(rhn_module, "choose_path", choose)
    tf32 = path != "gate kernel"
    torch.manual_seed(7)
    rhn = RHN(30, 70, depth=3, num_layers=2, state_dropout=0.25, dropout=0.1, bidirectional=True).to(DEVICE)
    x = torch.randn(5, 5, 30, device=DEVICE, requires_grad=True)
    lengths = torch.tensor([5, 2, 4, 5, 1], device=DEVICE) if loss == "squares" else None
    params = [x, *rhn.parameters()]
    results, allowed = [], torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        for fused in (True, False):
            rhn.fused = fused
            torch.manual_seed(8)
            out, state = rhn(x, lengths=lengths)
            total = (out.square().sum() if loss == "squares" else out.sum()) + state.sum()
            results.append((out, state, torch.autograd.grad(total, params)))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed
    assert paths == 4 * [path] + 4 * ["loop"]  # the fused run's two layers, both ways; then the loop's
    (o1, s1, g1), (o2, s2, g2) = results
    rounded = tf32 and DEVICE == "cuda"
    tol = 2e-3 if rounded else 1e-5
    assert _relative_error(o1, o2) < tol and _relative_error(s1, s2) < tol
    for a, b in zip(g1, g2, strict=True):
        assert _relative_error(a, b) < 10 * tol


@pytest.mark.parametrize("masked", [False, True], ids=["no mask", "mask"])
@pytest.mark.parametrize("path, hidden", [("eager", 7), ("eager, halves", 7), ("eager, halves", 8), *(
    pytest.param(p, h, marks=[pytest.mark.triton, needs_triton])
    for p, h in (("gate kernel", 7), ("one kernel", 7), ("one kernel, halves padded", 7),
                 ("one kernel, halves padded", 16)))])
@pytest.mark.skipif(not hasattr(torch.library, "opcheck"), reason="custom operators need torch >= 2.4")
def test_rhn_recurrence_operators_pass_opcheck(path, hidden, masked):
    """The fused RHN's two custom operators under ``torch.library.opcheck``: their fake versions
    (what torch.compile and torch.export trace) give the real outputs' shapes, strides and dtypes,
    their schemas hold (no output aliases an input), and they run the same traced (odd sizes; and
    an even hidden size, which the backward walk splits in column halves after a forward in halves)."""
    torch.manual_seed(0)
    steps, batch, depth = 3, 5, 2
    x_proj = torch.randn(steps, batch, 2 * hidden, device=DEVICE)
    s0 = torch.randn(batch, hidden, device=DEVICE)
    mask = torch.rand(batch, hidden, device=DEVICE) if masked else None
    weights = [torch.randn(2 * hidden, hidden, device=DEVICE) / 3 for _ in range(depth)]
    biases = [torch.randn(2 * hidden, device=DEVICE) for _ in range(depth)]
    from highwaynet.kernels.rhn_recurrence import _backward_op, _forward_op

    forward, backward = _forward_op._opoverload, _backward_op._opoverload
    args = (path, x_proj, s0, mask, weights, biases)
    torch.library.opcheck(forward, args)
    out, saved_a, saved_b = forward(*args)
    torch.library.opcheck(backward, (path, torch.randn_like(out), saved_a, saved_b, mask, weights))


def test_explain_leaves_the_buffers_and_the_random_generators_as_they_were():
    """explain() runs the model once: a batch norm's running statistics and the random draws of the
    user's next call (dropout's) are those they would be without it, and the buffer is the same tensor."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.Dropout(0.5), Highway(8, 1))
    x = torch.randn(16, 8)
    mean, var, seen = (net[1].running_mean, net[1].running_var.clone(), net[1].num_batches_tracked.clone())
    before = mean.clone()
    state = torch.get_rng_state()
    assert [d.layer for d in explain(net, x)] == ["3"]
    assert net[1].running_mean is mean and torch.equal(mean, before) and torch.equal(net[1].running_var, var)
    assert torch.equal(net[1].num_batches_tracked, seen) and torch.equal(torch.get_rng_state(), state)


class _Remembers(torch.nn.Module):
    """A highway layer that keeps its last input's mean in a buffer registered as None, and a count of its
    calls in a buffer it registers on its first."""

    def __init__(self):
        super().__init__()
        self.highway = Highway(8, 1)
        self.register_buffer("last_mean", None)

    def forward(self, x):
        self.last_mean = x.mean(0)
        if "calls" not in self._buffers:
            self.register_buffer("calls", torch.zeros((), dtype=torch.long))
        return self.highway(x)


def test_explain_leaves_no_buffer_it_set_or_added():
    """A buffer the call sets from None is None again after explain(), and one the call registers is gone."""
    net = _Remembers()
    assert [d.layer for d in explain(net, torch.randn(4, 8))] == ["highway"]
    assert net.last_mean is None and "calls" not in dict(net.named_buffers())


class _Grows(torch.nn.Module):
    """A highway layer that keeps every row it has seen in a buffer it resizes in place."""

    def __init__(self):
        super().__init__()
        self.highway = Highway(8, 1)
        self.register_buffer("seen", torch.zeros(0, 8))

    def forward(self, x):
        rows = self.seen.shape[0]
        self.seen.resize_(rows + x.shape[0], 8)[rows:] = x
        return self.highway(x)


def test_explain_restores_a_buffer_resized_in_place():
    net = _Grows()
    first = torch.randn(3, 8)
    net(first)
    seen = net.seen
    assert [d.layer for d in explain(net, torch.randn(4, 8))] == ["highway"]
    assert net.seen is seen and torch.equal(net.seen, first)


def test_explain_under_inference_mode_restores_inference_buffers():
    """A model made under torch.inference_mode has inference tensors for buffers, which a call under
    inference_mode may write in place: explain() called there restores them too."""
    with torch.inference_mode():
        net = torch.nn.Sequential(torch.nn.BatchNorm1d(8), Highway(8, 1))
        mean, seen = net[0].running_mean.clone(), net[0].num_batches_tracked.clone()
        assert [d.layer for d in explain(net, torch.randn(16, 8))] == ["1"]
        assert torch.equal(net[0].running_mean, mean) and torch.equal(net[0].num_batches_tracked, seen)


def test_explain_runs_a_model_on_meta():
    """A model on the meta device (no memory: what path would a large model take?) is explained as any
    other; its buffers have no values to restore."""
    net = torch.nn.Sequential(torch.nn.BatchNorm1d(8), Highway(8, 1)).to("meta")
    decisions = explain(net, torch.randn(16, 8, device="meta"))
    assert [d.layer for d in decisions] == ["1"] and net[0].running_mean.is_meta


@triton_kernels
def test_highway_is_unfused_when_observed():
    net = Highway(8, 2).to(DEVICE)
    x = torch.randn(8192, 8, device=DEVICE)
    assert [d.path for d in explain(net, x)] == ["fused gate kernels"]
    net.gates[0].lesioned = True
    assert [(d.path, d.why) for d in explain(net, x)] == [
        ("unfused", "its gates are being recorded or are lesioned (highwaynet.analysis)")]


@triton_kernels
def test_highway_under_torch_func_transforms_takes_the_reference():
    """Per-sample gradients (vmap over grad) and jvp run where the fused layer would raise: they equal
    each example's own backward, and the Jacobian (by backward passes) times the tangent, through
    the fused kernels."""
    from torch.func import functional_call, grad, jvp, vmap

    torch.manual_seed(0)
    net = Highway(8, 2, activation="tanh").to(DEVICE)
    x = torch.randn(6, 8, device=DEVICE)
    assert [d.path for d in explain(net, x)] == ["fused gate kernels"]
    params = {name: p.detach() for name, p in net.named_parameters()}
    per_sample = vmap(grad(lambda p, row: functional_call(net, p, (row,)).pow(2).sum()), in_dims=(None, 0))(params, x)
    for i in range(x.shape[0]):
        net.zero_grad()
        net(x[i:i + 1]).pow(2).sum().backward()
        for name, p in net.named_parameters():
            torch.testing.assert_close(per_sample[name][i], p.grad, rtol=1e-5, atol=1e-6, msg=name)
    v = torch.randn_like(x)
    jacobian = torch.autograd.functional.jacobian(net, x)  # (6, 8, 6, 8), by the fused backward
    tangent = jvp(net, (x,), (v,))[1]
    torch.testing.assert_close(tangent, torch.einsum("ijkl,kl->ij", jacobian, v), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(torch.cuda.is_available() or INTERPRETING,
                    reason="the Triton tests run in this process (a GPU, or TRITON_INTERPRET=1)")
def test_the_triton_tests_are_counted_where_they_run(request):
    """Without a GPU the session does not list the Triton tests as dozens of skips (0.3 said "75 skipped:
    needs Triton" though they ran): it leaves each file's to its runner (@interpreter_run), which runs
    them and reports them in one line."""
    session = request.session.items
    runners = {item.path for item in session if item.get_closest_marker("interpreter_runner")}
    if not runners:
        pytest.skip("no interpreter runner is selected: the Triton tests stay here")
    assert not [item.name for item in session if item.get_closest_marker("triton") and item.path in runners]
    assert request.config.stash[triton_elsewhere].get(Path(__file__), 0) > 0 or Path(__file__) not in runners


@interpreter_run
@interpreter_runs_micro_steps
def test_triton_kernels_under_the_interpreter(request):
    """Run this file's Triton tests on the CPU under Triton's interpreter (see the helper), counted in one
    line of the session's summary; the interpreter leaves out their GPU-only cases."""
    run_triton_tests_under_the_interpreter(__file__, request)


@pytest.mark.skipif(gating.triton_version() is None, reason="needs Triton")
@pytest.mark.parametrize("switch, expected", [("1", True), ("0", False)])
def test_highwaynet_triton_switch_is_read_at_import(switch, expected):
    """``HIGHWAYNET_TRITON=0`` forces the reference; it and ``TRITON_INTERPRET`` are read when the
    package is imported (not at each call: torch 2.3's compiler cannot trace a read of os.environ)."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "HIGHWAYNET_TRITON": switch}
    code = ("import os, torch; from highwaynet.kernels import gating; "
            "os.environ['HIGHWAYNET_TRITON'] = '0' if os.environ['HIGHWAYNET_TRITON'] == '1' else '1'; "
            "print(gating.triton_available(torch.zeros(1)))")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=process_timeout(120))
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == [str(expected)]


@triton_kernels
@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_triton_paths_carry_non_finite_inputs_as_the_references_do(value):
    """A NaN or infinity in the input: the fused dense layer and the fused RHN (gate kernels, one
    kernel a micro-step) give the unfused layers' outputs and gradients, NaN where those have NaN."""
    torch.manual_seed(0)
    net = Highway(8, 2, activation="tanh").to(DEVICE)
    x = torch.randn(16, 8, device=DEVICE)
    x[3, 2] = value
    results = []
    for fused in (True, False):
        net.fused = fused
        inputs = x.clone().requires_grad_()
        y = net(inputs)
        y.sum().backward()
        results.append((y.detach(), inputs.grad))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, equal_nan=True, rtol=1e-5, atol=1e-5)
    rhn = RHN(8, 16, depth=2).to(DEVICE)
    x = torch.randn(4, 3, 8, device=DEVICE)
    x[1, 0, 2] = value
    allowed = torch.backends.cuda.matmul.allow_tf32
    for tf32 in (False, True):  # the gate kernels, then one kernel a micro-step
        torch.backends.cuda.matmul.allow_tf32 = tf32
        outs = []
        try:
            for fused in (True, False):
                rhn.fused = fused
                outs.append(rhn(x)[0].detach())
        finally:
            torch.backends.cuda.matmul.allow_tf32 = allowed
        tol = 2e-3 if tf32 and DEVICE == "cuda" else 1e-5
        torch.testing.assert_close(outs[0], outs[1], equal_nan=True, rtol=tol, atol=tol)
        assert outs[0].isnan().any() == (value != value)


@triton_kernels
def test_float64_runs_the_pytorch_paths_and_equals_its_float64_maths():
    """The Triton kernels compute in float32: given float64 (where they would run: a GPU, or the
    interpreter), the gate primitives, the dense layer and the RHN take the PyTorch paths, which keep
    float64 (1e-12 from the maths written out here), and explain() says why."""
    torch.manual_seed(0)
    z, x = torch.randn(37, 10, dtype=F64, device=DEVICE), torch.randn(37, 5, dtype=F64, device=DEVICE)
    y = gating.gate_forward(z, x, gating.Activation.TANH)
    assert y.dtype == F64
    assert (y - expected_gate(z, x, "tanh")).abs().max() < 1e-12
    dy = torch.randn_like(x)
    g, dx, _ = gating.gate_backward(dy, z, x, gating.Activation.TANH)
    t = 1 / (1 + torch.exp(-z[:, 5:]))
    assert (dx - dy * (1 - t)).abs().max() < 1e-12
    assert (g[:, :5] - dy * t * (1 - torch.tanh(z[:, :5]) ** 2)).abs().max() < 1e-12

    net = Highway(5, num_layers=3, activation="tanh", dtype=F64, device=DEVICE)
    expected = x
    for proj in net.layers:  # each layer written out: [z_H | z_T] = x Wᵀ + b, then the gate
        expected = expected_gate(expected @ proj.weight.t() + proj.bias, expected, "tanh")
    assert (net(x) - expected).abs().max() < 1e-12
    (decision,) = explain(net, x)
    assert decision.path == "unfused" and "float64" in decision.why

    rhn = RHN(4, 6, depth=3, dtype=F64, device=DEVICE)
    sequence = torch.randn(5, 2, 4, dtype=F64, device=DEVICE)
    fused_out, fused_state = rhn(sequence)
    rhn.fused = False  # the autograd loop over the cell's step: PyTorch operations in float64
    loop_out, loop_state = rhn(sequence)
    rhn.fused = True
    assert fused_out.dtype == F64
    assert (fused_out - loop_out).abs().max() < 1e-12 and (fused_state - loop_state).abs().max() < 1e-12
    (decision,) = explain(rhn, sequence)
    assert decision.path not in ("gate kernel", "one kernel", "loop") and "float64" in decision.why
