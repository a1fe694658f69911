"""The RHN against a float64 reference loop written out here (numpy)."""

import warnings

import numpy as np
import pytest
import torch
from conftest import check_packed_output_order
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from highwaynet.analysis import gate_modules, lesion, record_gates
from highwaynet.kernels import explain, rhn_cpu, rhn_eager
from highwaynet.nn import RHN, RHNCell


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def reference_rhn(x, rhn, state=None, carry="coupled"):
    """x: (T, B, F) numpy -> (outputs (T, B, D·H), final states (D·layers, B, H)), no dropout; a
    bidirectional RHN's second cell of each layer reads x[::-1] and its outputs are put back in order."""
    steps, batch = x.shape[:2]
    hid = rhn.hidden_size
    directions = 2 if rhn.bidirectional else 1
    finals = []
    for layer in range(rhn.num_layers):
        outputs = []
        for direction in range(directions):
            k = layer * directions + direction
            cell = rhn.cells[k]
            w = cell.input_proj.weight.detach().double().numpy()
            rs = [(p.weight.detach().double().numpy(), p.bias.detach().double().numpy()) for p in cell.hidden_proj]
            s = np.zeros((batch, hid)) if state is None else state[k]
            outs = []
            for t in range(steps) if direction == 0 else reversed(range(steps)):
                for d, (r, b) in enumerate(rs):
                    z = s @ r.T + b + (x[t] @ w.T if d == 0 else 0)
                    h, tg = np.tanh(z[:, :hid]), sigmoid(z[:, hid:2 * hid])
                    c = 1 - tg if carry == "coupled" else sigmoid(z[:, 2 * hid:])
                    s = h * tg + s * c
                outs.append(s)
            outputs.append(np.stack(outs if direction == 0 else outs[::-1]))
            finals.append(s)
        x = np.concatenate(outputs, axis=-1)
    return x, np.stack(finals)


@pytest.mark.parametrize("depth,layers", [(1, 1), (3, 1), (2, 3), (5, 2)])
def test_matches_reference(depth, layers):
    torch.manual_seed(depth * 10 + layers)
    rhn = RHN(4, 6, depth=depth, num_layers=layers).double()
    x = np.random.default_rng(0).standard_normal((7, 3, 4))
    out, state = rhn(torch.from_numpy(x))
    ref_out, ref_state = reference_rhn(x, rhn)
    np.testing.assert_allclose(out.detach().numpy(), ref_out, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(state.detach().numpy(), ref_state, rtol=1e-10, atol=1e-12)


def test_independent_carry_matches_reference():
    torch.manual_seed(0)
    rhn = RHN(3, 5, depth=2, num_layers=2, carry="independent").double()
    assert rhn.cells[0].hidden_proj[0].weight.shape == (15, 5)
    x = np.random.default_rng(1).standard_normal((4, 2, 3))
    out, state = rhn(torch.from_numpy(x))
    ref_out, ref_state = reference_rhn(x, rhn, carry="independent")
    np.testing.assert_allclose(out.detach().numpy(), ref_out, rtol=1e-10)
    np.testing.assert_allclose(state.detach().numpy(), ref_state, rtol=1e-10)


def test_batch_first_and_given_state():
    torch.manual_seed(0)
    rhn = RHN(4, 6, depth=2, num_layers=2, batch_first=True).double()
    x = np.random.default_rng(2).standard_normal((3, 5, 4))  # (B, T, F)
    s0 = np.random.default_rng(3).standard_normal((2, 3, 6))
    out, state = rhn(torch.from_numpy(x), torch.from_numpy(s0))
    ref_out, ref_state = reference_rhn(x.transpose(1, 0, 2), rhn, s0)
    np.testing.assert_allclose(out.detach().numpy(), ref_out.transpose(1, 0, 2), rtol=1e-10)
    np.testing.assert_allclose(state.detach().numpy(), ref_state, rtol=1e-10)



@pytest.mark.parametrize("state", [(torch.zeros(1, 2, 4),), [torch.zeros(1, 2, 4)] * 3])
def test_a_tuple_for_the_state_is_refused_as_not_the_one_tensor_it_is(state):
    """RHN(...)(x, (h,)) (RHNLanguageModel's too) said that its state must be "a pair (h_0, c_0)": an LSTM's
    state, not its own, which is one tensor."""
    with pytest.raises(TypeError, match=r"RHN expects state to be a torch.Tensor \(num_layers \* num_directions, B, "
                                        r"hidden_size\), got a (tuple|list) of [13]"):
        RHN(4, 4)(torch.randn(3, 2, 4), state)

def test_state_carried_across_calls_equals_one_call():
    torch.manual_seed(0)
    rhn = RHN(4, 6, depth=3, num_layers=2).double()
    x = torch.randn(10, 3, 4, dtype=torch.float64)
    whole, s_whole = rhn(x)
    first, s = rhn(x[:4])
    second, s = rhn(x[4:], s)
    torch.testing.assert_close(torch.cat([first, second]), whole)
    torch.testing.assert_close(s, s_whole)


def test_cell_is_one_step():
    torch.manual_seed(0)
    rhn = RHN(4, 6, depth=3).double()
    x = torch.randn(2, 5, 4, dtype=torch.float64)
    out, _ = rhn(x)
    s = rhn.cells[0](x[0])
    torch.testing.assert_close(rhn.cells[0](x[1], s), out[1])


def test_cell_takes_one_sequence_unbatched_as_rnn_cell_does():
    """nn.RNNCell's convention: ``(input_size,)`` and ``(hidden_size,)`` -> ``(hidden_size,)``, each row
    of a batched step (checked against the written-out reference through the layer above)."""
    torch.manual_seed(0)
    cell = RHNCell(4, 6, depth=2, carry="independent").double()
    x, s0 = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 6, dtype=torch.float64)
    batched = cell(x, s0)
    for b in range(3):
        one = cell(x[b], s0[b])
        assert one.shape == (6,)
        torch.testing.assert_close(one, batched[b], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(cell(x[0]), cell(x[:1])[0], rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=r"state of shape \(hidden_size,\) for an unbatched input = \(6,\)"):
        cell(x[0], s0[:1])
    with pytest.raises(ValueError, match=r"\(B, 4\) or \(4,\)"):
        cell(x[None])


def test_parameter_layout_and_gate_bias():
    rhn = RHN(4, 6, depth=3, num_layers=2, gate_bias=-3.0)
    cell = rhn.cells[1]
    assert isinstance(cell, RHNCell)
    assert cell.input_proj.weight.shape == (12, 6) and cell.input_proj.bias is None
    assert len(cell.hidden_proj) == 3 and cell.hidden_proj[2].weight.shape == (12, 6)
    assert torch.equal(cell.hidden_proj[0].bias[:6], torch.zeros(6))
    assert torch.equal(cell.hidden_proj[0].bias[6:], torch.full((6,), -3.0))


def test_gradcheck():
    torch.manual_seed(0)
    rhn = RHN(3, 4, depth=2, num_layers=2).double()
    x = torch.randn(4, 2, 3, dtype=torch.float64, requires_grad=True)
    s0 = torch.randn(2, 2, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: rhn(a, b), (x, s0))


def test_variational_masks_constant_in_time_and_differ_across_sequences():
    # Depth 1, H = input through an identity input projection, T ≈ 1, no recurrence: the output
    # at each step is tanh(dropped input), so it shows the input mask directly.
    torch.manual_seed(0)
    size = 64
    rhn = RHN(size, size, depth=1, input_dropout=0.5)
    with torch.no_grad():
        rhn.cells[0].input_proj.weight.copy_(torch.cat([torch.eye(size), torch.zeros(size, size)]))
        rhn.cells[0].hidden_proj[0].weight.zero_()
        rhn.cells[0].hidden_proj[0].bias.copy_(torch.cat([torch.zeros(size), torch.full((size,), 50.0)]))
    x = torch.ones(6, 4, size)  # the same sequence 4 times
    out, _ = rhn.train()(x)
    kept = out != 0
    assert torch.equal(kept, kept[:1].expand_as(kept))          # constant across time
    assert not torch.equal(kept[0, 0], kept[0, 1])              # different across sequences
    assert 0.3 < kept.float().mean() < 0.7
    # In eval no mask: tanh(1) everywhere (to float32 rounding; a dropped or doubled input gives 0 or tanh(2)).
    torch.testing.assert_close(rhn.eval()(x)[0], torch.full((6, 4, size), float(np.tanh(1.0))))


def test_state_dropout_masks_are_per_sequence():
    torch.manual_seed(0)
    rhn = RHN(3, 8, depth=2, state_dropout=0.5).train()
    x = torch.randn(5, 1, 3).expand(5, 6, 3)
    out, _ = rhn(x)
    assert not torch.allclose(out[:, 0], out[:, 1])   # same input, different masks
    out_eval, _ = rhn.eval()(x)
    torch.testing.assert_close(out_eval[:, 0], out_eval[:, 1])


def test_padding_never_changes_a_shorter_sequence():
    torch.manual_seed(0)
    rhn = RHN(3, 5, depth=2, num_layers=2).double()
    x = torch.randn(6, 3, 3, dtype=torch.float64)
    lengths = torch.tensor([6, 2, 4])
    out, state = rhn(x, lengths=lengths)
    for b, n in enumerate(lengths.tolist()):
        alone, s = rhn(x[:n, b:b + 1])
        torch.testing.assert_close(out[:n, b], alone[:, 0])
        assert torch.equal(out[n:, b], torch.zeros(6 - n, 5, dtype=torch.float64))
        torch.testing.assert_close(state[:, b], s[:, 0])
    # Garbage in the padding changes nothing, NaN included, on either path, gradients too.
    noisy = x.clone().requires_grad_()
    with torch.no_grad():
        noisy[2:, 1] = 1e3
        noisy[4:, 2] = float("nan")
    for fused in (True, False):
        rhn.fused = fused
        noisy_out, noisy_state = rhn(noisy, lengths=lengths)
        torch.testing.assert_close(noisy_out, out)
        torch.testing.assert_close(noisy_state, state)
        (noisy_out.sum() + noisy_state.sum()).backward()
        assert all(torch.isfinite(p.grad).all() for p in [noisy, *rhn.parameters()])
        assert torch.equal(noisy.grad[2:, 1], torch.zeros(4, 3, dtype=torch.float64))
        noisy.grad = None
        rhn.zero_grad()


def test_packed_sequence():
    torch.manual_seed(0)
    rhn = RHN(3, 5, depth=2, batch_first=True).double()
    x = torch.randn(3, 6, 3, dtype=torch.float64)
    lengths = torch.tensor([2, 6, 4])
    packed_out, state = rhn(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
    out, out_lengths = pad_packed_sequence(packed_out, batch_first=True)
    assert torch.equal(out_lengths, lengths)
    padded_out, padded_state = rhn(x, lengths=lengths)
    torch.testing.assert_close(out, padded_out[:, :6])
    torch.testing.assert_close(state, padded_state)


@pytest.mark.parametrize("enforce_sorted", [True, False], ids=["sorted", "unsorted"])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["forward", "bidirectional"])
def test_a_packed_output_keeps_the_inputs_order_of_sequences(enforce_sorted, bidirectional):
    # As nn.LSTM's: the output packed as the input is, sequences of equal length in the input's order.
    torch.manual_seed(0)
    check_packed_output_order(RHN(3, 4, depth=2, bidirectional=bidirectional).double(), 3, enforce_sorted)


def test_gates_recorded_and_lesioned_per_micro_layer():
    torch.manual_seed(0)
    rhn = RHN(3, 4, depth=3, num_layers=2)
    names = [n for n, _ in gate_modules(rhn)]
    assert names == [f"cells.{layer}.gates.{d}" for layer in range(2) for d in range(3)]
    x = torch.randn(5, 2, 3)
    with record_gates(rhn) as rec:
        rhn(x)
    assert rec.values("cells.0.gates.1").shape == (5 * 2, 4)  # one (B, H) per time step
    # Lesion every micro-layer of layer 1: its state never moves from the initial one.
    with lesion(rhn, [3, 4, 5]):
        out, state = rhn(x)
    assert torch.equal(out, torch.zeros(5, 2, 4)) and torch.equal(state[1], torch.zeros(2, 4))


@pytest.mark.parametrize("fused", [True, False])
def test_bidirectional_matches_reference(fused):
    torch.manual_seed(1)
    rhn = RHN(4, 5, depth=2, num_layers=2, bidirectional=True, fused=fused).double()
    assert [c.input_size for c in rhn.cells] == [4, 4, 10, 10]
    x = np.random.default_rng(4).standard_normal((6, 3, 4))
    s0 = np.random.default_rng(5).standard_normal((4, 3, 5))
    out, state = rhn(torch.from_numpy(x), torch.from_numpy(s0))
    assert out.shape == (6, 3, 10) and state.shape == (4, 3, 5)
    ref_out, ref_state = reference_rhn(x, rhn, s0)
    np.testing.assert_allclose(out.detach().numpy(), ref_out, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(state.detach().numpy(), ref_state, rtol=1e-10, atol=1e-12)


def test_bidirectional_padding_never_changes_a_shorter_sequence():
    torch.manual_seed(0)
    rhn = RHN(3, 4, depth=2, num_layers=2, bidirectional=True, batch_first=True).double()
    x = torch.randn(3, 6, 3, dtype=torch.float64)
    lengths = torch.tensor([6, 2, 4])
    noisy = x.clone()
    for b, n in enumerate(lengths.tolist()):
        noisy[b, n:] = 1e3  # the backward reading starts at each sequence's own last step, not at the padding
    out, state = rhn(noisy, lengths=lengths)
    for b, n in enumerate(lengths.tolist()):
        alone, s = rhn(x[b:b + 1, :n])
        torch.testing.assert_close(out[b, :n], alone[0])
        assert torch.equal(out[b, n:], torch.zeros(6 - n, 8, dtype=torch.float64))
        torch.testing.assert_close(state[:, b], s[:, 0])
    packed_out, packed_state = rhn(pack_padded_sequence(noisy, lengths, batch_first=True, enforce_sorted=False))
    torch.testing.assert_close(pad_packed_sequence(packed_out, batch_first=True)[0], out)
    torch.testing.assert_close(packed_state, state)


def test_bidirectional_gradcheck_with_lengths_and_dropout_masks():
    torch.manual_seed(0)
    rhn = RHN(3, 4, depth=2, bidirectional=True, state_dropout=0.3).double()
    x = torch.randn(4, 2, 3, dtype=torch.float64, requires_grad=True)
    s0 = torch.randn(2, 2, 4, dtype=torch.float64, requires_grad=True)

    def run(a, b):
        torch.manual_seed(7)  # the same dropout masks at every evaluation
        return rhn(a, b, lengths=torch.tensor([4, 3]))
    assert torch.autograd.gradcheck(run, (x, s0))


def test_bidirectional_state_and_gates():
    rhn = RHN(3, 4, depth=2, bidirectional=True)
    assert [n for n, _ in gate_modules(rhn)] == [f"cells.{k}.gates.{d}" for k in range(2) for d in range(2)]
    with pytest.raises(ValueError, match=r"\(2 \* num_layers, B, hidden_size\) = \(2, 5, 4\), got \(1, 5, 4\)"):
        rhn(torch.randn(2, 5, 3), torch.zeros(1, 5, 4))
    assert "bidirectional=True" in repr(rhn)


@pytest.mark.parametrize("call, message", [
    (lambda r: r(torch.randn(5, 2, 7)), r"input_size=3; got \(5, 2, 7\)"),
    (lambda r: r(torch.randn(5)), r"shape \(T, B, input_size\), or \(T, input_size\)"),
    (lambda r: r(torch.randn(0, 2, 3)), r"at least one time step, got input of shape \(0, 2, 3\)"),
    (lambda r: r(torch.randn(5, 2, 3), torch.zeros(1, 2, 4)), r"state of shape .* \(2, 2, 4\), got \(1, 2, 4\)"),
    (lambda r: r(torch.randn(5, 3), torch.zeros(2, 1, 4)), r"state without a batch dimension.*\[\(2, 1, 4\)\]"),
    (lambda r: r(torch.randn(5, 3), lengths=torch.tensor([5])), "unbatched input of shape \\(5, 3\\)"),
    (lambda r: r(torch.randn(5, 2, 3), lengths=torch.tensor([5, 6])), r"in \[0, 5\] for each of the 2 .*\[5, 6\]"),
    (lambda r: r(torch.randn(5, 2, 3), lengths=[5, 5, 5]), r"each of the 2 sequences of the batch, got \[5, 5, 5\]"),
    (lambda r: r(torch.randn(5, 2, 3), lengths=torch.tensor([-1, 5])), r"length in \[0, 5\]"),
])
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call(RHN(3, 4, depth=2, num_layers=2))


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_unbatched_sequence_as_nn_lstm_takes_it(batch_first, bidirectional):
    # One sequence (T, F) with a state (D·layers, H): no batch dimension in or out, as nn.LSTM.
    torch.manual_seed(0)
    rhn = RHN(3, 4, depth=2, num_layers=2, batch_first=batch_first, bidirectional=bidirectional).double()
    x = torch.randn(6, 3, dtype=torch.float64)
    s0 = torch.randn(2 * rhn.directions, 4, dtype=torch.float64)
    out, state = rhn(x, s0)
    assert out.shape == (6, 4 * rhn.directions) and state.shape == s0.shape
    ref_out, ref_state = reference_rhn(x[:, None].numpy(), rhn, s0[:, None].numpy())
    np.testing.assert_allclose(out.detach().numpy(), ref_out[:, 0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(state.detach().numpy(), ref_state[:, 0], rtol=1e-10, atol=1e-12)


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"dropout must be a probability in \[0, 1\), got 1.0"):
        RHN(3, 4, depth=2, dropout=1.0)
    with pytest.raises(ValueError, match="must be positive"):
        RHN(3, 4, depth=0)
    with pytest.raises(TypeError, match="got list"):
        RHN(3, 4, depth=2)([1, 2])


@pytest.mark.parametrize("bidirectional,lengths", [(False, None), (False, [7, 0, 4]), (True, [2, 7, 5])],
                         ids=["full", "padded", "bidirectional padded"])
@pytest.mark.parametrize("state_dropout", [0.0, 0.3])
@pytest.mark.parametrize("halves", [True, False], ids=["h and t apart", "one product"])
@pytest.mark.parametrize("cpp", [True, False], ids=["C++ loops", "PyTorch operations"])
def test_fused_recurrence_matches_reference_loop_values_and_gradients(state_dropout, bidirectional, lengths, halves,
                                                                      cpp, monkeypatch):
    # The path without Triton (kernels.rhn_eager); the one-kernel micro-steps
    # are checked against the loop in tests/test_kernels.py. Padded: the fused path runs over the
    # padding and reads each final state at its sequence's last step (an empty one keeps s0).
    # Both ways of making h and t (side by side on a CPU with several threads, else as one product),
    # each with its loops in C++ (kernels.rhn_cpu) and in PyTorch operations.
    calls = _run_cpu_path(monkeypatch, halves, cpp)
    torch.manual_seed(0)
    kwargs = dict(num_layers=2, state_dropout=state_dropout, dropout=0.2, bidirectional=bidirectional)
    fused = RHN(4, 6, depth=3, **kwargs).double()
    loop = RHN(4, 6, depth=3, fused=False, **kwargs).double()
    loop.load_state_dict(fused.state_dict())
    x = torch.randn(7, 3, 4, dtype=torch.float64, requires_grad=True)
    assert {d.path for d in explain(fused, x)} != {"loop"} and {d.path for d in explain(loop, x)} == {"loop"}
    calls.clear()
    s0 = torch.randn(len(fused.cells), 3, 6, dtype=torch.float64, requires_grad=True)
    results = []
    for rhn in (fused, loop):
        torch.manual_seed(5)  # the same dropout masks for both
        out, state = rhn(x, s0, lengths=None if lengths is None else torch.tensor(lengths))
        (out.pow(2).sum() + state.pow(2).sum()).backward()
        results.append((out.detach(), state.detach(), x.grad.clone(), s0.grad.clone(),
                        [p.grad.clone() for p in rhn.parameters()]))
        x.grad = s0.grad = None
    (o1, s1, *g1), (o2, s2, *g2) = results
    torch.testing.assert_close(o1, o2, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(s1, s2, rtol=1e-12, atol=1e-12)
    for a, b in zip([*g1[:2], *g1[2]], [*g2[:2], *g2[2]], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    if lengths is not None and 0 in lengths:
        assert torch.equal(s1[:, lengths.index(0)], s0[:, lengths.index(0)].detach())
    # the fused path ran, the chosen way, for every layer and direction
    assert calls == len(fused.cells) * [("forward", cpp)] + len(fused.cells) * [("backward", cpp)]


def _run_cpu_path(monkeypatch, halves: bool, cpp: bool) -> list[tuple[str, bool]]:
    """Makes the RHN's CPU path make h and t apart or not (``halves``) and run its loops in C++ or
    not (``cpp``; skips where the extension cannot be built); returns a list onto which each
    forward and backward of the path appends ``(direction, whether it ran the C++ loop)``."""
    if cpp and not rhn_cpu.available(torch.empty(0)):
        pytest.skip("the CPU RHN kernel could not be built here (see the warning)")
    monkeypatch.setattr(rhn_cpu, "enabled", cpp)
    monkeypatch.setattr(rhn_eager, "use_halves", lambda x_proj: halves)
    calls = []
    for name in ("forward", "backward"):
        real = getattr(rhn_eager, name)
        monkeypatch.setattr(rhn_eager, name, lambda *a, _real=real, _name=name, cpp=False, **k:
                            calls.append((_name, cpp)) or _real(*a, cpp=cpp, **k))
    return calls


@pytest.mark.parametrize("hidden", [5, 6], ids=["odd hidden", "even hidden"])  # (the walk halves an even one)
@pytest.mark.parametrize("halves", [True, False], ids=["h and t apart", "one product"])
@pytest.mark.parametrize("cpp", [True, False], ids=["C++ loops", "PyTorch operations"])
def test_fused_recurrence_gradcheck(hidden, halves, cpp, monkeypatch):
    from highwaynet.kernels import rhn_recurrence

    calls = _run_cpu_path(monkeypatch, halves, cpp)
    torch.manual_seed(0)
    xp = torch.randn(4, 3, 2 * hidden, dtype=torch.float64, requires_grad=True)
    s0 = torch.randn(3, hidden, dtype=torch.float64, requires_grad=True)
    weights = [torch.randn(2 * hidden, hidden, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    biases = [torch.randn(2 * hidden, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    mask = torch.rand(3, hidden, dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda a, b, *p: rhn_recurrence(a, b, list(p[:2]), list(p[2:]), mask), (xp, s0, *weights, *biases))
    assert ("backward", cpp) in calls and all(ran == cpp for _, ran in calls)


def test_h_and_t_apart_on_a_cpu_with_several_threads():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert rhn_eager.use_halves(torch.empty(1, 1, 8))
        assert not rhn_eager.use_halves(torch.empty(1, 1, 8, device="meta"))  # only on the CPU
        torch.set_num_threads(1)
        assert not rhn_eager.use_halves(torch.empty(1, 1, 8))
    finally:
        torch.set_num_threads(threads)


def test_unfused_rhn_gives_gradients_of_gradients():
    # what the fused path's docstring sends users to for second-order gradients
    torch.manual_seed(0)
    rhn = RHN(3, 4, depth=2, fused=False).double()
    x = torch.randn(3, 2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda v: rhn(v)[0], (x,))


@pytest.mark.parametrize("wrt", ["input", "parameters"])
def test_fused_rhn_refuses_gradients_of_gradients(wrt):
    # Its backward records no graph: a gradient penalty would silently miss the recurrence's share
    # (before this check, the penalty on the parameters' gradients ran and was wrong).
    torch.manual_seed(0)
    rhn = RHN(3, 4, depth=2).double()
    x = torch.randn(3, 2, 3, dtype=torch.float64, requires_grad=True)
    inputs = [x] if wrt == "input" else list(rhn.parameters())
    with pytest.raises(RuntimeError, match="first order only.*fused=False"):
        torch.autograd.grad(rhn(x)[0].sum(), inputs, create_graph=True)
    assert torch.autograd.grad(rhn(x)[0].sum(), inputs)  # first-order gradients as before


def test_torch_func_transforms_and_forward_ad_take_the_reference_path():
    """torch.func's transforms (per-sample gradients by vmap over grad, jvp) and forward-mode AD
    need more of an autograd function than its backward: the layer steps off its fused path for
    them (before, each raised). Per-sample gradients equal each sequence's own backward through the
    fused path; both tangents equal a central difference."""
    from torch.autograd import forward_ad
    from torch.func import functional_call, grad, jvp, vmap

    torch.manual_seed(0)
    rhn = RHN(3, 4, depth=2, num_layers=2).double()
    x = torch.randn(5, 3, 3, dtype=torch.float64)           # (T, B, F)
    assert "loop" not in {d.path for d in explain(rhn, x)}  # what an ordinary call runs
    params = {name: p.detach() for name, p in rhn.named_parameters()}

    def loss(p, sequence):                                  # one unbatched sequence (T, F)
        return functional_call(rhn, p, (sequence,))[0].pow(2).sum()

    per_sample = vmap(grad(loss), in_dims=(None, 1))(params, x)
    for b in range(x.shape[1]):
        rhn.zero_grad()
        rhn(x[:, b])[0].pow(2).sum().backward()
        for name, p in rhn.named_parameters():
            torch.testing.assert_close(per_sample[name][b], p.grad, msg=name)

    v, eps = torch.randn_like(x), 1e-6
    with torch.no_grad():
        difference = (rhn(x + eps * v)[0] - rhn(x - eps * v)[0]) / (2 * eps)
    tangent = jvp(lambda sequence: rhn(sequence)[0], (x,), (v,))[1]
    torch.testing.assert_close(tangent, difference, rtol=1e-6, atol=1e-8)
    with forward_ad.dual_level():
        tangent = forward_ad.unpack_dual(rhn(forward_ad.make_dual(x, v))[0]).tangent
    torch.testing.assert_close(tangent, difference, rtol=1e-6, atol=1e-8)


def test_fused_output_is_a_contiguous_tensor_of_its_own():
    # nn.LSTM returns a contiguous output; the fused path must too (its states are kept for backward).
    rhn = RHN(4, 6, depth=3)
    out, _ = rhn(torch.randn(5, 2, 4))
    assert "loop" not in {d.path for d in explain(rhn, torch.randn(5, 2, 4))} and out.is_contiguous()
    out.view(-1, 6).mul_(2)  # an in-place change of the output must not touch what backward saved
    out.sum().backward()


@pytest.mark.parametrize("amp", [False, True])
def test_fused_recurrence_in_float32_and_under_bfloat16_autocast(amp):
    # float32 within the fast paths' bound of the loop; under CPU autocast the input projection is
    # bfloat16 while the recurrent weights stay float32, and the fused path casts them (it raised before).
    torch.manual_seed(0)
    fused = RHN(16, 32, depth=3, num_layers=2)
    loop = RHN(16, 32, depth=3, num_layers=2, fused=False)
    loop.load_state_dict(fused.state_dict())
    x = torch.randn(9, 5, 16, requires_grad=True)
    assert "loop" not in {d.path for d in explain(fused, x)}  # so that the comparison is not loop against loop
    results = []
    for rhn in (fused, loop):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            out, state = rhn(x)
        (out.float().pow(2).sum() + state.float().sum()).backward()
        results.append([out.float(), state.float(), x.grad.clone(), *[p.grad.clone() for p in rhn.parameters()]])
        x.grad = None
    tol = 5e-2 if amp else 1e-5
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol * b.abs().max().item())


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("halves", [True, False], ids=["h and t apart", "one product"])
@pytest.mark.parametrize("cpp", [True, False], ids=["C++ loops", "PyTorch operations"])
def test_fused_paths_carry_non_finite_inputs_as_the_loop_does(value, halves, cpp, monkeypatch):
    """A NaN or an infinity in the input gives the loop's outputs and gradients on every CPU path
    (the C++ loops once turned a NaN into finite numbers: their fast exponential has no NaN)."""
    calls = _run_cpu_path(monkeypatch, halves, cpp)
    torch.manual_seed(0)
    fused = RHN(8, 16, depth=3, num_layers=2).double()
    loop = RHN(8, 16, depth=3, num_layers=2, fused=False).double()
    loop.load_state_dict(fused.state_dict())
    x = torch.randn(5, 2, 8, dtype=torch.float64)
    x[2, 0, 3] = value
    results = []
    for rhn in (fused, loop):
        inputs = x.clone().requires_grad_()
        out, state = rhn(inputs)
        out.sum().backward()
        results.append((out.detach(), state.detach(), inputs.grad))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, equal_nan=True, rtol=1e-10, atol=1e-12)
    if value != value:  # a NaN reaches every later step of its sequence, and only its sequence
        assert results[0][0][2:, 0].isnan().all() and not results[0][0][:, 1].isnan().any()
    assert ("forward", cpp) in calls


def test_flatten_parameters_does_nothing_so_that_code_for_nn_lstm_runs():
    # Code written for nn.LSTM calls flatten_parameters (after DataParallel's replication, or at each forward).
    # An RHN keeps no flat buffer: each weight is a contiguous tensor of its own, left as it is.
    torch.manual_seed(0)
    rhn = RHN(3, 4, depth=2, num_layers=2, bidirectional=True)
    x = torch.randn(5, 2, 3)
    before = rhn(x)
    where = {name: p.data_ptr() for name, p in rhn.named_parameters()}
    assert all(p.is_contiguous() for p in rhn.parameters())
    assert rhn.flatten_parameters() is None
    assert {name: p.data_ptr() for name, p in rhn.named_parameters()} == where
    torch.testing.assert_close(rhn(x), before, rtol=0, atol=0)


def test_dropout_between_layers_with_one_layer_warns_as_nn_lstm_does():
    # RHN's dropout is nn.LSTM's, between layers: one layer has none to drop, and nn.LSTM's warning says so.
    with pytest.warns(UserWarning) as lstm:
        torch.nn.LSTM(3, 4, dropout=0.5)
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1") as rhn:
        RHN(3, 4, depth=2, dropout=0.5)
    assert str(rhn[0].message) == str(lstm[0].message)
    assert rhn[0].filename == __file__  # (it points at the line that made the layer)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RHN(3, 4, 2, depth=2, dropout=0.5)  # between its two layers
        RHN(3, 4, depth=2, input_dropout=0.5, state_dropout=0.5)  # these apply to one layer too


def test_the_state_by_nn_lstm_keyword_hx():
    # Code written for nn.LSTM and nn.RNNCell passes the state as hx=.
    torch.manual_seed(0)
    rhn = RHN(3, 4, depth=2, num_layers=2)
    x, s0 = torch.randn(5, 2, 3), torch.randn(2, 2, 4)
    torch.testing.assert_close(rhn(x, hx=s0), rhn(x, s0), rtol=0, atol=0)
    torch.testing.assert_close(rhn(x, hx=s0, lengths=torch.tensor([5, 3])), rhn(x, s0, lengths=torch.tensor([5, 3])))
    with pytest.raises(TypeError, match="RHN got the initial state twice, as state and as hx"):
        rhn(x, s0, hx=s0)
    cell = RHNCell(3, 4, depth=2)
    torch.testing.assert_close(cell(x[0], hx=s0[0]), cell(x[0], s0[0]), rtol=0, atol=0)
    with pytest.raises(TypeError, match="RHNCell got the initial state twice"):
        cell(x[0], state=s0[0], hx=s0[0])
