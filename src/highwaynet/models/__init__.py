"""Whole networks built from the layers, as the recipes use them."""

from .mlp import HighwayMLP, PlainMLP

__all__ = ["HighwayMLP", "PlainMLP"]
