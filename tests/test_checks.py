"""Arguments checked as torch.nn checks them (issue 56, class 2): each case that used to be accepted
wrongly or to fail inside torch now gives the right answer or a TypeError / ValueError naming the
argument; and the helpers of ``highwaynet._checks`` that every check goes through."""

import math
from unittest import mock

import numpy as np
import pytest
import torch
from torch import nn

from highwaynet import _checks
from highwaynet.analysis import lesion, record_gates
from highwaynet.models import CausalTransformer, LSTMLanguageModel
from highwaynet.nn import (
    RHN,
    CharCNNHighway,
    CharVocab,
    GatedResidual,
    Highway,
    HighwayConv2d,
    HighwayGate,
    HighwayLSTM,
    HighwayLSTMBlock,
    RHNCell,
)

# -- issue 56's cases ------------------------------------------------------------------------------


@pytest.mark.parametrize("layers, came", [(True, "bool True"), (1.0, "float 1.0"), ([0, False], "bool False")])
def test_lesion_refuses_a_bool_or_a_float_for_a_gate_index(layers, came):
    net = Highway(4, 3)
    with pytest.raises(TypeError, match=rf"layers must be .*got {came}"), lesion(net, layers):
        pass
    assert not any(g.lesioned for g in net.gates)


def test_char_vocab_encode_refuses_one_string_for_a_list_of_words():
    vocab = CharVocab.from_words(["hello"])
    with pytest.raises(TypeError, match=r"words must be a list of words, got one str 'hello': pass \['hello'\]"):
        vocab.encode("hello")
    with pytest.raises(TypeError, match="words must be a list of words, got one str"):
        CharVocab.from_words("hello")


def test_encode_cuts_a_word_to_length_and_keeps_its_end_marker():
    vocab = CharVocab.from_words(["hello", "hi"])
    h, e = vocab.index["h"], vocab.index["e"]
    assert vocab.encode(["hello", "hi"], length=4).tolist() == [[vocab.BOW, h, e, vocab.EOW],
                                                               [vocab.BOW, h, vocab.index["i"], vocab.EOW]]
    assert vocab.encode(["hi"], length=6).tolist() == [[vocab.BOW, h, vocab.index["i"], vocab.EOW, 0, 0]]
    with pytest.raises(ValueError, match="length must be at least 3 .*got 2"):
        vocab.encode(["hello"], length=2)


@pytest.mark.parametrize("make", [
    lambda bias: Highway(4, gate_bias=bias),
    lambda bias: GatedResidual(nn.Linear(4, 4), 4, gate_bias=bias),
    lambda bias: GatedResidual(nn.Linear(4, 4), 4, kind="gtrxl", gate_bias=bias),
    lambda bias: CausalTransformer(10, 8, 1, heads=2, context=8, residual="highway", gate_bias=bias),
    lambda bias: RHN(3, 4, gate_bias=bias),
    lambda bias: HighwayLSTM(3, 4, gate_bias=bias),
    lambda bias: CharCNNHighway(10, gate_bias=bias),
], ids=["Highway", "GatedResidual", "gtrxl", "CausalTransformer", "RHN", "HighwayLSTM", "CharCNNHighway"])
@pytest.mark.parametrize("bias", [math.nan, math.inf, -math.inf])
def test_a_non_finite_gate_bias_is_refused(make, bias):
    with pytest.raises(ValueError, match=f"gate_bias must be finite, got {bias}"):
        make(bias)


def test_a_gate_bias_the_parameters_cannot_hold_is_refused():
    with pytest.raises(ValueError, match=r"gate_bias must fit in the parameters' dtype torch.float16"):
        Highway(4, gate_bias=1e5, dtype=torch.float16)
    assert Highway(4, gate_bias=1e5).gate_bias == 1e5  # float32 holds it


def test_rhn_refuses_float_lengths():
    with pytest.raises(TypeError, match=r"RHN expects lengths to be an integer tensor \(torch.long\), got dtype "
                                        r"torch.float32"):
        RHN(3, 4)(torch.randn(4, 2, 3), lengths=torch.tensor([4.0, 2.0]))
    out, _ = RHN(3, 4)(torch.randn(4, 2, 3), lengths=torch.tensor([4, 2], dtype=torch.int16))  # (any integer dtype)
    assert out.shape == (4, 2, 4)


@pytest.mark.parametrize("dtype, error", [(torch.float64, "of the input's dtype torch.float32, got torch.float64"),
                                          (torch.long, "to be a floating-point tensor, got dtype torch.int64")])
def test_rhn_refuses_a_state_of_another_dtype_as_nn_lstm_does(dtype, error):
    with pytest.raises(TypeError, match=f"RHN expects state {error}"):
        RHN(3, 5)(torch.randn(4, 2, 3), torch.zeros(1, 2, 5, dtype=dtype))


def test_highway_lstm_refuses_a_float64_state_before_mkldnn():
    with pytest.raises(TypeError, match="HighwayLSTM expects state's h_0 of the input's dtype torch.float32, got "
                                        "torch.float64"):
        HighwayLSTM(3, 5)(torch.randn(4, 2, 3), (torch.zeros(2, 2, 5, dtype=torch.float64),) * 2)
    with pytest.raises(TypeError, match="expects state's c_0 of the input's dtype"):
        HighwayLSTM(3, 5)(torch.randn(4, 2, 3), (torch.zeros(2, 2, 5), torch.zeros(2, 2, 5, dtype=torch.float64)))
    with pytest.raises(TypeError, match="HighwayLSTM expects state to be a pair"):
        HighwayLSTM(3, 5)(torch.randn(4, 2, 3), torch.zeros(2, 2, 5))


@pytest.mark.parametrize("lengths", [None, torch.zeros(0, dtype=torch.long)], ids=["no lengths", "lengths"])
def test_highway_lstm_takes_a_batch_of_none_as_nn_lstm_does(lengths):
    out, (h, c) = HighwayLSTM(3, 5, num_layers=2)(torch.randn(4, 0, 3), lengths=lengths)
    want, (h_want, _) = nn.LSTM(3, 5, num_layers=2, bidirectional=True)(torch.randn(4, 0, 3))
    assert out.shape == want.shape == (4, 0, 10) and h.shape == c.shape == h_want.shape == (4, 0, 5)
    out, _ = HighwayLSTMBlock(3, 5)(torch.randn(0, 4, 3), lengths)
    assert out.shape == (0, 4, 10)


def test_rhn_takes_a_batch_of_none():
    out, state = RHN(3, 5, num_layers=2, bidirectional=True)(torch.randn(4, 0, 3), lengths=torch.zeros(0).long())
    assert out.shape == (4, 0, 10) and state.shape == (4, 0, 5)


def test_char_cnn_highway_reads_words_of_no_characters_as_all_padding():
    torch.manual_seed(0)
    encoder = CharCNNHighway(12, filters=((1, 4), (3, 5)))
    empty = encoder(torch.zeros(3, 0, dtype=torch.long))
    assert empty.shape == (3, 9)
    torch.testing.assert_close(empty, encoder(torch.zeros(3, 7, dtype=torch.long)))  # what padding of any length gives
    assert encoder(torch.zeros(0, 5, dtype=torch.long)).shape == (0, 9)
    with pytest.raises(ValueError, match=r"CharCNNHighway expects chars in \[0, 12\).*got 12"):
        encoder(torch.tensor([[2, 12, 3]]))


def test_record_gates_on_a_batch_of_none_has_no_mean_and_says_so():
    net = Highway(4, 2)
    with record_gates(net) as record:
        net(torch.randn(0, 4))
    with pytest.raises(ValueError, match=r"gates \['gates.0', 'gates.1'\] saw no values.*at least one example"):
        record.mean_per_gate()
    with record_gates(net) as record:  # an empty batch among others is nothing
        net(torch.randn(0, 4))
        net(torch.randn(3, 4))
    assert record.mean_per_gate().isfinite().all()


# (GatedResidual is deprecated; its checks stay until it goes)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("dim, error", [("8", TypeError), (8.0, TypeError), (True, TypeError), (0, ValueError)])
def test_gated_residual_refuses_a_size_that_is_not_a_positive_int(dim, error):
    came = type(dim).__name__ if error is TypeError else ""
    with pytest.raises(error, match=f"dim must be (an int|positive), got {came}"):
        GatedResidual(nn.Linear(8, 8), dim)


def test_language_models_check_their_ids_and_state():
    lm = LSTMLanguageModel(9, 4)
    with pytest.raises(ValueError, match=r"LSTMLanguageModel expects tokens in \[0, 9\).*got 9"):
        lm(torch.tensor([[1], [9]]))
    with pytest.raises(TypeError, match="LSTMLanguageModel expects tokens to be an integer tensor"):
        lm(torch.ones(2, 1))
    with pytest.raises(ValueError, match=r"expects state's h_0 of shape \(num_layers, B, hidden_size\) = \(1, 1, 4\)"):
        lm(torch.tensor([[1], [2]]), (torch.zeros(1, 2, 4), torch.zeros(1, 2, 4)))


# -- the helpers -----------------------------------------------------------------------------------


@pytest.mark.parametrize("value, error, message", [
    (True, TypeError, "n must be an int, got bool True"),
    ("8", TypeError, "n must be an int, got str '8'"),
    (2.0, TypeError, "n must be an int, got float 2.0"),
    (torch.tensor(2), TypeError, "n must be an int, got a tensor"),
    (0, ValueError, "n must be positive, got 0"),
    (2**63, ValueError, "n must fit in 64 bits"),
])
def test_check_size_refuses_what_is_not_a_size(value, error, message):
    with pytest.raises(error, match=message):
        _checks.check_size("n", value)


def test_check_size_takes_any_integer_as_an_int():
    assert _checks.check_size("n", np.int64(3)) == 3 and type(_checks.check_size("n", np.int64(3))) is int
    assert _checks.check_size("n", 0, minimum=0) == 0
    assert _checks.check_int("i", 2, minimum=0, below=3) == 2
    with pytest.raises(ValueError, match=r"i must be in \[0, 3\), got 3"):
        _checks.check_int("i", 3, minimum=0, below=3)


@pytest.mark.parametrize("value, error", [(math.nan, ValueError), (1.0, ValueError), (-0.1, ValueError),
                                          ("0.5", TypeError), (False, TypeError), (None, TypeError)])
def test_check_probability(value, error):
    with pytest.raises(error, match="p must be"):
        _checks.check_probability("p", value)
    assert _checks.check_probability("p", 0) == 0 and _checks.check_probability("p", 0.5) == 0.5


def test_check_choice_flag_factory_and_path():
    assert _checks.check_choice("kind", "a", ("a", "b")) == "a"
    with pytest.raises(ValueError, match="kind must be one of 'a', 'b', got 'c'"):
        _checks.check_choice("kind", "c", ("a", "b"))
    with pytest.raises(ValueError, match="kind must be one of"):
        _checks.check_choice("kind", ["a"], ("a", "b"))
    with pytest.raises(TypeError, match="fused must be a bool, got str 'no'"):
        _checks.check_flag("fused", "no")
    with pytest.raises(ValueError, match="device must name a device torch knows, got 'gpu'"):
        _checks.check_factory("gpu", None)
    with pytest.raises(TypeError, match="dtype must be a floating-point torch.dtype, got dtype torch.int64"):
        _checks.check_factory(None, torch.long)
    with pytest.raises(TypeError, match="path must be a path"):
        _checks.check_path("path", 3)
    with pytest.raises(ValueError, match="path must be a path, got an empty string"):
        _checks.check_path("path", "")


def test_check_input_and_state_leave_autocast_its_dtypes():
    weight = torch.zeros(2, 3)
    with pytest.raises(TypeError, match="L expects x of dtype torch.float32, the parameters' dtype, got torch.bfloat"):
        _checks.check_input("L", "x", torch.zeros(2, 3, dtype=torch.bfloat16), weight)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _checks.check_input("L", "x", torch.zeros(2, 3, dtype=torch.bfloat16), weight)
        _checks.check_state("L", "state", torch.zeros(2, 3), (2, 3), torch.zeros(1, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="L expects x to be a floating-point tensor, got dtype torch.int64"):
        _checks.check_input("L", "x", torch.zeros(2, 3, dtype=torch.long), weight)


@pytest.mark.parametrize("make, call", [
    (lambda: Highway(3), lambda m, x: m(x[0])),
    (lambda: HighwayConv2d(3, 3), lambda m, x: m(x[None])),
    (lambda: RHN(3, 4), lambda m, x: m(x)),
    (lambda: RHNCell(3, 4), lambda m, x: m(x[0])),
    (lambda: HighwayLSTM(3, 4), lambda m, x: m(x)),
    (lambda: HighwayGate(3), lambda m, x: m(x, x)),
], ids=["Highway", "HighwayConv2d", "RHN", "RHNCell", "HighwayLSTM", "HighwayGate"])
def test_a_float64_input_under_autocast_is_refused_by_name(make, call):
    # (autocast casts float32, not float64: float64 data, NumPy's default, under autocast passed the check,
    # and the product failed inside torch, "mat1 and mat2 must have the same dtype")
    model, x = make(), torch.randn(4, 2, 3, dtype=torch.float64)
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(
            TypeError, match=r"expects (x|input|branch) of dtype torch.float32, the parameters' dtype, got "
                             r"torch.float64 \(.*autocast, which casts float32 but not float64\)"):
        call(model, x)


def test_a_float64_state_under_autocast_is_refused_by_name():
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(
            TypeError, match="RHN expects state of the input's dtype torch.float32, got torch.float64"):
        RHN(3, 5)(torch.randn(4, 2, 3), torch.zeros(1, 2, 5, dtype=torch.float64))


def test_check_lengths_takes_a_list_and_reads_no_values_while_traced():
    assert _checks.check_lengths("L", [3, 1], batch=2, steps=3, shortest=1).tolist() == [3, 1]
    with pytest.raises(TypeError, match="lengths\\[1\\] must be an int, got float 1.0"):
        _checks.check_lengths("L", [3, 1.0], batch=2, steps=3, shortest=1)
    with pytest.raises(ValueError, match=r"L expects lengths to give one length in \[1, 3\]"):
        _checks.check_lengths("L", torch.tensor([3, 0]), batch=2, steps=3, shortest=1)
    with pytest.raises(ValueError, match=r"L expects ids in \[0, 5\) \(its vocabulary's size\), got -1"):
        _checks.check_ids("L", "ids", torch.tensor([0, -1]), 5)
    with mock.patch.object(torch.compiler, "is_compiling", return_value=True):  # (values are data while traced)
        assert _checks.check_ids("L", "ids", torch.tensor([7]), 5).tolist() == [7]
