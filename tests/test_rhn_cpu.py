"""The CPU RHN recurrence's C++ loops (kernels.rhn_cpu) against its loops in PyTorch operations
(kernels.rhn_eager), which tests/test_nn_rhn.py checks against the autograd loop in float64."""

import warnings

import pytest
import torch

from highwaynet import RHN
from highwaynet.kernels import rhn_cpu, rhn_eager
from highwaynet.kernels.rhn_recurrence import RHNPath, choose_path


@pytest.fixture(scope="module", autouse=True)
def _built():
    if not rhn_cpu.available(torch.empty(0)):
        pytest.skip("the CPU RHN kernel could not be built here (see the warning)")


def _problem(depth, steps, batch, hidden, dtype, masked, seed=0):
    g = torch.Generator().manual_seed(seed)
    x_proj = torch.randn(steps, batch, 2 * hidden, dtype=dtype, generator=g)
    s0 = torch.randn(batch, hidden, dtype=dtype, generator=g)
    weights = [torch.randn(2 * hidden, hidden, dtype=dtype, generator=g) / hidden ** 0.5 for _ in range(depth)]
    biases = [torch.randn(2 * hidden, dtype=dtype, generator=g) for _ in range(depth)]
    mask = (torch.rand(batch, hidden, dtype=dtype, generator=g) > 0.3).to(dtype) / 0.7 if masked else None
    grad_out = torch.randn(steps, batch, hidden, dtype=dtype, generator=g)
    return x_proj, s0, mask, weights, biases, grad_out


def _both(problem, halves):
    """States and gradients ``[states, x_proj, s0, *weights, *biases]`` by the C++ loops and by PyTorch's."""
    x_proj, s0, mask, weights, biases, grad_out = problem
    results = []
    for cpp in (True, False):
        states, z, inputs = rhn_eager.forward(x_proj, s0, mask, weights, biases, halves=halves, cpp=cpp)
        results.append([states, *rhn_eager.backward(grad_out, z, inputs, mask, weights, cpp=cpp)])
    return results


@pytest.mark.parametrize("masked", [False, True], ids=["no mask", "mask"])
@pytest.mark.parametrize("halves", [True, False], ids=["h and t apart", "one product"])
@pytest.mark.parametrize("shape", [(3, 5, 4, 8), (2, 4, 3, 7), (2, 3, 2, 37), (2, 3, 130, 256)],
                         ids=["even", "odd, narrower than a vector", "odd, a vector and a tail", "parallel rows"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_cpp_loops_match_pytorch_loops(shape, halves, masked, dtype):
    # Odd sizes run each pass's scalar tail; 130 rows of 256 run the passes on several threads
    # (past kernels.rhn_cpu.cpp's 32,768 values a thread).
    cpp, reference = _both(_problem(*shape, dtype, masked), halves)
    tol = 1e-12 if dtype == torch.float64 else 1e-5  # (relative to each result's largest value)
    for a, b in zip(cpp, reference, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert (a - b).abs().max() <= tol * b.abs().max()


def test_cpp_path_is_chosen_on_the_cpu_and_can_be_switched_off(monkeypatch):
    x_proj, s0, mask, weights, biases, _ = _problem(2, 3, 4, 8, torch.float32, False)
    path = choose_path(x_proj, s0, mask, (*weights, *biases)).path
    assert path.cpp and path in (RHNPath.CPP, RHNPath.CPP_HALVES)
    assert not rhn_cpu.available(x_proj.bfloat16())  # (bfloat16 keeps tanh: PyTorch's loops)
    monkeypatch.setattr(rhn_cpu, "enabled", False)
    choice = choose_path(x_proj, s0, mask, (*weights, *biases))
    assert choice.path in (RHNPath.EAGER, RHNPath.EAGER_HALVES) and "HIGHWAYNET_CPU_KERNEL=0" in choice.why


def test_a_failed_build_warns_once_and_leaves_the_pytorch_loops(monkeypatch):
    def fail():
        raise RuntimeError("no compiler")
    monkeypatch.setattr(rhn_cpu, "_loaded", None)
    monkeypatch.setattr(rhn_cpu, "_build_and_load", fail)
    rhn = RHN(3, 8, depth=2)
    why = "could not build the CPU RHN kernel.*no compiler.*HIGHWAYNET_CPU_KERNEL=0"
    with pytest.warns(RuntimeWarning, match=why) as caught:
        rhn(torch.randn(4, 2, 3))
    assert caught[0].filename == __file__  # the user's line, not the library's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not rhn_cpu.available(torch.empty(0))  # tried once a process
    x_proj, s0, mask, weights, biases, _ = _problem(2, 3, 4, 8, torch.float32, False)
    choice = choose_path(x_proj, s0, mask, (*weights, *biases))
    assert not choice.path.cpp and "could not be built" in choice.why


@pytest.mark.skipif(not hasattr(torch.library, "opcheck"), reason="opcheck needs torch >= 2.4")
def test_operator_schemas_declare_what_they_write():
    x_proj, s0, mask, weights, biases, grad_out = _problem(2, 3, 4, 8, torch.float32, True)
    _, z, inputs = rhn_eager.forward(x_proj, s0, mask, weights, biases, halves=True, cpp=True)
    weights_t = [w.t().unflatten(-1, (2, -1)).transpose(0, 1) for w in weights]
    torch.library.opcheck(torch.ops.highwaynet_cpu.rhn_forward_loop, (z.clone(), inputs.clone(), weights_t, mask),
                          test_utils=("test_schema",))
    weights_q = [w.view(16, 2, 4).transpose(0, 1) for w in weights]
    dz = z.new_empty(2, 3, 4, 16)
    torch.library.opcheck(torch.ops.highwaynet_cpu.rhn_backward_walk,
                          (grad_out, z, inputs, dz, weights_q, mask.view(4, 2, 4).transpose(0, 1), 2),
                          test_utils=("test_schema",))


def test_operators_refuse_buffers_they_cannot_read():
    x_proj, s0, _, weights, biases, grad_out = _problem(2, 3, 4, 8, torch.float32, False)
    _, z, inputs = rhn_eager.forward(x_proj, s0, None, weights, biases, halves=True, cpp=True)
    weights_t = [w.t().unflatten(-1, (2, -1)).transpose(0, 1) for w in weights]
    with pytest.raises(RuntimeError, match="must be contiguous"):
        torch.ops.highwaynet_cpu.rhn_forward_loop(z.transpose(3, 4), inputs, weights_t, None)
    with pytest.raises(RuntimeError, match=r"must be \(D, T, P, B, W\)"):
        torch.ops.highwaynet_cpu.rhn_forward_loop(z[0], inputs, weights_t, None)
    with pytest.raises(RuntimeError, match="one dtype"):
        torch.ops.highwaynet_cpu.rhn_forward_loop(z.double(), inputs, weights_t, None)
    with pytest.raises(RuntimeError, match="parts must divide"):
        torch.ops.highwaynet_cpu.rhn_backward_walk(grad_out, z, inputs, z.new_empty(2, 3, 4, 16), weights, None, 3)
