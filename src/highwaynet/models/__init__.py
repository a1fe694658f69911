"""Whole networks built from the layers, as the recipes use them."""

from .cnn import HighwayCNN
from .lm import CharAwareLanguageModel, LSTMLanguageModel, RHNLanguageModel
from .mlp import HighwayMLP, PlainMLP
from .sentence import SentenceClassifier
from .transformer import CausalTransformer

__all__ = ["CausalTransformer", "CharAwareLanguageModel", "HighwayCNN", "HighwayMLP", "LSTMLanguageModel", "PlainMLP",
           "RHNLanguageModel", "SentenceClassifier"]
