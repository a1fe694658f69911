import warnings

import numpy as np
import pytest
import torch
from conftest import check_packed_output_order
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from highwaynet.analysis import gate_modules, lesion, record_gates
from highwaynet.nn import HighwayLSTM, HighwayLSTMBlock, Projection, ZeroPad


def reference_block(block, x):
    """The block written out: BiLSTM output H, gate from the input, carried input resized."""
    h, _ = block.lstm(x)
    t = torch.sigmoid(x @ block.transform.weight.T + block.transform.bias)
    return t * h + (1 - t) * block.resize(x)


@pytest.mark.parametrize("lengths", [None, 7], ids=["no lengths", "full lengths"])  # unpacked, packed
@pytest.mark.parametrize("resize", ["projection", "zeropad"])
def test_block_matches_formula(resize, lengths):
    torch.manual_seed(0)
    block = HighwayLSTMBlock(6, 5, resize=resize).double()
    assert isinstance(block.resize, Projection if resize == "projection" else ZeroPad)
    assert torch.equal(block.transform.bias, torch.full((10,), -2.0, dtype=torch.float64))
    x = torch.randn(3, 7, 6, dtype=torch.float64)
    y, (h, c) = block(x, None if lengths is None else torch.full((3,), lengths))
    torch.testing.assert_close(y, reference_block(block, x))
    _, (h_ref, c_ref) = block.lstm(x)
    torch.testing.assert_close(h, h_ref)
    torch.testing.assert_close(c, c_ref)


def test_same_width_carries_input_unchanged():
    block = HighwayLSTMBlock(10, 5)
    assert isinstance(block.resize, torch.nn.Identity)


def test_stack_shapes_and_state_like_lstm():
    torch.manual_seed(0)
    stack = HighwayLSTM(8, 4, num_layers=3)
    x = torch.randn(6, 2, 8)  # (T, B, F)
    out, (h, c) = stack(x)
    assert out.shape == (6, 2, 8) and h.shape == c.shape == (6, 2, 4)
    out2, _ = stack(x, (h, c))
    assert not torch.allclose(out, out2)  # the given state is used
    with pytest.raises(ValueError, match=r"\(h_0, c_0\) of shape \(6, 2, 4\)"):
        stack(x, (h[:2], c[:2]))
    with pytest.raises(ValueError, match=r"input_size=8; got \(6, 2, 5\)"):
        stack(torch.randn(6, 2, 5))


@pytest.mark.parametrize("call, message", [
    (lambda s: s(torch.randn(2, 0, 8)), r"at least one time step, got input of shape \(2, 0, 8\)"),
    (lambda s: s(torch.randn(2, 5, 8), lengths=torch.tensor([5, 0])), r"length in \[1, 5\] .* got \[5, 0\]"),
    (lambda s: s(torch.randn(2, 5, 8), lengths=torch.tensor([6, 5])), r"length in \[1, 5\] .* got \[6, 5\]"),
    (lambda s: s(torch.randn(5, 8), (torch.zeros(4, 1, 4),) * 2), "state without a batch dimension"),
    (lambda s: s(torch.randn(5, 8), lengths=torch.tensor([5])), "unbatched input"),
])
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call(HighwayLSTM(8, 4, num_layers=2, batch_first=True))


@pytest.mark.parametrize("batch_first", [False, True])
def test_unbatched_sequence_as_nn_lstm_takes_it(batch_first):
    # One sequence (T, F) and a state (layers·directions, H) each: no batch dimension in or out, as nn.LSTM.
    torch.manual_seed(0)
    stack = HighwayLSTM(8, 4, num_layers=2, batch_first=batch_first).double()
    x = torch.randn(5, 8, dtype=torch.float64)
    h0, c0 = torch.randn(2, 4, 4, dtype=torch.float64).unbind(0)
    out, (h, c) = stack(x, (h0, c0))
    assert out.shape == (5, 8) and h.shape == c.shape == (4, 4)
    # The first block written out: a BiLSTM of one layer fed the first two rows of the state.
    first = stack.blocks[0]
    hb, _ = first.lstm(x, (h0[:2], c0[:2]))
    t = torch.sigmoid(x @ first.transform.weight.T + first.transform.bias)
    y1 = t * hb + (1 - t) * first.resize(x)
    second = stack.blocks[1]
    hb2, (h2, c2) = second.lstm(y1, (h0[2:], c0[2:]))
    t2 = torch.sigmoid(y1 @ second.transform.weight.T + second.transform.bias)
    torch.testing.assert_close(out, t2 * hb2 + (1 - t2) * y1)
    torch.testing.assert_close(h[2:], h2)
    torch.testing.assert_close(c[2:], c2)


def test_padding_never_changes_a_sentence():
    torch.manual_seed(0)
    stack = HighwayLSTM(5, 3, num_layers=2, batch_first=True).double().eval()
    x = torch.randn(3, 8, 5, dtype=torch.float64)
    lengths = torch.tensor([8, 3, 5])
    out, (h, _) = stack(x, lengths=lengths)
    for b, n in enumerate(lengths.tolist()):
        alone, (h_alone, _) = stack(x[b:b + 1, :n], lengths=torch.tensor([n]))
        torch.testing.assert_close(out[b, :n], alone[0])
        assert torch.equal(out[b, n:], torch.zeros(8 - n, 6, dtype=torch.float64))
        torch.testing.assert_close(h[:, b], h_alone[:, 0])
    # Padding of any value, NaN included, changes nothing, gradients too.
    noisy = x.clone()
    noisy[1, 3:], noisy[2, 5:] = 1e3, float("nan")
    noisy.requires_grad_()
    noisy_out, (noisy_h, _) = stack(noisy, lengths=lengths)
    torch.testing.assert_close(noisy_out, out)
    torch.testing.assert_close(noisy_h, h)
    (noisy_out.sum() + noisy_h.sum()).backward()
    assert all(torch.isfinite(p.grad).all() for p in [noisy, *stack.parameters()])


def test_packed_sequence_round_trip():
    torch.manual_seed(0)
    stack = HighwayLSTM(5, 3, num_layers=2).double()
    x = torch.randn(7, 3, 5, dtype=torch.float64)
    lengths = torch.tensor([7, 2, 4])
    packed, _ = stack(pack_padded_sequence(x, lengths, enforce_sorted=False))
    out, out_lengths = pad_packed_sequence(packed)
    torch.testing.assert_close(out, stack(x, lengths=lengths)[0])
    assert torch.equal(out_lengths, lengths)


@pytest.mark.parametrize("enforce_sorted", [True, False], ids=["sorted", "unsorted"])
def test_a_packed_output_keeps_the_inputs_order_of_sequences(enforce_sorted):
    # As nn.LSTM's: the output packed as the input is, sequences of equal length in the input's order.
    torch.manual_seed(0)
    check_packed_output_order(HighwayLSTM(3, 2, num_layers=2).double(), 3, enforce_sorted)


def test_gradients_flow_through_every_gate():
    torch.manual_seed(0)
    stack = HighwayLSTM(6, 3, num_layers=4, batch_first=True, resize="zeropad")
    out, _ = stack(torch.randn(2, 5, 6), lengths=torch.tensor([5, 3]))
    out.sum().backward()
    for block in stack.blocks:
        assert block.transform.weight.grad.abs().sum() > 0 and block.transform.bias.grad.abs().sum() > 0
        assert all(p.grad.abs().sum() > 0 for p in block.lstm.parameters())


def test_plain_stack_has_no_gates_and_recorder_lesion_work_on_highway():
    plain = HighwayLSTM(6, 3, num_layers=3, highway=False)
    assert gate_modules(plain) == [] and not hasattr(plain.blocks[0], "transform")
    torch.manual_seed(0)
    stack = HighwayLSTM(6, 3, num_layers=3, batch_first=True)
    x = torch.randn(2, 4, 6)
    with record_gates(stack) as rec:
        stack(x)
    assert rec.names == ["blocks.0.gate", "blocks.1.gate", "blocks.2.gate"]
    assert rec.values(0).shape == (2, 4, 6)
    # Lesioning blocks 1 and 2 leaves block 0's output.
    first, _ = stack.blocks[0](x, torch.full((2,), 4))
    with lesion(stack, [1, 2]):
        torch.testing.assert_close(stack(x)[0], first)


def test_dropout_never_touches_the_carried_input():
    # With every gate shut the highway stack is the identity, in training too: dropout acts on H only.
    stack = HighwayLSTM(8, 4, num_layers=3, batch_first=True, dropout=0.5).train()
    x = torch.randn(2, 5, 8)
    with lesion(stack, list(range(3))):
        out, _ = stack(x)
    torch.testing.assert_close(out, x)
    # the plain stack keeps nn.LSTM's dropout between layers
    assert isinstance(HighwayLSTM(8, 4, num_layers=3, dropout=0.5, highway=False).dropout, torch.nn.Dropout)


def test_a_plain_blocks_dropout_drops_its_output_in_training_only():
    # A block without the gate is y = H: its dropout (on H) is on the output, as its repr says it has one
    # (it was made and never applied).
    torch.manual_seed(0)
    block = HighwayLSTMBlock(3, 8, highway=False, dropout=0.5)
    x, lengths = torch.randn(4, 6, 3), torch.tensor([6, 4, 2, 1])
    plain = block.eval()(x, lengths)[0]
    dropped = block.train()(x, lengths)[0]
    kept = dropped != 0
    assert 0.3 < (~kept).float()[plain != 0].mean() < 0.7  # about half of the outputs dropped
    torch.testing.assert_close(dropped[kept], 2 * plain[kept])  # the rest scaled by 1 / (1 - p)
    assert not dropped[plain == 0].any()  # the steps past each length stay zero


@pytest.mark.parametrize("bidirectional", [True, False], ids=["bidirectional", "forward"])
@pytest.mark.parametrize("with_state", [False, True], ids=["zero state", "given state"])
def test_unpacked_lstm_gives_the_packed_outputs_and_final_states(bidirectional, with_state, monkeypatch):
    """What a block runs while exported (no packing: the LSTM over the padded batch, the backward
    direction over each sequence reversed within its length, the final cell from the gates in closed
    form) against nn.LSTM on the packed batch, in float64."""
    import highwaynet.nn.lstm as lstm_module

    torch.manual_seed(0)
    block = HighwayLSTMBlock(5, 4, bidirectional=bidirectional).double()
    x, lengths = torch.randn(4, 7, 5, dtype=torch.float64), torch.tensor([7, 3, 1, 5])
    directions = 2 if bidirectional else 1
    state = tuple(torch.randn(directions, 4, 4, dtype=torch.float64) for _ in range(2)) if with_state else None
    packed = block(x, lengths, state)
    monkeypatch.setattr(lstm_module, "exporting", lambda: True)
    unpacked = block(x, lengths, state)
    for a, b in zip((unpacked[0], *unpacked[1]), (packed[0], *packed[1]), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_sizes_given_as_numpy_integers_make_the_layer_they_name():
    # (check_size takes a NumPy integer, as every layer does; the LSTM was made from the unchecked value,
    # and nn.LSTM refused it from inside torch: "input_size should be of type int, got: int64")
    stack = HighwayLSTM(np.int64(8), np.int64(4), np.int64(2), batch_first=True)
    block = HighwayLSTMBlock(np.int32(8), np.int64(3), bidirectional=False)
    assert type(stack.blocks[0].lstm.input_size) is int and block.lstm.hidden_size == 3
    assert stack(torch.randn(2, 5, 8))[0].shape == (2, 5, 8)
    assert block(torch.randn(2, 5, 8))[0].shape == (2, 5, 3)


def test_flatten_parameters_flattens_every_blocks_lstm(monkeypatch):
    # Code written for nn.LSTM calls flatten_parameters (after DataParallel's replication, or at each forward):
    # the stack passes it on to each block's nn.LSTM, which lays its weights out for cuDNN (a no-op on the CPU).
    torch.manual_seed(0)
    stack = HighwayLSTM(3, 4, num_layers=3)
    called = []
    for block in stack.blocks:
        monkeypatch.setattr(block.lstm, "flatten_parameters", lambda lstm=block.lstm: called.append(lstm))
    assert stack.flatten_parameters() is None
    assert called == [block.lstm for block in stack.blocks]
    monkeypatch.undo()
    x = torch.randn(5, 2, 3)
    before = stack(x)
    stack.flatten_parameters()
    stack.blocks[0].flatten_parameters()
    torch.testing.assert_close(stack(x), before, rtol=0, atol=0)


@pytest.mark.parametrize("highway", [True, False], ids=["highway", "plain"])
def test_dropout_between_blocks_with_one_block_warns_as_nn_lstm_does(highway):
    # The stack's dropout is for every block but the last: one block has none to drop, as nn.LSTM says.
    with pytest.warns(UserWarning) as lstm:
        torch.nn.LSTM(3, 4, dropout=0.5)
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1") as ours:
        HighwayLSTM(3, 4, dropout=0.5, highway=highway)
    assert str(ours[0].message) == str(lstm[0].message)
    assert ours[0].filename == __file__  # (it points at the line that made the layer)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        HighwayLSTM(3, 4, 2, dropout=0.5, highway=highway)
        HighwayLSTMBlock(3, 4, dropout=0.5, highway=highway)  # (a block's dropout is on its own H)


@pytest.mark.parametrize("model", ["HighwayLSTM", "HighwayLSTM packed", "LSTMLanguageModel", "CharAwareLanguageModel"])
def test_a_bfloat16_lstm_runs_on_torchs_own_where_onednn_has_none(model, monkeypatch):
    """Where oneDNN has no bfloat16 LSTM (a processor without AVX-512), torch 2.3 ran a bfloat16 ``nn.LSTM``
    on the CPU through it all the same and failed ("could not create a primitive descriptor for an LSTM
    forward propagation primitive"); the layers then run it with oneDNN off (torch's own LSTM, which later
    releases choose themselves there), and a float32 one as it was. Checked here by what each LSTM runs
    under, on any processor; on torch 2.3 without AVX-512 by the benchmarks' and the layers' own tests."""
    import highwaynet.nn.lstm as lstm_module
    from highwaynet.models.lm import CharAwareLanguageModel, LSTMLanguageModel

    torch.manual_seed(0)
    if model.startswith("HighwayLSTM"):
        net, x = HighwayLSTM(8, 6, num_layers=2, batch_first=True), torch.randn(2, 5, 8)
        kwargs = {"lengths": torch.tensor([5, 2])} if model.endswith("packed") else {}
        lstms = [block.lstm for block in net.blocks]
    else:
        net = (LSTMLanguageModel(20, 6) if model == "LSTMLanguageModel" else
               CharAwareLanguageModel(torch.randint(1, 9, (20, 4)), 9, 6, encoder_options={"filters": [[2, 4]]}))
        x, kwargs, lstms = torch.randint(0, 20, (5, 2)), {}, [net.rnn]
    onednn = []
    for lstm in lstms:
        lstm.register_forward_pre_hook(lambda m, args: onednn.append(torch.backends.mkldnn.enabled))
    cases = [(False, torch.float32), (False, torch.bfloat16), (True, torch.float32)]
    if lstm_module.ONEDNN_BFLOAT16:  # (where it has none, torch 2.3 fails on it: what is checked)
        cases.append((True, torch.bfloat16))
    for has_it, dtype in cases:
        monkeypatch.setattr(lstm_module, "ONEDNN_BFLOAT16", has_it)
        onednn.clear()
        out = net.to(dtype)(x if x.dtype == torch.long else x.to(dtype), **kwargs)[0]
        assert out.dtype == dtype and torch.isfinite(out).all()
        assert onednn == [has_it or dtype == torch.float32] * len(lstms), (has_it, dtype)
    assert torch.backends.mkldnn.enabled  # (on again after each call)


def test_a_bfloat16_lstm_in_another_thread_runs_with_onednn_off_to_its_end(monkeypatch):
    """oneDNN's switch is one for the whole process: a bfloat16 LSTM whose call began while another
    thread's had switched it off took it as the user's own setting, and ran on once the other's end had
    switched it back on, through oneDNN (torch 2.3 on a processor without AVX-512: "could not create a
    primitive descriptor for an LSTM forward propagation primitive", now and then, two threads at once).
    Checked by the switch each LSTM meets: off for both, then back as it was (on; off where the user set it)."""
    import threading

    import highwaynet.nn.lstm as lstm_module

    monkeypatch.setattr(lstm_module, "ONEDNN_BFLOAT16", False)
    first, second = (HighwayLSTM(4, 3, batch_first=True).to(torch.bfloat16) for _ in range(2))
    x = torch.randn(2, 3, 4, dtype=torch.bfloat16)
    inside, second_began, first_ended = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first_lstm(module, args):
        inside.set()
        assert second_began.wait(10)

    def second_lstm(module, args):
        second_began.set()
        assert first_ended.wait(10)  # (the first call over: the switch as the first left it)
        seen["second"] = torch.backends.mkldnn.enabled

    def run_first():
        first(x)
        first_ended.set()

    def run_second():
        assert inside.wait(10)
        second(x)

    first.blocks[0].lstm.register_forward_pre_hook(first_lstm)
    second.blocks[0].lstm.register_forward_pre_hook(second_lstm)
    threads = [threading.Thread(target=run_first), threading.Thread(target=run_second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert seen == {"second": False} and torch.backends.mkldnn.enabled
    first.blocks[0].lstm._forward_pre_hooks.clear()
    torch.backends.mkldnn.enabled = False  # (the user's own setting: kept)
    try:
        first(x)
        assert not torch.backends.mkldnn.enabled
    finally:
        torch.backends.mkldnn.enabled = True


def test_the_state_by_nn_lstm_keyword_hx():
    torch.manual_seed(0)
    stack = HighwayLSTM(3, 4, num_layers=2)
    x, state = torch.randn(5, 2, 3), (torch.randn(4, 2, 4), torch.randn(4, 2, 4))
    torch.testing.assert_close(stack(x, hx=state), stack(x, state), rtol=0, atol=0)
    with pytest.raises(TypeError, match="HighwayLSTM got the initial state twice, as state and as hx"):
        stack(x, state, hx=state)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("lengths", [None, [6, 3]], ids=["unpacked", "packed"])
def test_cpu_autocast_runs_the_lstm_in_its_dtype(dtype, lengths):
    # (CPU autocast casts oneDNN's LSTM, which nn.LSTM runs a float32 input with, to its dtype whatever the
    # processor: without AVX-512 oneDNN has none, and the stack failed inside torch, "could not create a
    # primitive descriptor for the LSTM forward propagation primitive", as nn.LSTM alone does. Each block's
    # LSTM is given its input and state in the autocast dtype, which runs where the processor has it or not.)
    torch.manual_seed(0)
    stack = HighwayLSTM(8, 6, num_layers=2, batch_first=True)
    x = torch.randn(2, 6, 8)
    lengths = None if lengths is None else torch.tensor(lengths)
    state = (torch.randn(4, 2, 6), torch.randn(4, 2, 6))
    seen = []
    for block in stack.blocks:
        block.lstm.register_forward_pre_hook(
            lambda m, args: seen.append([getattr(a, "data", a).dtype for a in (args[0], *(args[1] or ()))]))
    expected, (h, c) = stack(x, state, lengths=lengths)
    seen.clear()
    with torch.autocast("cpu", dtype=dtype):
        out, (h_amp, c_amp) = stack(x, state, lengths=lengths)
    assert seen == [[dtype] * 3] * 2  # (input, h_0, c_0 of each block's LSTM)
    assert out.dtype == h_amp.dtype == c_amp.dtype == dtype
    for got, want in ((out, expected), (h_amp, h), (c_amp, c)):
        torch.testing.assert_close(got.float(), want, rtol=0, atol=0.1)
    out.float().square().sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in stack.parameters())
    with torch.autocast("cpu", dtype=dtype):  # (float64, which autocast leaves alone, stays float64)
        assert stack.double()(x.double())[0].dtype == torch.float64
