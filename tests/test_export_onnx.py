"""Every layer and every model the recipes build exports to ONNX (``torch.onnx.export(dynamo=True)``)
and runs in onnxruntime with eager's outputs, at the traced shape and at another batch size, and
another sequence length where the export keeps it dynamic: the dense and convolutional layers and
the CNN sentence encoders. The recurrent ones keep the traced length: the RHN exports its reference
loop (ONNX has no translation of its fused operator), and ``nn.LSTM``'s translation unrolls it too."""

import contextlib
import io
import warnings

import numpy as np
import pytest
import torch
from conftest import RESIDUAL_PARTS

from highwaynet._versions import release
from highwaynet.models import (
    CausalTransformer,
    CharAwareLanguageModel,
    HighwayCNN,
    HighwayMLP,
    LSTMLanguageModel,
    PlainMLP,
    RHNLanguageModel,
    SentenceClassifier,
)
from highwaynet.models.transformer import CONNECTIONS
from highwaynet.nn import (
    RHN,
    CharCNNHighway,
    CharVocab,
    GatedResidualNetwork,
    Highway,
    HighwayConv1d,
    HighwayConv2d,
    HighwayLSTM,
    Residual,
)

# The dynamo exporter of torch 2.5 to 2.9 fails on some of these graphs (0.3.0 failed 6 to 13 of them there);
# 2.10 is the oldest release on which every one was seen to export, and the docstrings name it.
pytestmark = pytest.mark.skipif(release(torch.__version__) < (2, 10), reason="ONNX export needs torch >= 2.10 "
                                "(torch.onnx.export(dynamo=True) of older releases fails on some of these graphs)")

ort = pytest.importorskip("onnxruntime", reason="the export extra: pip install -e '.[export]'")
pytest.importorskip("onnxscript", reason="the export extra: pip install -e '.[export]'")

BATCH = torch.export.Dim("batch", min=2, max=64)
STEPS = torch.export.Dim("steps", min=2, max=64)


def _outputs(result) -> list[np.ndarray]:
    flat = []
    for item in result if isinstance(result, (tuple, list)) else (result,):
        flat += _outputs(item) if isinstance(item, (tuple, list)) else [item.detach().numpy()]
    return flat


def _export(model, inputs: dict, dynamic: dict):
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, (), kwargs=inputs, dynamo=True, dynamic_shapes=dynamic)
    return ort.InferenceSession(program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])


def _check(model, make, dynamic, sizes):
    """Export ``model`` on ``make(*sizes[0])`` and compare onnxruntime with eager on each size."""
    torch.manual_seed(0)
    model.eval()
    session = _export(model, make(*sizes[0]), dynamic)
    for size in sizes:
        inputs = make(*size)
        got = session.run(None, {name: value.numpy() for name, value in inputs.items()})
        with torch.no_grad():
            want = _outputs(model(**inputs))
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def _tokens(vocab):
    return lambda b, t: {"tokens": torch.randint(1, vocab, (t, b))}


CASES = {
    # name: (model, inputs of (batch, steps), dynamic shapes, sizes checked)
    "Highway": (lambda: Highway(8, 2), lambda b, t: {"x": torch.randn(b, 8)}, {"x": {0: BATCH}}, [(3, 0), (7, 0)]),
    "HighwayConv1d": (lambda: HighwayConv1d(3, 4), lambda b, t: {"x": torch.randn(b, 3, t)},
                      {"x": {0: BATCH, 2: STEPS}}, [(2, 9), (5, 4)]),
    "HighwayConv2d": (lambda: HighwayConv2d(3, 3), lambda b, t: {"x": torch.randn(b, 3, 6, 6)},
                      {"x": {0: BATCH}}, [(2, 0), (4, 0)]),
    # The RHN exports its reference loop (ONNX has no translation of the fused operator): the traced length.
    "RHN": (lambda: RHN(8, 16, 2, depth=2, bidirectional=True), lambda b, t: {"input": torch.randn(5, b, 8)},
            {"input": {1: BATCH}}, [(3, 5), (6, 5)]),
    "RHN with lengths": (lambda: RHN(8, 16, depth=3, batch_first=True),
                         lambda b, t: {"input": torch.randn(b, 5, 8), "lengths": torch.arange(b) % 5 + 1},
                         {"input": {0: BATCH}, "lengths": {0: BATCH}}, [(3, 5), (6, 5)]),
    "HighwayLSTM": (lambda: HighwayLSTM(8, 4, 2), lambda b, t: {"input": torch.randn(t, b, 8)},
                    {"input": {1: BATCH}}, [(3, 5), (6, 5)]),
    "HighwayLSTM with lengths": (
        lambda: HighwayLSTM(8, 4, 2, batch_first=True),
        lambda b, t: {"input": torch.randn(b, t, 8), "lengths": torch.arange(b) % t + 1},
        {"input": {0: BATCH}, "lengths": {0: BATCH}}, [(3, 5), (6, 5)]),
    "HighwayMLP": (lambda: HighwayMLP(64, 10, 5, 16), lambda b, t: {"x": torch.randn(b, 1, 8, 8)},
                   {"x": {0: BATCH}}, [(3, 0), (9, 0)]),
    "PlainMLP": (lambda: PlainMLP(64, 10, 5, 16), lambda b, t: {"x": torch.randn(b, 1, 8, 8)},
                 {"x": {0: BATCH}}, [(3, 0), (9, 0)]),
    "HighwayCNN": (lambda: HighwayCNN(1, 10, channels=(8, 16), layers_per_stage=1),
                   lambda b, t: {"x": torch.randn(b, 1, 28, 28)}, {"x": {0: BATCH}}, [(2, 0), (3, 0)]),
    "RHNLanguageModel": (lambda: RHNLanguageModel(20, 16, depth=2), _tokens(20), {"tokens": {1: BATCH}},
                         [(3, 6), (5, 6)]),
    "LSTMLanguageModel": (lambda: LSTMLanguageModel(20, 16, 2), _tokens(20), {"tokens": {1: BATCH}},
                          [(3, 6), (5, 6)]),
    "CharCNNHighway": (lambda: CharCNNHighway.preset("compact", 12),
                       lambda b, t: {"chars": torch.randint(0, 12, (b, t, 9))}, {"chars": {0: BATCH, 1: STEPS}},
                       [(3, 4), (6, 7)]),
    "CharAwareLanguageModel": (
        lambda: CharAwareLanguageModel(CharVocab("abcdefg").encode(["<pad>", "<unk>", "a", "bad", "cafe", "deg"]),
                                       len(CharVocab("abcdefg")), 16, 1),
        _tokens(6), {"tokens": {1: BATCH}}, [(3, 6), (5, 6)]),
    **{f"Residual {name}": (
        lambda make=make: Residual(torch.nn.Sequential(torch.nn.LayerNorm(8), torch.nn.Linear(8, 8)), make()),
        lambda b, t: {"x": torch.randn(b, t, 8)}, {"x": {0: BATCH, 1: STEPS}}, [(3, 5), (6, 9)])
       for name, make in RESIDUAL_PARTS.items()},
    "GatedResidualNetwork": (lambda: GatedResidualNetwork(6, 12, 4, context_size=3),
                             lambda b, t: {"a": torch.randn(b, 6), "context": torch.randn(b, 3)},
                             {"a": {0: BATCH}, "context": {0: BATCH}}, [(3, 0), (7, 0)]),
    **{f"CausalTransformer {residual}": (
        lambda residual=residual: CausalTransformer(20, 16, 2, heads=2, context=8, residual=residual,
                                                    norm="post" if residual == "deepnorm" else "pre"),
        _tokens(20), {"tokens": {1: BATCH}}, [(3, 6), (5, 6)])
       for residual in CONNECTIONS},
    **{f"SentenceClassifier {encoder}": (
        lambda encoder=encoder: SentenceClassifier(30, 3, encoder=encoder, embed_dim=8, hidden_size=4, num_layers=2,
                                                   feature_maps=4),
        lambda b, t: {"tokens": torch.randint(1, 30, (b, t)), "lengths": torch.arange(b) % (t - 4) + 5},
        {"tokens": {0: BATCH, **({1: STEPS} if encoder.startswith("cnn") else {})}, "lengths": {0: BATCH}},
        [(3, 7), (6, 11 if encoder.startswith("cnn") else 7)])
       for encoder in ("hbilstm", "bilstm", "cnn", "cnn-highway")},
}


@pytest.mark.parametrize("name", list(CASES))
def test_exports_to_onnx_and_runs_in_onnxruntime_as_eager(name):
    make_model, make_inputs, dynamic, sizes = CASES[name]
    _check(make_model(), make_inputs, dynamic, sizes)
