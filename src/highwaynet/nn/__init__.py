"""Highway layers in ``torch.nn`` style, one family a file."""

from .char import CharCNNHighway, CharVocab
from .conv import HighwayConv1d, HighwayConv2d
from .gate import BranchGate, Gate, TransformGate
from .highway import Highway
from .lstm import HighwayLSTM, HighwayLSTMBlock
from .residual import RESIDUAL_KINDS, GatedResidual, GatedResidualNetwork
from .resize import Projection, ZeroPad, make_resize
from .rhn import RHN, RHNCell

__all__ = [
    "RESIDUAL_KINDS",
    "BranchGate",
    "CharCNNHighway",
    "CharVocab",
    "Gate",
    "GatedResidual",
    "GatedResidualNetwork",
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
    "make_resize",
]
