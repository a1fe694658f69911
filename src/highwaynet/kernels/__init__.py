"""Fast paths. Each names the plain-PyTorch reference it must match, and is tested against it.

- :mod:`.gating`: the highway gate's element-wise work fused into one pass forward and one backward
  (Triton on CUDA, :mod:`.triton_gating`; the PyTorch reference elsewhere);
- :func:`highway_layer`: a dense highway layer around those kernels, with a hand-written backward;
- :func:`rhn_recurrence`: an RHN layer's recurrence with a hand-written backward and batched
  weight gradients;
- :mod:`.rhn_step`: one RHN micro-step as one Triton kernel each way, the recurrent product with
  the gate in its epilogue (what the recurrence runs on CUDA when its products use tensor cores);
- :mod:`.rhn_eager` and :mod:`.rhn_cpu`: the recurrence on the CPU, in PyTorch operations laid out
  to be few, and with each micro-step's gating one pass of C++ (built on first use);
- :mod:`.persistent` (the rules) and :mod:`.triton_persistent` (the kernels): a whole window of the
  RHN (forward and backward) or of an LSTM with projection and clipping (ELMo's biLM layer) in one
  launch each way, the time loop inside the kernel;
- :func:`lstmp_recurrence` (:mod:`.lstmp`): that LSTM's loop over time, on the persistent kernel,
  a C++ loop on the CPU (:mod:`.lstmp_cpu`) or its PyTorch reference;
- :mod:`.dispatch`: each layer's choice of path as a typed value with its reason, and
  :func:`explain`, which reports them for a model and an input.

Triton is imported only where a kernel may run (a CUDA tensor, or ``TRITON_INTERPRET=1``).
"""

from .dense_highway import highway_layer
from .dispatch import explain
from .gating import gate_backward, gate_forward
from .lstmp import lstmp_recurrence
from .rhn_recurrence import rhn_recurrence

__all__ = ["explain", "gate_backward", "gate_forward", "highway_layer", "lstmp_recurrence", "rhn_recurrence"]
