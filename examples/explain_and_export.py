"""
Which path a layer runs, and exporting a model to ONNX
======================================================

``Highway`` and ``RHN`` choose among fast paths at each call: fused Triton kernels on a GPU, a C++
loop or few PyTorch operations on the CPU, or the plain reference loop where a fast path does not
apply. :func:`highwaynet.explain` runs a model once and says which path each layer took, and why,
so that a slow layer can be told from a fast one.

Then the same model goes to ONNX (``torch.onnx.export(..., dynamo=True)``) and runs in onnxruntime
with the same outputs. The RHN exports its reference loop, for the sequence length it was traced
with (ONNX has no translation of its fused operator); the batch stays dynamic.

.. code-block:: bash

    pip install ".[export]"       # in highwaynet's clone: onnx, onnxscript, onnxruntime
    python examples/explain_and_export.py
"""

import contextlib
import io
import warnings

import torch
from torch import nn

from highwaynet import RHN, Highway, explain, record_gates


class Tagger(nn.Module):
    """Per step of a sequence: an RHN over the inputs, then a highway stack, then 5 scores."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = RHN(16, 32, depth=3, batch_first=True)
        self.highway = Highway(32, 2)
        self.out = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        states, _ = self.rnn(x)
        return self.out(self.highway(states))


torch.manual_seed(0)
model = Tagger().eval()
x = torch.randn(4, 12, 16)  # 4 sequences of 12 steps

# %%
# Each layer's path for this input, and why:
for decision in explain(model, x):
    print(decision)

# %%
# Recording the gates needs every gate's values, which the fused paths do not produce: while
# recording, the layers take their reference paths, and say so.
with record_gates(model) as gates:
    for decision in explain(model, x):
        print(decision)
print(f"{len(gates.names)} gates recorded; mean transform gate of the first: {gates.values(0).mean():.3f}")

# %%
# Export to ONNX and run it in onnxruntime, at another batch size than the traced one:
try:
    import onnxruntime
except ImportError:
    print("onnxruntime is not installed: pip install onnx onnxscript onnxruntime (the export extra)")
else:
    batch = torch.export.Dim("batch", min=2, max=256)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, (x,), dynamo=True, dynamic_shapes=({0: batch},))
    session = onnxruntime.InferenceSession(program.model_proto.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    other = torch.randn(9, 12, 16)
    (scores,) = session.run(None, {session.get_inputs()[0].name: other.numpy()})
    with torch.no_grad():
        difference = (torch.from_numpy(scores) - model(other)).abs().max().item()
    print(f"onnxruntime, batch of 9: scores {tuple(scores.shape)}, largest difference from eager {difference:.1e}")
