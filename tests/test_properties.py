"""Properties of the layers over random shapes, layouts, lengths and dtypes (Hypothesis): every fast
path gives its reference's values, padding never changes a shorter sequence, a lesioned layer is
the identity, and outputs have the documented shapes.

Derandomized (the same examples every run, so that CI is repeatable); ``HYPOTHESIS_PROFILE=explore``
draws new ones."""

import os

import pytest
import torch

from highwaynet.analysis import lesion
from highwaynet.kernels import explain
from highwaynet.nn import RHN, Highway, HighwayConv1d, HighwayConv2d, HighwayLSTM

hypothesis = pytest.importorskip("hypothesis", reason="the dev extra installs Hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True, print_blob=True)
settings.register_profile("explore", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float64, torch.float32, torch.bfloat16]
# how close a dtype's path comes to the float64 reference (relative to the values' size)
TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4, torch.bfloat16: 6e-2}


def _close(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> None:
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(a.double(), b.double(), rtol=tol, atol=tol * max(1.0, b.abs().max().item()))


@st.composite
def sequences(draw, min_length: int):
    """``(steps, batch, lengths)``: a padded batch, the longest sequence filling it."""
    steps, batch = draw(st.integers(1, 6)), draw(st.integers(1, 4))
    lengths = [draw(st.integers(min_length, steps)) for _ in range(batch)]
    lengths[draw(st.integers(0, batch - 1))] = steps
    return steps, batch, torch.tensor(lengths)


@given(dim=st.integers(1, 12), layers=st.integers(1, 3), lead=st.lists(st.integers(1, 4), max_size=3),
       activation=st.sampled_from(["relu", "tanh", "sigmoid", "identity", "gelu"]),
       carry=st.sampled_from(["coupled", "independent"]), dtype=st.sampled_from(DTYPES),
       device=st.sampled_from(DEVICES), seed=st.integers(0, 2**16))
def test_highway_matches_its_float64_maths_keeps_the_shape_and_a_lesion_is_the_identity(
        dim, layers, lead, activation, carry, dtype, device, seed):
    torch.manual_seed(seed)
    net = Highway(dim, layers, activation=activation, carry=carry, device=device, dtype=dtype)
    x = torch.randn(*lead, dim, device=device, dtype=dtype)
    y = net(x)
    assert y.shape == x.shape and y.dtype == dtype
    expected = x.double()
    f = {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "identity": lambda v: v,
         "gelu": torch.nn.functional.gelu}[activation]
    for proj in net.layers:  # y = T f(z_H) + C x, written out in float64
        z = expected @ proj.weight.double().t() + proj.bias.double()
        h, t = f(z[..., :dim]), torch.sigmoid(z[..., dim:2 * dim])
        c = 1 - t if carry == "coupled" else torch.sigmoid(z[..., 2 * dim:])
        expected = t * h + c * expected
    _close(y, expected, dtype)
    with lesion(net, range(layers)):
        assert torch.equal(net(x), x)


@given(channels=st.integers(1, 5), kernel=st.integers(1, 4), spatial=st.sampled_from([1, 2]),
       size=st.integers(1, 7), batched=st.booleans(), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_convolutional_highway_keeps_the_shape_and_a_lesion_is_the_identity(channels, kernel, spatial, size,
                                                                            batched, dtype, seed):
    torch.manual_seed(seed)
    layer = (HighwayConv1d if spatial == 1 else HighwayConv2d)(channels, kernel, dtype=dtype)
    x = torch.randn(*((2,) if batched else ()), channels, *(size,) * spatial, dtype=dtype)
    y = layer(x)
    assert y.shape == x.shape
    with lesion(layer, 0):
        assert torch.equal(layer(x), x)


@given(shape=sequences(min_length=0), input_size=st.integers(1, 5), hidden=st.integers(1, 7),
       depth=st.integers(1, 3), layers=st.integers(1, 2), bidirectional=st.booleans(), batch_first=st.booleans(),
       padded=st.booleans(), dtype=st.sampled_from(DTYPES), device=st.sampled_from(DEVICES),
       seed=st.integers(0, 2**16))
def test_rhn_fast_path_matches_the_loop_and_padding_never_changes_a_shorter_sequence(
        shape, input_size, hidden, depth, layers, bidirectional, batch_first, padded, dtype, device, seed):
    steps, batch, lengths = shape
    torch.manual_seed(seed)
    fused = RHN(input_size, hidden, layers, depth=depth, bidirectional=bidirectional, batch_first=batch_first,
                device=device, dtype=dtype)
    loop = RHN(input_size, hidden, layers, depth=depth, bidirectional=bidirectional, batch_first=batch_first,
               fused=False, device=device, dtype=torch.float64)
    loop.load_state_dict({k: v.double() for k, v in fused.state_dict().items()})
    x = torch.randn(batch, steps, input_size) if batch_first else torch.randn(steps, batch, input_size)
    x = x.to(device, dtype)
    kwargs = {"lengths": lengths} if padded else {}
    out, state = fused(x, **kwargs)
    directions = 2 if bidirectional else 1
    assert out.shape == ((batch, steps) if batch_first else (steps, batch)) + (directions * hidden,)
    assert state.shape == (directions * layers, batch, hidden)
    assert {d.path for d in explain(fused, x, **kwargs)} != {"loop"}  # a fast path ran
    ref_out, ref_state = loop(x.double(), **kwargs)
    _close(out, ref_out, dtype)
    _close(state, ref_state, dtype)
    if padded:  # more padding, of any value, changes nothing of the sequences
        time = 1 if batch_first else 0
        junk = torch.full_like(x.narrow(time, 0, 1), float("nan")).expand(*[3 if i == time else -1
                                                                             for i in range(3)])
        longer_out, longer_state = fused(torch.cat([x, junk], dim=time), lengths=lengths)
        _close(longer_out.narrow(time, 0, steps), out, dtype)
        _close(longer_state, state, dtype)


@given(shape=sequences(min_length=1), input_size=st.integers(1, 5), hidden=st.integers(1, 4),
       layers=st.integers(1, 3), bidirectional=st.booleans(), batch_first=st.booleans(),
       resize=st.sampled_from(["projection", "zeropad"]), seed=st.integers(0, 2**16))
def test_highway_lstm_padding_never_changes_a_shorter_sequence_and_lesioned_blocks_carry(
        shape, input_size, hidden, layers, bidirectional, batch_first, resize, seed):
    steps, batch, lengths = shape
    width = hidden * (2 if bidirectional else 1)
    if resize == "zeropad" and width < input_size:
        resize = "projection"  # (zero padding only widens)
    torch.manual_seed(seed)
    stack = HighwayLSTM(input_size, hidden, layers, batch_first=batch_first, bidirectional=bidirectional,
                        resize=resize).double()
    time = 1 if batch_first else 0
    x = torch.randn(batch, steps, input_size) if batch_first else torch.randn(steps, batch, input_size)
    x = x.double()
    out, (h, c) = stack(x, lengths=lengths)
    assert out.shape == x.shape[:2] + (width,) and h.shape == c.shape == (layers * width // hidden, batch, hidden)
    junk = torch.full_like(x.narrow(time, 0, 1), 1e6).expand(*[2 if i == time else -1 for i in range(3)])
    longer, (h2, c2) = stack(torch.cat([x, junk], dim=time), lengths=lengths)
    torch.testing.assert_close(longer.narrow(time, 0, steps), out)
    torch.testing.assert_close((h2, c2), (h, c))
    if width == input_size:
        with lesion(stack, range(layers)):  # every block carries its input: the stack is the identity
            carried, _ = stack(x, lengths=lengths)
        valid = (torch.arange(steps)[:, None] < lengths[None, :]).T if batch_first else \
            torch.arange(steps)[:, None] < lengths[None, :]
        torch.testing.assert_close(carried, x * valid.unsqueeze(-1))
