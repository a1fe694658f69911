"""The persistent recurrence kernels (:mod:`highwaynet.kernels.triton_persistent`): the RHN layer's window
and the LSTM with projection and clipping, against maths written out here in float64.

The ``triton`` tests run on a GPU, or without one on the CPU under Triton's interpreter (one
program a grid there: the interpreter runs a grid's programs one after another, so a second would
wait at the first barrier for ever; several tiles a program check the tiling). The ``gpu`` tests
run several programs at once, which only a GPU does: the grid barrier itself is checked there.
"""

import os
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import (
    DEVICE,
    cuda,
    interpreter_run,
    interpreter_runs_micro_steps,
    run_triton_tests_under_the_interpreter,
    triton_kernels,
)

from highwaynet.elmo import ProjectedLSTM
from highwaynet.kernels import explain, persistent
from highwaynet.kernels import lstmp as lstmp_module
from highwaynet.kernels.dispatch import Choice
from highwaynet.kernels.lstmp import LSTMPPath, choose_path, lstmp_recurrence, lstmp_recurrence_reference
from highwaynet.kernels.persistent import (
    MAX_BATCH,
    Budget,
    Tiles,
    device_budget,
    dtype_refusal,
    lstmp_refusal,
    programs_for,
    size_refusal,
)
from highwaynet.kernels.rhn_recurrence import RHNPath
from highwaynet.nn import RHN

F64 = torch.float64
TINY = Tiles(16, 16, 16)  # several tiles and contraction steps at the tests' small sizes


@pytest.fixture
def set_tf32():
    """Sets ``torch.backends.cuda.matmul.allow_tf32`` for a test, restored after it (pytest's monkeypatch
    cannot: from pytest 9 it restores an instance's own attribute, which the cuBLAS module has none of)."""
    before = torch.backends.cuda.matmul.allow_tf32
    yield lambda allow: setattr(torch.backends.cuda.matmul, "allow_tf32", allow)
    torch.backends.cuda.matmul.allow_tf32 = before


def gpu(test):
    """A test that needs a GPU: several programs at once (``-m gpu`` selects it)."""
    return pytest.mark.gpu(cuda(test))


def relative_error(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def tolerance(dtype):
    """float32: exact products (1e-5); TF32 rounds them on a GPU; bfloat16 rounds every stored value."""
    if dtype == torch.bfloat16:
        return 3e-2
    return 2e-3 if DEVICE == "cuda" and torch.backends.cuda.matmul.allow_tf32 else 1e-5


# -- the maths, written out --------------------------------------------------------------------------

def expected_rhn(x_proj, s0, mask, weights, biases, carry):
    """All states of an RHN layer in float64 (RHNCell's equations): micro-layer d of step t makes
    z = (s m) R_dᵀ + b_d (+ x_t at d = 0), h = tanh z_H, t = σ(z_T), and s' = t h + (1 − t) s
    (coupled) or t h + σ(z_C) s (independent)."""
    hidden = s0.shape[-1]
    s, states = s0, []
    for x_t in x_proj.unbind(0):
        for d, (w, b) in enumerate(zip(weights, biases, strict=True)):
            z = (s if mask is None else s * mask) @ w.t() + b + (x_t if d == 0 else 0)
            h, t = torch.tanh(z[:, :hidden]), torch.sigmoid(z[:, hidden:2 * hidden])
            s = t * h + ((1 - t) * s if carry == "coupled" else torch.sigmoid(z[:, 2 * hidden:]) * s)
        states.append(s)
    return torch.stack(states)


def expected_lstmp(x_proj, h0, c0, w_h, w_p, forget_bias=1.0, cell_clip=None, proj_clip=None, lengths=None):
    """TensorFlow's LSTMCell(num_proj, cell_clip, proj_clip), as ELMo's biLM runs it, in NumPy float64:
    gates i, j, f, o in that order from [x, h] times the kernel (the input part given as x_proj);
    c = σ(f + forget_bias) c + σ(i) tanh(j), clipped; h = (σ(o) tanh(c)) W_Pᵀ, clipped. With ``lengths``
    (``dynamic_rnn``'s ``sequence_length``), row b steps only while t < lengths[b]: after that its h
    and c stay as they were and its output is 0."""
    x, h, c, wh, wp = (t.detach().cpu().double().numpy() for t in (x_proj, h0, c0, w_h, w_p))
    cells = c.shape[1]
    ends = np.full(len(h), len(x)) if lengths is None else lengths.cpu().numpy()

    def sigmoid(v):
        return 1 / (1 + np.exp(-v))
    outputs = []
    for t, x_t in enumerate(x):
        lstm_matrix = x_t + h @ wh.T
        i, j, f, o = (lstm_matrix[:, n * cells:(n + 1) * cells] for n in range(4))
        new_c = sigmoid(f + forget_bias) * c + sigmoid(i) * np.tanh(j)
        if cell_clip is not None:
            new_c = np.clip(new_c, -cell_clip, cell_clip)
        new_h = (sigmoid(o) * np.tanh(new_c)) @ wp.T
        if proj_clip is not None:
            new_h = np.clip(new_h, -proj_clip, proj_clip)
        stepping = (t < ends)[:, None]
        h, c = np.where(stepping, new_h, h), np.where(stepping, new_c, c)
        outputs.append(np.where(stepping, new_h, 0.0))
    return tuple(torch.from_numpy(a) for a in (np.stack(outputs), h, c))


def clips_act(inputs, cell_clip, proj_clip):
    """Whether each clip changes the window (the cell's alone, then the output's on top)."""
    unclipped, cell_only, both = (expected_lstmp(*inputs, 1.0, *clips)[0]
                                  for clips in ((None, None), (cell_clip, None), (cell_clip, proj_clip)))
    return not torch.allclose(unclipped, cell_only) and (both.abs() == proj_clip).any().item()


def rhn_window(steps, batch, hidden, depth, carry, masked, dtype, device=DEVICE, seed=0):
    parts = 2 if carry == "coupled" else 3
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device, dtype)
    x_proj, s0 = rand(steps, batch, parts * hidden), rand(batch, hidden)
    weights = [rand(parts * hidden, hidden, scale=hidden ** -0.5) for _ in range(depth)]
    biases = [rand(parts * hidden) for _ in range(depth)]
    mask = ((torch.rand(batch, hidden, generator=g) > 0.3).to(dtype) / 0.7).to(device, dtype) if masked else None
    return x_proj, s0, mask, weights, biases


def lstmp_inputs(steps, batch, cells, proj, dtype, device=DEVICE, seed=0):
    """Inputs large enough that both clips act (checked by the tests)."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device, dtype)
    return (rand(steps, batch, 4 * cells, scale=2.0), rand(batch, proj), rand(batch, cells, scale=3.0),
            rand(4 * cells, proj, scale=2 * proj ** -0.5), rand(proj, cells, scale=4 * cells ** -0.5))


def check_padded_window(got, want, lengths, h0, c0, tol):
    """The kernel's ``(outputs, h, c)`` over a padded batch against the maths': within ``tol``, exactly 0
    past each row's length, and each row's final state at its own end (a row of length 0: its initial
    state, exactly: the kernel holds it, whatever its dtype)."""
    for name, a, b in zip(("outputs", "h", "c"), got, want, strict=True):
        assert a.dtype == h0.dtype and a.shape == b.shape and relative_error(a.cpu(), b) < tol, name
    out, h, c = got
    for row, end in enumerate(lengths.tolist()):
        assert out[end:, row].eq(0).all(), row
        if end:
            assert relative_error(h[row].cpu(), want[1][row]) < tol and relative_error(c[row].cpu(), want[2][row]) < tol
        else:
            assert h[row].equal(h0[row]) and c[row].equal(c0[row]), row


def window_tolerance(inputs, clips, lengths=None):
    """The tolerance of a window of :func:`lstmp_inputs` against the maths: :func:`tolerance`, or twice
    PyTorch's own loop's distance from them in the same precision where that is larger (its outputs
    and final states; with ``lengths``, each row's final state too, as :func:`check_padded_window`
    checks them): these weights amplify rounding from step to step, so that over 10 steps in bfloat16
    PyTorch's loop itself is some 7e-2 away, a row 1.4e-1; TF32 rounds too."""
    want = expected_lstmp(*inputs, 1.0, *clips, lengths)
    got = lstmp_recurrence_reference(*seam_args(inputs), lengths, cell_clip=clips[0], proj_clip=clips[1])
    errors = [relative_error(a.cpu(), b) for a, b in zip(got, want, strict=True)]
    if lengths is not None:
        errors += [relative_error(got[k][r].cpu(), want[k][r]) for k in (1, 2) for r in lengths.nonzero()[:, 0]]
    return max(tolerance(inputs[0].dtype), 2 * max(errors))


def seam_args(inputs, forget_bias=1.0):
    """:func:`lstmp_recurrence`'s first arguments from :func:`lstmp_inputs`' (``x_proj, h0, c0, w_h,
    w_p``): ``gates`` is ``x_proj`` with the forget bias added to its ``f`` part, as the caller
    (:class:`ProjectedLSTM`) folds it in, then the weights and the state."""
    x_proj, h0, c0, w_h, w_p = inputs
    cells = c0.shape[1]
    gates = x_proj.clone()
    gates[..., 2 * cells:3 * cells] += forget_bias
    return gates, w_h, w_p, h0, c0


# -- the CPU: the reference, the rules, the choice ------------------------------------------------

def test_lstmp_reference_is_tensorflows_cell_with_its_clips():
    """The reference against the cell written out in NumPy, both clips acting (the window differs
    without them); the forget bias is the caller's (gates without it are the cell with forget_bias
    0); rows that end early (TensorFlow's ``sequence_length``) are each its own shorter window, zeros
    after it; no projection is the identity projection, unclipped."""
    inputs = lstmp_inputs(4, 3, 6, 5, F64, device="cpu")
    out, h, c = lstmp_recurrence_reference(*seam_args(inputs), cell_clip=3.0, proj_clip=2.0)
    want_out, want_h, want_c = expected_lstmp(*inputs, cell_clip=3.0, proj_clip=2.0)
    torch.testing.assert_close(out, want_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(h, want_h, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(c, want_c, rtol=1e-12, atol=1e-12)
    assert clips_act(inputs, 3.0, 2.0)
    no_bias = lstmp_recurrence_reference(*seam_args(inputs, 0.0), cell_clip=3.0, proj_clip=2.0)[0]
    torch.testing.assert_close(no_bias, expected_lstmp(*inputs, 0.0, 3.0, 2.0)[0], rtol=1e-12, atol=1e-12)

    lengths = torch.tensor([4, 2, 0])
    out, h, c = lstmp_recurrence_reference(*seam_args(inputs), lengths, cell_clip=3.0, proj_clip=2.0)
    x_proj, h0, c0, w_h, w_p = inputs
    for row, steps in enumerate(lengths.tolist()):
        one = (x_proj[:steps, row:row + 1], h0[row:row + 1], c0[row:row + 1], w_h, w_p)
        row_out, row_h, row_c = (expected_lstmp(*one, 1.0, 3.0, 2.0) if steps
                                 else (out[:0, :1], h0[row:row + 1], c0[row:row + 1]))
        torch.testing.assert_close(out[:steps, row:row + 1], row_out, rtol=1e-12, atol=1e-12)
        assert out[steps:, row].eq(0).all()
        torch.testing.assert_close(h[row:row + 1], row_h, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(c[row:row + 1], row_c, rtol=1e-12, atol=1e-12)
    # (the maths' own lengths, which the kernel's tests use, are these per-row windows too)
    for got, want in zip((out, h, c), expected_lstmp(*inputs, 1.0, 3.0, 2.0, lengths), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)

    square = lstmp_inputs(4, 3, 6, 6, F64, device="cpu")
    gates, w_h, _, h0, c0 = seam_args(square)
    out, h, c = lstmp_recurrence_reference(gates, w_h, None, h0, c0, cell_clip=3.0, proj_clip=0.01)
    want_out, _, want_c = expected_lstmp(*square[:4], torch.eye(6, dtype=F64), cell_clip=3.0)
    torch.testing.assert_close(out, want_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(c, want_c, rtol=1e-12, atol=1e-12)


def test_lstmp_recurrence_on_the_cpu_takes_the_cpp_loop_and_says_why(monkeypatch):
    """On the CPU the C++ loop (float32, float64) or the PyTorch operations (other dtypes, a
    gradient, compiling), each reason ending in why not the persistent kernel; a forced path that
    cannot run these tensors is refused, not run wrong."""
    inputs = lstmp_inputs(3, 2, 6, 5, torch.float32, device="cpu")
    args = seam_args(inputs)
    choice = choose_path(*args)
    assert choice == Choice(LSTMPPath.CPP, "a float32 or float64 CPU tensor; not the persistent kernel: it runs on "
                                           "CUDA tensors only")
    out, h, c = lstmp_recurrence(*args, cell_clip=3.0, proj_clip=2.0)
    for got, want in zip((out, h, c), lstmp_recurrence_reference(*args, cell_clip=3.0, proj_clip=2.0), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    half = choose_path(*(t.bfloat16() for t in args))
    assert half == Choice(LSTMPPath.PYTORCH, "the C++ loop runs float32 and float64, not bfloat16; not the "
                                             "persistent kernel: it runs on CUDA tensors only")
    w_h = args[1].clone().requires_grad_()
    with_grad = (args[0], w_h, *args[2:])
    assert choose_path(*with_grad) == Choice(LSTMPPath.PYTORCH, "a gradient is needed: the C++ loop and the "
                                                                "persistent kernel run forward only")
    for path in (LSTMPPath.PERSISTENT, LSTMPPath.CPP):
        with pytest.raises(RuntimeError, match=re.escape(f"the {path.value} runs forward only")):
            lstmp_recurrence(*with_grad, path=path)
    with pytest.raises(RuntimeError, match="needs Triton and CUDA tensors"):
        lstmp_recurrence(*args, path=LSTMPPath.PERSISTENT)
    gates, w_square, _, h_square, c_square = seam_args(lstmp_inputs(3, 2, 6, 6, torch.float32, device="cpu"))
    with pytest.raises(RuntimeError, match="computes an LSTM with a projection"):
        lstmp_recurrence(gates, w_square, None, h_square, c_square, path=LSTMPPath.PERSISTENT)
    with pytest.raises(RuntimeError, match="needs Triton and CUDA tensors"):  # (a padded batch is no reason)
        lstmp_recurrence(*args, torch.tensor([3, 0]), path=LSTMPPath.PERSISTENT)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)  # (neither is a custom operator)
    assert choose_path(*args).why.startswith("torch.compile and torch.export trace the PyTorch operations")


def test_the_lstm_kernel_is_refused_where_it_would_compute_another_function(monkeypatch):
    """Within the device's limits (set aside here: as on a GPU, opted in) the kernel still needs a
    projection; a padded batch (rows that end inside the window, or at its start) takes it, as rows
    all full do (the lengths take no part in the choice: every path runs them)."""
    monkeypatch.setattr(persistent, "_refusal", lambda *args: None)
    x_proj, h0, c0, w_h, w_p = inputs = lstmp_inputs(3, 2, 6, 5, torch.float32, device="cpu")
    assert lstmp_refusal(x_proj, h0, c0, w_h, w_p) is None
    no_projection = "no projection (P = C), where it computes one"
    assert lstmp_refusal(x_proj, h0, c0, w_h, None) == no_projection
    args = seam_args(inputs)
    assert choose_path(*args) == Choice(LSTMPPath.PERSISTENT, "CUDA, products on tensor cores, weights within the "
                                                              "GPU's L2 cache")
    taken = []  # (the kernel stood in for: each call that reaches it, with its lengths)
    monkeypatch.setattr(lstmp_module, "_persistent",
                        lambda *a: taken.append(a[5]) or lstmp_recurrence_reference(*a[:6]))
    padded = [torch.tensor([3, 3]), torch.tensor([3, 1]), torch.tensor([0, 2])]
    with torch.no_grad():
        for lengths in (None, *padded):
            lstmp_recurrence(*args, lengths)
    assert len(taken) == 4 and taken[0] is None and all(a is b for a, b in zip(taken[1:], padded, strict=True))
    gates, w_square, _, h_square, c_square = seam_args(lstmp_inputs(3, 2, 6, 6, torch.float32, device="cpu"))
    assert choose_path(gates, w_square, None, h_square, c_square) == Choice(
        LSTMPPath.CPP, f"a float32 or float64 CPU tensor; not the persistent kernel: {no_projection}")
    monkeypatch.setattr(persistent, "_refusal", lambda *args: "a batch of 200 rows, over its 128")
    assert choose_path(*args).why.endswith("not the persistent kernel: a batch of 200 rows, over its 128")


@pytest.mark.parametrize("change, error, match", [
    (lambda a: a.update(gates=a["gates"][..., :-1]), ValueError, r"gates must be \(T, B, 4C\)"),
    (lambda a: a.update(weight_hh=a["weight_hh"].t()), ValueError, r"weight_hh must be \(4C, P\) = \(24, 5\)"),
    (lambda a: a.update(weight_proj=a["weight_proj"][:, :-1]), ValueError, r"weight_proj must be \(P, C\)"),
    (lambda a: a.update(weight_proj=None), ValueError, r"weight_hh must be \(4C, P\) = \(24, 6\)"),
    (lambda a: a.update(c0=a["c0"][:1]), ValueError, r"c0 must be \(B, C\) = \(2, 6\)"),
    (lambda a: a.update(h0=a["h0"].tolist()), TypeError, "h0 must be a Tensor"),
    (lambda a: a.update(weight_proj=a["weight_proj"].long()), TypeError, "weight_proj must be a floating-point"),
    (lambda a: a.update(lengths=torch.tensor([3.0, 1.0])), TypeError, "lengths must be an integer tensor"),
    (lambda a: a.update(lengths=torch.tensor([3, 1, 2])), ValueError, r"lengths must be \(2,\)"),
    (lambda a: a.update(lengths=torch.tensor([4, 1])), ValueError, r"lengths must lie in 0..3 .*got 1..4"),
    (lambda a: a.update(cell_clip=0.0), ValueError, "cell_clip must be positive"),
    (lambda a: a.update(proj_clip="3"), TypeError, "proj_clip must be a number or None"),
    (lambda a: a.update(path="C++ loop"), TypeError, "path must be an LSTMPPath"),
    (lambda a: a.update(overwrite_gates=1), TypeError, "overwrite_gates must be a bool"),
])
def test_lstmp_recurrence_checks_its_arguments(change, error, match):
    gates, weight_hh, weight_proj, h0, c0 = seam_args(lstmp_inputs(3, 2, 6, 5, torch.float32, device="cpu"))
    args = {"gates": gates, "weight_hh": weight_hh, "weight_proj": weight_proj, "h0": h0, "c0": c0}
    change(args)
    with pytest.raises(error, match=match):
        lstmp_recurrence(**args)


def test_the_kernels_limits():
    """The dtypes and sizes the persistent kernel is chosen for (the rules are pure: checked here
    for an H100's budget, 132 SMs and 50 MiB of L2)."""
    assert dtype_refusal({torch.bfloat16}, tf32=False) is None and dtype_refusal({torch.float16}, tf32=False) is None
    assert dtype_refusal({torch.float32}, tf32=True) is None
    assert "exact float32" in dtype_refusal({torch.float32}, tf32=False)
    assert "float64" in dtype_refusal({torch.float64}, tf32=True)
    assert "mixed dtypes (bfloat16, float32" in dtype_refusal({torch.float32, torch.bfloat16}, tf32=True)
    h100 = Budget(132, 50 * 2 ** 20)
    ptb = 10 * 2 * 830 * 830  # the RHN paper's PTB model: depth 10, hidden 830, its recurrent weights' values
    assert size_refusal(2 * ptb, 20, h100) is None  # bfloat16: 26.3 MiB
    assert "(52.6 MiB) exceed the GPU's L2 cache (50.0 MiB)" in size_refusal(4 * ptb, 20, h100)  # float32
    elmo = 4 * 4096 * 512 + 512 * 4096  # ELMo's original biLM layer: W_h and W_P
    assert size_refusal(4 * elmo, 32, h100) is None  # 40 MiB even in float32
    assert size_refusal(2 * ptb, MAX_BATCH, h100) is None
    assert f"a batch of {MAX_BATCH + 1} rows" in size_refusal(2 * ptb, MAX_BATCH + 1, h100)


def test_the_kernels_are_chosen_only_when_asked_for(monkeypatch):
    """Unmeasured on a GPU, the kernels are opt-in: a CUDA window is refused, saying how to opt in,
    unless HIGHWAYNET_PERSISTENT=1 (read at import) or ``persistent.ENABLED`` asks for them."""
    assert persistent.ENABLED is (os.environ.get("HIGHWAYNET_PERSISTENT") == "1")
    monkeypatch.setattr(persistent, "ENABLED", False)
    cuda_like = SimpleNamespace(is_cuda=True)  # (only its device is read before the switch)
    why = persistent._refusal([cuda_like], [], 4)
    assert why == "off until a GPU run has measured it (HIGHWAYNET_PERSISTENT=1 turns it on)"


def test_programs_and_tiles():
    cpu = torch.device("cpu")
    assert programs_for(40, cpu) == 1  # the interpreter: one program, whatever the tiles
    assert device_budget(cpu).sms == 1
    with pytest.raises(ValueError, match="programs must be positive"):
        programs_for(4, cpu, programs=0)
    with pytest.raises(ValueError, match="block_n must be a power of two of at least 16, got 24"):
        Tiles(16, 24, 32).check()
    with pytest.raises(ValueError, match="block_b must be a power of two of at least 16, got 8"):
        Tiles(8, 16, 32).check()


def test_explain_says_why_the_rhn_does_not_take_the_persistent_kernel_on_the_cpu():
    x = torch.randn(4, 2, 5)
    for carry, path in (("coupled", None), ("independent", "loop")):
        decisions = explain(RHN(5, 8, depth=2, carry=carry), x)
        assert len(decisions) == 1
        assert decisions[0].why.endswith("; not the persistent kernel: it runs on CUDA tensors only")
        assert path is None or decisions[0].path == path


# -- the kernels (the interpreter on the CPU, or a GPU) ------------------------------------------------

@triton_kernels
@pytest.mark.parametrize("carry, masked, batch, dtype", [
    ("coupled", True, 3, torch.float32), ("independent", False, 17, torch.float32),
    ("coupled", False, 3, torch.bfloat16), ("independent", True, 3, torch.bfloat16)])
def test_persistent_rhn_window_matches_the_maths(carry, masked, batch, dtype):
    """One window each way, the weights' gradients from the kernel's dz: a width of two column tiles,
    three contraction steps, a batch of one or two row tiles; both carries, with and without the
    dropout mask."""
    from highwaynet.kernels.triton_persistent import rhn_backward, rhn_forward, rhn_gradients

    steps, hidden, depth = 3, 20, 2
    x_proj, s0, mask, weights, biases = rhn_window(steps, batch, hidden, depth, carry, masked, dtype)
    grad_out = torch.randn(steps, batch, hidden, device=DEVICE).to(dtype)
    out, z, states = rhn_forward(x_proj, s0, mask, weights, biases, tiles=TINY)
    dz, grad_s0 = rhn_backward(grad_out, z, states, mask, weights, tiles=TINY)
    grads = [rhn_gradients(dz, states, mask, depth)[0], grad_s0, *rhn_gradients(dz, states, mask, depth)[1:]]

    leaves = [t.detach().double().requires_grad_() for t in (x_proj, s0, *weights, *biases)]
    want = expected_rhn(leaves[0], leaves[1], None if mask is None else mask.double(), leaves[2:2 + depth],
                        leaves[2 + depth:], carry)
    want_grads = torch.autograd.grad((want * grad_out.double()).sum(), leaves)
    tol = tolerance(dtype)
    assert out.dtype == dtype and relative_error(out, want) < tol
    names = ["x_proj", "s0", *(f"R_{d}" for d in range(depth)), *(f"b_{d}" for d in range(depth))]
    for name, got, expected in zip(names, grads, want_grads, strict=True):
        assert got.shape == expected.shape and relative_error(got, expected) < tol, name


@triton_kernels
@pytest.mark.parametrize("carry", ["coupled", "independent"])
def test_rhn_on_the_persistent_kernel_matches_the_loop(carry, monkeypatch):
    """The layer on the persistent path (forced: it is chosen on CUDA only) against its autograd loop:
    bidirectional over a padded batch, state dropout, an initial state, outputs and every gradient
    to 1e-5 in float32."""
    import highwaynet.nn.rhn as rhn_module
    from highwaynet.kernels.rhn_recurrence import choose_path as choose_rhn_path

    paths = []

    def choose(*args, **kwargs):  # the persistent kernel wherever the layer would take a fused path
        choice = choose_rhn_path(*args, **kwargs)
        forced = Choice(RHNPath.PERSISTENT, "test") if kwargs["fused"] else choice
        paths.append(forced.path)
        return forced

    monkeypatch.setattr(rhn_module, "choose_path", choose)
    torch.manual_seed(3)
    rhn = RHN(6, 18, depth=2, carry=carry, state_dropout=0.25, bidirectional=carry == "coupled").to(DEVICE)
    x = torch.randn(4, 3, 6, device=DEVICE, requires_grad=True)
    s0 = torch.randn(rhn.directions, 3, 18, device=DEVICE, requires_grad=True)
    lengths = torch.tensor([4, 2, 3], device=DEVICE)
    results = []
    for fused in (True, False):
        rhn.fused = fused
        torch.manual_seed(8)
        out, state = rhn(x, s0, lengths=lengths)
        results.append((out, state, torch.autograd.grad(out.square().sum() + state.sum(), [x, s0, *rhn.parameters()])))
    assert set(paths) == {RHNPath.PERSISTENT, RHNPath.LOOP}
    (o1, s1, g1), (o2, s2, g2) = results
    tol = tolerance(torch.float32)
    assert relative_error(o1, o2) < tol and relative_error(s1, s2) < tol
    for a, b in zip(g1, g2, strict=True):
        assert relative_error(a, b) < tol


@triton_kernels
@pytest.mark.skipif(not hasattr(torch.library, "opcheck"), reason="custom operators need torch >= 2.4")
def test_persistent_rhn_operators_pass_opcheck():
    """The recurrence's custom operators on the persistent path, with the independent carry's
    ``[h | t | c]`` rows: their fake versions give the real outputs' shapes and strides."""
    from highwaynet.kernels.rhn_recurrence import _backward_op, _forward_op

    x_proj, s0, mask, weights, biases = rhn_window(3, 5, 7, 2, "independent", True, torch.float32)
    forward, backward = _forward_op._opoverload, _backward_op._opoverload
    args = ("persistent kernel", x_proj, s0, mask, weights, biases)
    torch.library.opcheck(forward, args)
    out, z, states = forward(*args)
    torch.library.opcheck(backward, ("persistent kernel", torch.randn_like(out), z, states, mask, weights))


@triton_kernels
@pytest.mark.parametrize("batch, clips, dtype", [(3, (3.0, 2.0), torch.float32), (17, (None, None), torch.float32),
                                                 (3, (3.0, 2.0), torch.bfloat16)])
def test_persistent_lstmp_window_matches_tensorflows_cell(batch, clips, dtype):
    """The LSTM with projection in one launch against the cell written out: widths of two tiles
    (cells and outputs), contraction steps over both, clipping on (acting) and off."""
    from highwaynet.kernels.triton_persistent import lstmp_forward

    inputs = lstmp_inputs(3, batch, 20, 18, dtype)
    out, h, c = lstmp_forward(*inputs, 1.0, *clips, tiles=TINY)
    want_out, want_h, want_c = expected_lstmp(*inputs, 1.0, *clips)
    assert clips[0] is None or clips_act(inputs, *clips)
    tol = tolerance(dtype)
    for got, want in ((out, want_out), (h, want_h), (c, want_c)):
        assert got.dtype == dtype and got.shape == want.shape and relative_error(got.cpu(), want) < tol


@triton_kernels
@pytest.mark.parametrize("batch, dtype", [(17, torch.float32), (5, torch.bfloat16)])
def test_persistent_lstmp_runs_a_padded_batch(batch, dtype):
    """Per-row lengths (``dynamic_rnn``'s ``sequence_length``): 0, the whole window and the steps
    between, in each row tile (two of them in float32): a row past its length holds its h and c and
    outputs 0, so its final state is its own at its end; both clips acting."""
    from highwaynet.kernels.triton_persistent import lstmp_forward

    steps = 4
    inputs = lstmp_inputs(steps, batch, 20, 18, dtype)
    lengths = (torch.arange(batch, device=DEVICE) * 3 + 2) % (steps + 1)  # 2, 0, 3, 1, 4, 2, 0, ...
    got = lstmp_forward(*inputs, 1.0, 3.0, 2.0, lengths, tiles=TINY)
    assert clips_act(inputs, 3.0, 2.0)
    check_padded_window(got, expected_lstmp(*inputs, 1.0, 3.0, 2.0, lengths), lengths, inputs[1], inputs[2],
                        tolerance(dtype))


@triton_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("lengths", [[3, 3, 3, 3, 3], [3, 0, 2, 1, 3]], ids=["full", "padded"])
def test_lstmp_recurrence_on_the_persistent_kernel_is_tensorflows_cell(dtype, lengths):
    """The seam on the kernel (forced): the forget bias folded into ``gates`` by the caller and added
    by nobody else, rows all full or a padded batch given as lengths, both clips acting; against the
    cell written out."""
    inputs = lstmp_inputs(3, 5, 20, 18, dtype)
    lengths = torch.tensor(lengths, device=DEVICE)
    got = lstmp_recurrence(*seam_args(inputs), lengths, cell_clip=3.0, proj_clip=2.0, path=LSTMPPath.PERSISTENT)
    assert clips_act(inputs, 3.0, 2.0)
    check_padded_window(got, expected_lstmp(*inputs, 1.0, 3.0, 2.0, lengths), lengths, inputs[1], inputs[2],
                        tolerance(dtype))


@triton_kernels
@pytest.mark.parametrize("reverse", [False, True])
def test_elmos_lstm_takes_the_persistent_kernel_where_it_may(reverse, monkeypatch, set_tf32):
    """:class:`ProjectedLSTM` (ELMo's biLM layer) gets the kernel through the seam: opted in, within the
    limits (on the CPU under the interpreter the device's rules are set aside) and without gradients,
    ``explain`` names it and the outputs are the PyTorch operations', for a batch of full rows and for
    a padded one (sentences of 4, 2, 1 and 0 tokens; the backward direction reads each reversed within
    its own length): zeros past each row's end, each row's final state at its end."""
    monkeypatch.setattr(persistent, "ENABLED", True)
    set_tf32(True)
    if DEVICE == "cpu":
        monkeypatch.setattr(persistent, "_refusal", lambda *args: None)
    torch.manual_seed(0)
    lstm = ProjectedLSTM(8, 18, 20, cell_clip=0.5, proj_clip=0.3, reverse=reverse).to(DEVICE)
    x = torch.randn(3, 4, 8, device=DEVICE)
    (decision,) = explain(lstm, x)
    assert decision.path == "persistent kernel"
    with torch.no_grad():
        fast, (h, c) = lstm(x)
    plain, (plain_h, plain_c) = lstm(x)  # (the parameters need a gradient: the PyTorch operations)
    tol = tolerance(torch.float32)
    for got, want in ((fast, plain), (h, plain_h), (c, plain_c)):
        assert relative_error(got, want.detach()) < tol
    x = torch.randn(4, 4, 8, device=DEVICE)
    mask = torch.arange(4, device=DEVICE) < torch.tensor([4, 2, 1, 0], device=DEVICE)[:, None]
    (padded,) = explain(lstm, x, mask)
    assert padded.path == "persistent kernel"
    with torch.no_grad():
        fast, (h, c) = lstm(x, mask)
    plain, (plain_h, plain_c) = lstm(x, mask)
    assert fast[~mask].eq(0).all() and h[3].eq(0).all() and c[3].eq(0).all()
    for got, want in ((fast, plain), (h, plain_h), (c, plain_c)):
        assert relative_error(got, want.detach()) < tol
    for row in range(3):  # (each row's own state, not only the batch's on the whole)
        for got, want in ((h, plain_h), (c, plain_c)):
            assert relative_error(got[row], want[row].detach()) < tol, row


@interpreter_run
@interpreter_runs_micro_steps
def test_persistent_kernels_under_the_interpreter(request):
    """This file's Triton tests on the CPU under Triton's interpreter (see the helper)."""
    run_triton_tests_under_the_interpreter(__file__, request)


# -- a GPU: several programs at once, the grid barrier, the choice ------------------------------------

@gpu
@pytest.mark.parametrize("carry", ["coupled", "independent"])
@pytest.mark.parametrize("precision", ["bfloat16", "tf32", "float32"])
@pytest.mark.parametrize("programs", [1, 2, 3, None])
def test_persistent_rhn_with_programs_at_once(carry, precision, programs, set_tf32):
    """Programs that each own several tiles (1, 2, 3) or one (None: as many as tiles, up to the SMs)
    meet at the grid barrier every micro-step: any program that reads a state or dz before all are
    written makes a wrong window."""
    from highwaynet.kernels.triton_persistent import rhn_backward, rhn_forward, rhn_gradients

    set_tf32(precision == "tf32")
    dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
    steps, batch, hidden, depth = 5, 20, 130, 3
    x_proj, s0, mask, weights, biases = rhn_window(steps, batch, hidden, depth, carry, True, dtype)
    grad_out = torch.randn(steps, batch, hidden, device=DEVICE).to(dtype)
    out, z, states = rhn_forward(x_proj, s0, mask, weights, biases, programs=programs)
    dz, grad_s0 = rhn_backward(grad_out, z, states, mask, weights, programs=programs)
    grad_x = rhn_gradients(dz, states, mask, depth)[0]
    leaves = [t.detach().double().requires_grad_() for t in (x_proj, s0)]
    want = expected_rhn(*leaves, mask.double(), [w.double() for w in weights], [b.double() for b in biases], carry)
    want_x, want_s0 = torch.autograd.grad((want * grad_out.double()).sum(), leaves)
    tol = tolerance(dtype)
    assert relative_error(out, want) < tol
    assert relative_error(grad_x, want_x) < tol and relative_error(grad_s0, want_s0) < tol


@gpu
@pytest.mark.parametrize("precision", ["bfloat16", "tf32", "float32"])
@pytest.mark.parametrize("programs", [1, 3, None])
def test_persistent_lstmp_with_programs_at_once(precision, programs, set_tf32):
    from highwaynet.kernels.triton_persistent import lstmp_forward

    set_tf32(precision == "tf32")
    dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
    inputs = lstmp_inputs(10, 20, 256, 64, dtype)
    out, h, c = lstmp_forward(*inputs, 1.0, 3.0, 3.0, programs=programs)
    want_out, _, want_c = expected_lstmp(*inputs, 1.0, 3.0, 3.0)
    tol = window_tolerance(inputs, (3.0, 3.0))
    assert relative_error(out.cpu(), want_out) < tol and relative_error(c.cpu(), want_c) < tol


@gpu
@pytest.mark.parametrize("precision", ["bfloat16", "tf32", "float32"])
@pytest.mark.parametrize("programs", [1, 3, None])
def test_persistent_lstmp_padded_batch_with_programs_at_once(precision, programs, set_tf32):
    """A padded batch (lengths 0 to the whole window) with programs at once: the rows past their
    lengths hold their state while the others' programs go on through the barriers."""
    from highwaynet.kernels.triton_persistent import lstmp_forward

    set_tf32(precision == "tf32")
    dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
    inputs = lstmp_inputs(10, 20, 256, 64, dtype)
    lengths = (torch.arange(20, device=DEVICE) * 7 + 3) % 11  # 3, 10, 6, 2, 9, 5, 1, 8, 4, 0, ...
    got = lstmp_forward(*inputs, 1.0, 3.0, 3.0, lengths, programs=programs)
    check_padded_window(got, expected_lstmp(*inputs, 1.0, 3.0, 3.0, lengths), lengths, inputs[1], inputs[2],
                        window_tolerance(inputs, (3.0, 3.0), lengths))


@gpu
def test_the_persistent_kernel_is_chosen_on_a_gpu_within_its_limits(monkeypatch, set_tf32):
    """bfloat16 and TF32 within the L2 cache take it; exact float32 and weights over the L2 cache do not,
    and say why; the RHN paper's PTB model in bfloat16 takes it, and its window (forward and
    backward) is as close to float32's as PyTorch's own bfloat16 loop is."""
    set_tf32(False)
    x = torch.randn(5, 4, 16, device="cuda")
    rhn = RHN(16, 32, depth=3).cuda()
    assert "off until a GPU run has measured it" in explain(rhn.bfloat16(), x.bfloat16())[0].why
    rhn.float()
    monkeypatch.setattr(persistent, "ENABLED", True)
    decision = explain(rhn, x)[0]
    assert decision.path == "gate kernel" and "not the persistent kernel: exact float32" in decision.why
    assert explain(rhn.bfloat16(), x.bfloat16())[0].path == "persistent kernel"
    independent = RHN(16, 32, depth=3, carry="independent").cuda().bfloat16()
    assert explain(independent, x.bfloat16())[0].path == "persistent kernel"
    with torch.no_grad():
        inputs = lstmp_inputs(4, 8, 64, 32, torch.bfloat16)
        assert choose_path(*seam_args(inputs)).path is LSTMPPath.PERSISTENT
        assert choose_path(*seam_args(inputs), torch.tensor([4, 0, 2, 1, 3, 4, 4, 4], device="cuda")).path \
            is LSTMPPath.PERSISTENT
    set_tf32(True)
    ptb_f32 = RHN(830, 830, depth=10).cuda()
    x = torch.randn(35, 20, 830, device="cuda")
    fits = 10 * 2 * 830 * 830 * 4 <= device_budget(x.device).l2_bytes
    assert (explain(ptb_f32, x)[0].path == "persistent kernel") == fits
    # the PTB model in bfloat16: its window against float32's, as close as PyTorch's bfloat16 loop
    ptb_bf16 = RHN(830, 830, depth=10).cuda().bfloat16()
    ptb_bf16.load_state_dict(ptb_f32.state_dict())
    loop_bf16 = RHN(830, 830, depth=10, fused=False).cuda().bfloat16()
    loop_bf16.load_state_dict(ptb_f32.state_dict())
    assert explain(ptb_bf16, x.bfloat16())[0].path == "persistent kernel"
    set_tf32(False)
    ptb_f32.fused = False
    reference = ptb_f32(x)[0]
    errors = {name: relative_error(model(x.bfloat16())[0], reference) for name, model in
              (("persistent", ptb_bf16), ("loop", loop_bf16))}
    assert errors["persistent"] < 2 * errors["loop"] + 1e-3, errors
