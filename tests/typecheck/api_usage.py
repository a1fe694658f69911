"""Code as a user with a strict type checker writes it against highwaynet's public API.

Not a test module: ``tests/test_typing.py`` runs ``mypy --strict`` on this file, so that the
package's hints (``py.typed``) say what the code does: every call here is one the API allows, and
every annotation here is what it returns. Module calls go through ``forward`` where the result's
type is checked (``nn.Module.__call__`` returns ``Any``).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

from highwaynet import (
    RHN,
    Highway,
    HighwayConv1d,
    HighwayConv2d,
    HighwayLSTM,
    HighwayLSTMBlock,
    Projection,
    RHNCell,
    TransformGate,
    ZeroPad,
    gate_modules,
    highway_combine,
    lesion,
    record_gates,
)
from highwaynet.analysis import GateRecord
from highwaynet.data import load_corpus, load_digits, load_mnist5k, load_sentences
from highwaynet.models import HighwayMLP, PlainMLP, SentenceClassifier
from highwaynet.training import ClassificationTask, TrainConfig, Trainer


def layers(x: Tensor) -> Tensor:
    y: Tensor = highway_combine(torch.rand(4, 8), torch.randn(4, 8), torch.randn(4, 8))
    net = Highway(8, num_layers=3, activation=torch.tanh, gate_bias=-1.0, carry="independent",
                  device="cpu", dtype=torch.float32)
    y = net.forward(y)
    y = Projection(8, 16).forward(y) + ZeroPad(8, 16).forward(y)
    image: Tensor = HighwayConv2d(3, kernel_size=(3, 4)).forward(torch.randn(1, 3, 8, 8))
    signal: Tensor = HighwayConv1d(3, kernel_size=5, dilation=2).forward(torch.randn(1, 3, 8))
    gate = TransformGate(carry="coupled")
    return y.sum() + image.sum() + signal.sum() + sum(p.sum() for p in gate.parameters())


def recurrent(x: Tensor, lengths: Tensor) -> Tensor:
    rhn = RHN(8, 16, depth=3, num_layers=2, batch_first=True, dropout=0.1, bidirectional=True)
    out, state = rhn.forward(x, lengths=lengths)
    out, state = rhn.forward(x, state)
    out, state = rhn.forward(x, hx=state)  # (nn.LSTM's name for the state)
    packed: PackedSequence = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    packed_out, _ = rhn.forward(packed)
    again: PackedSequence = packed_out
    s: Tensor = RHNCell(8, 16, depth=2).forward(x[:, 0], None)
    stack = HighwayLSTM(8, 4, num_layers=2, batch_first=True, resize="zeropad")
    lstm_out, (h, c) = stack.forward(x, lengths=lengths)
    lstm_out, (h, c) = stack.forward(x, hx=(h, c), lengths=lengths)
    stack.flatten_parameters()
    rhn.flatten_parameters()
    block = HighwayLSTMBlock(8, 4, bidirectional=False)
    return out.sum() + state.sum() + again.data.sum() + s.sum() + lstm_out.sum() + h.sum() + c.sum() + \
        sum(p.sum() for p in block.parameters())


def analysis(net: Highway) -> Tensor:
    names: list[str] = [name for name, _ in gate_modules(net)]
    record: GateRecord
    with record_gates(net, device=None) as record:
        net.forward(torch.randn(2, 8))
    means: Tensor = record.mean_per_gate()
    with lesion(net, 0) as lesioned, lesion(net, [1, names[-1]]):
        assert lesioned
    return means + record.values(0).mean()


def training(folder: Path) -> dict[str, float]:
    data = load_mnist5k()
    load_digits(folder)
    model = HighwayMLP(data.in_features, data.num_classes, depth=5, width=16, gate_bias=-2.0)
    PlainMLP(data.in_features, data.num_classes, depth=5, width=16)
    trainer = Trainer(model, ClassificationTask(data, batch_size=100), TrainConfig(epochs=1, lr=0.1), folder / "run")
    history: list[dict[str, float]] = trainer.fit(resume=True, max_time=60.0)
    sentences = load_sentences("trec", folder, fold=0)
    SentenceClassifier(len(sentences.vocab), sentences.num_classes, encoder="hbilstm", num_layers=2)
    corpus = load_corpus("tinyshakespeare", "char", folder, download=True)
    assert corpus.vocab and history
    return trainer.evaluate("test")
