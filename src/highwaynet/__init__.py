"""highwaynet: Highway Networks for PyTorch.

Layers (:mod:`highwaynet.nn`), the gate maths (:mod:`highwaynet.functional`), gate analysis
(:mod:`highwaynet.analysis`), models, data loaders, a Trainer and the papers' experiments.
"""

__version__ = "0.1.0"

from . import analysis, functional, nn  # noqa: E402
from .analysis import gate_modules, lesion, record_gates  # noqa: E402
from .functional import highway_combine  # noqa: E402
from .nn import (  # noqa: E402
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
)

__all__ = [
    "Highway",
    "HighwayConv1d",
    "HighwayConv2d",
    "HighwayLSTM",
    "HighwayLSTMBlock",
    "Projection",
    "RHN",
    "RHNCell",
    "TransformGate",
    "ZeroPad",
    "analysis",
    "functional",
    "gate_modules",
    "highway_combine",
    "lesion",
    "nn",
    "record_gates",
]
