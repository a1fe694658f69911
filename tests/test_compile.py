"""``torch.compile`` (one graph: no break, but at ``nn.LSTM``, which Dynamo does not trace) and
``torch.export`` on every layer: the same outputs, and under ``torch.compile`` the same parameter
gradients, as eager."""

import sys
from pathlib import Path

import pytest
import torch
from conftest import RESIDUAL_PARTS

from highwaynet.kernels import rhn_eager
from highwaynet.kernels.rhn_recurrence import OPAQUE_TO_COMPILE
from highwaynet.nn import RHN, GatedResidualNetwork, Highway, HighwayConv2d, HighwayLSTM, Residual
from highwaynet.nn.sequence import TRACED_ASSERTS_HOLD

LAYERS = {
    "Highway": (lambda: Highway(16, 3), (8, 16)),
    "HighwayConv2d": (lambda: HighwayConv2d(4, 3), (2, 4, 6, 6)),
    "HighwayLSTM": (lambda: HighwayLSTM(8, 6, 2, bidirectional=True), (5, 3, 8)),
    # the fused recurrence: an autograd.Function whose two directions are custom operators
    "RHN": (lambda: RHN(8, 16, depth=2), (3, 3, 8)),
    "RHN, bidirectional": (lambda: RHN(8, 16, depth=2, bidirectional=True), (3, 3, 8)),
    **{f"Residual {name}": (lambda make=make: Residual(torch.nn.Sequential(torch.nn.LayerNorm(8),
                                                                           torch.nn.Linear(8, 8)), make()), (2, 5, 8))
       for name, make in RESIDUAL_PARTS.items()},
    "GatedResidualNetwork": (lambda: GatedResidualNetwork(8, 16, 4), (6, 8)),
}


def _output(y):
    return y[0] if isinstance(y, tuple) else y  # the recurrent layers return (output, state)


@pytest.mark.parametrize("name", [*LAYERS, "RHN, h and t apart", "RHN, one product"])
def test_torch_compile_matches_eager(name, monkeypatch):
    if name in ("RHN, h and t apart", "RHN, one product"):  # both ways kernels.rhn_eager makes h and t
        monkeypatch.setattr(rhn_eager, "use_halves", lambda x_proj: name == "RHN, h and t apart")
    make, shape = LAYERS.get(name, LAYERS["RHN"])
    torch.manual_seed(0)
    eager = make()
    compiled = make()
    compiled.load_state_dict(eager.state_dict())
    x = torch.randn(*shape)
    fullgraph = name != "HighwayLSTM"  # Dynamo breaks its graph at nn.LSTM itself
    y_eager, y_compiled = _output(eager(x)), _output(torch.compile(compiled, fullgraph=fullgraph)(x))
    torch.testing.assert_close(y_compiled, y_eager, rtol=1e-5, atol=1e-6)
    grad = torch.randn_like(y_eager)
    y_eager.backward(grad)
    y_compiled.backward(grad)
    for (param, a), b in zip(eager.named_parameters(), compiled.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=f"{name}: {param}'s gradient")


# (nn.LSTM's own weight list warns under non-strict export: PyTorch's, not ours)
@pytest.mark.filterwarnings("ignore:The tensor attributes .*_flat_weights")
@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
@pytest.mark.parametrize("name", list(LAYERS))
def test_torch_export_matches_eager(name, strict):
    make, shape = LAYERS[name]
    torch.manual_seed(0)
    layer = make().eval()
    program = torch.export.export(layer, (torch.randn(*shape),), strict=strict)
    x = torch.randn(*shape)  # other values than those it was traced with
    torch.testing.assert_close(_output(program.module()(x)), _output(layer(x)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bidirectional", [False, True], ids=["forward", "bidirectional"])
@pytest.mark.skipif(not OPAQUE_TO_COMPILE,
                    reason="needs the recurrence as one custom operator (torch >= 2.4); torch 2.3 unrolls the loop")
def test_rhn_exports_for_any_length_and_batch(bidirectional):
    # The fused recurrence is one operator whose fake version works on symbolic sizes, so one
    # exported program serves every sequence length and batch size (nn.LSTM's fixes the length).
    torch.manual_seed(0)
    rhn = RHN(8, 16, depth=3, num_layers=2, bidirectional=bidirectional).eval()
    dims = {0: torch.export.Dim("steps", min=2), 1: torch.export.Dim("batch", min=2)}
    program = torch.export.export(rhn, (torch.randn(5, 3, 8),), dynamic_shapes=(dims,))
    for shape in [(11, 4, 8), (2, 9, 8)]:
        x = torch.randn(*shape)
        for a, b in zip(program.module()(x), rhn(x), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bidirectional", [False, True], ids=["forward", "bidirectional"])
@pytest.mark.skipif(not TRACED_ASSERTS_HOLD, reason="needs torch >= 2.10: earlier, lengths are read while traced")
def test_rhn_with_lengths_exports_for_any_length_and_batch_and_still_checks_them(bidirectional):
    # Lengths are data: the layer may not read them into Python while traced, or the export stops
    # (and torch.compile breaks its graph). The check becomes an assertion inside the program.
    torch.manual_seed(0)
    rhn = RHN(8, 16, depth=3, num_layers=2, bidirectional=bidirectional).eval()
    batch = torch.export.Dim("batch", min=2)
    program = torch.export.export(rhn, (torch.randn(5, 3, 8),), {"lengths": torch.tensor([5, 2, 3])},
                                  dynamic_shapes={"input": {0: torch.export.Dim("steps", min=2), 1: batch},
                                                  "lengths": {0: batch}})
    x, lengths = torch.randn(9, 4, 8), torch.tensor([1, 9, 4, 0])
    for a, b in zip(program.module()(x, lengths=lengths), rhn(x, lengths=lengths), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match=r"RHN expects lengths in \[0, the number of steps\]"):
        program.module()(x, lengths=torch.tensor([1, 10, 4, 0]))


@pytest.mark.skipif(not hasattr(torch.compiler, "is_exporting"), reason="torch.compiler.is_exporting: torch >= 2.5")
def test_highway_lstm_with_lengths_exports_for_any_batch():
    # A packed sequence's shapes depend on the lengths' values: while exported, the blocks run the
    # LSTM over the padded batch instead (nn.lstm.unpacked_lstm), every output and final state as
    # eager's. (nn.LSTM's export fixes the sequence length: the program takes batches padded to it.)
    torch.manual_seed(0)
    stack = HighwayLSTM(8, 4, 2, batch_first=True).eval()
    batch = torch.export.Dim("batch", min=2)
    program = torch.export.export(stack, (torch.randn(3, 9, 8),), {"lengths": torch.tensor([5, 2, 3])},
                                  dynamic_shapes={"input": {0: batch}, "lengths": {0: batch}})
    x, lengths = torch.randn(4, 9, 8), torch.tensor([1, 9, 4, 6])
    (out, (h, c)), (want, (h_want, c_want)) = program.module()(x, lengths=lengths), stack(x, lengths=lengths)
    for a, b in ((out, want), (h, h_want), (c, c_want)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["RHN", "HighwayLSTM"])
@pytest.mark.skipif(not TRACED_ASSERTS_HOLD, reason="needs torch >= 2.10: earlier, compiled code drops assertions")
def test_lengths_compile_without_a_graph_break_of_their_own_and_still_checked(name):
    torch.manual_seed(0)
    layer = RHN(8, 16, depth=2, bidirectional=True) if name == "RHN" else HighwayLSTM(8, 6, 2, bidirectional=True)
    x, lengths = torch.randn(6, 3, 8), torch.tensor([6, 1, 4])
    if name == "HighwayLSTM":  # PyTorch's packing and nn.LSTM break the graph, and nothing of ours
        explained = torch._dynamo.explain(layer)(x, lengths=lengths)
        where = {Path(frame.filename).name for reason in explained.break_reasons for frame in reason.user_stack}
        assert where == {"lstm.py"}, where
        torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=name == "RHN")
    torch.testing.assert_close(_output(compiled(x, lengths=lengths)), _output(layer(x, lengths=lengths)),
                               rtol=1e-5, atol=1e-6)
    shortest = 0 if name == "RHN" else 1
    with pytest.raises(RuntimeError, match=rf"{name} expects lengths in \[{shortest}, the number of steps\]"):
        compiled(x, lengths=torch.tensor([6, 7, 4]))


def test_rhn_compiles_its_loop_where_the_recurrence_is_not_one_operator(monkeypatch):
    # torch 2.3 has no torch.library.custom_op: there the fused recurrence cannot be one opaque call,
    # and RHN takes its reference loop while compiling (eager keeps the fused path).
    from highwaynet.kernels import rhn_recurrence as _  # noqa: F401 (the module, below)
    from highwaynet.nn import rhn as rhn_module

    monkeypatch.setattr(sys.modules["highwaynet.kernels.rhn_recurrence"], "OPAQUE_TO_COMPILE", False)
    fused_calls = []
    real = rhn_module.rhn_recurrence
    monkeypatch.setattr(rhn_module, "rhn_recurrence", lambda *a, **k: fused_calls.append(1) or real(*a, **k))
    torch.manual_seed(0)
    rhn, x = RHN(8, 16, depth=2), torch.randn(3, 3, 8)
    expected = rhn(x)[0]
    assert fused_calls, "eager should take the fused path"
    fused_calls.clear()
    torch._dynamo.reset()
    compiled = torch.compile(rhn, fullgraph=True)(x)[0]
    assert not fused_calls
    torch.testing.assert_close(compiled, expected, rtol=1e-5, atol=1e-6)
