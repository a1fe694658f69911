"""highwaynet: Highway Networks for PyTorch.

Layers (:mod:`highwaynet.nn`), the gate maths (:mod:`highwaynet.functional`), gate analysis
(:mod:`highwaynet.analysis`), models, data loaders, a Trainer and the papers' experiments.

The names below are imported on first use (PEP 562), so that ``import highwaynet`` alone, and the
``highwaynet`` command's help, cost no PyTorch import; ``from highwaynet import RHN`` imports the
layers as usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.4.0"

# name -> the submodule that defines it (a submodule itself where the value is None)
_WHERE = {
    "Highway": "nn", "HighwayConv1d": "nn", "HighwayConv2d": "nn", "HighwayLSTM": "nn", "HighwayLSTMBlock": "nn",
    "Projection": "nn", "RHN": "nn", "RHNCell": "nn", "TransformGate": "nn", "ZeroPad": "nn",
    "CharCNNHighway": "nn", "CharVocab": "nn", "GatedResidual": "nn", "GatedResidualNetwork": "nn",
    "BranchGate": "nn", "Gate": "nn", "Residual": "nn", "Sum": "nn", "FixedGate": "nn", "ReZero": "nn",
    "LayerScale": "nn", "DeepNormSum": "nn", "HighwayGate": "nn", "GRUGate": "nn",
    "gate_modules": "analysis", "lesion": "analysis", "record_gates": "analysis",
    "highway_combine": "functional",
    "explain": "kernels",
    "analysis": None, "elmo": None, "functional": None, "kernels": None, "nn": None,
}

__all__ = [
    "RHN", "BranchGate", "CharCNNHighway", "CharVocab", "DeepNormSum", "FixedGate", "GRUGate", "Gate",
    "GatedResidual", "GatedResidualNetwork", "Highway", "HighwayConv1d", "HighwayConv2d", "HighwayGate",
    "HighwayLSTM", "HighwayLSTMBlock", "LayerScale", "Projection", "RHNCell", "ReZero", "Residual", "Sum",
    "TransformGate", "ZeroPad", "analysis", "elmo", "explain", "functional", "gate_modules", "highway_combine",
    "kernels", "lesion", "nn", "record_gates",
]  # (a list as written, which type checkers read: the names of _WHERE, as a test checks)

if TYPE_CHECKING:  # what type checkers and editors see; at run time __getattr__ imports on first use
    from . import analysis, elmo, functional, kernels, nn
    from .analysis import gate_modules, lesion, record_gates
    from .functional import highway_combine
    from .kernels import explain
    from .nn import (
        RHN,
        BranchGate,
        CharCNNHighway,
        CharVocab,
        DeepNormSum,
        FixedGate,
        Gate,
        GatedResidual,
        GatedResidualNetwork,
        GRUGate,
        Highway,
        HighwayConv1d,
        HighwayConv2d,
        HighwayGate,
        HighwayLSTM,
        HighwayLSTMBlock,
        LayerScale,
        Projection,
        Residual,
        ReZero,
        RHNCell,
        Sum,
        TransformGate,
        ZeroPad,
    )


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'highwaynet' has no attribute {name!r}")
    module = importlib.import_module(f".{_WHERE[name] or name}", __name__)
    value = module if _WHERE[name] is None else getattr(module, name)
    globals()[name] = value  # (once: later lookups find it without this function)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
