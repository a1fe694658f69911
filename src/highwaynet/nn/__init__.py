"""Highway layers in ``torch.nn`` style, one family a file."""

from .char import CharCNNHighway, CharVocab
from .conv import HighwayConv1d, HighwayConv2d
from .gate import BranchGate, Gate, TransformGate
from .highway import Highway
from .lstm import HighwayLSTM, HighwayLSTMBlock
from .residual import (
    RESIDUAL_KINDS,
    DeepNormSum,
    FixedGate,
    GatedResidual,
    GatedResidualNetwork,
    GRUGate,
    HighwayGate,
    LayerScale,
    Residual,
    ReZero,
    Sum,
    deepnorm_alpha,
    deepnorm_beta,
    layerscale_init,
)
from .resize import Projection, ZeroPad, make_resize
from .rhn import RHN, RHNCell

__all__ = [
    "RESIDUAL_KINDS",
    "BranchGate",
    "CharCNNHighway",
    "CharVocab",
    "DeepNormSum",
    "FixedGate",
    "GRUGate",
    "Gate",
    "GatedResidual",
    "GatedResidualNetwork",
    "Highway",
    "HighwayConv1d",
    "HighwayConv2d",
    "HighwayGate",
    "HighwayLSTM",
    "HighwayLSTMBlock",
    "LayerScale",
    "Projection",
    "RHN",
    "RHNCell",
    "ReZero",
    "Residual",
    "Sum",
    "TransformGate",
    "ZeroPad",
    "deepnorm_alpha",
    "deepnorm_beta",
    "layerscale_init",
    "make_resize",
]
