"""Every recipe's settings, in one place: each default, its help and its check live in its field.

These dataclasses are what the recipes run (``highwaynet.recipes.mlp.run(MLPConfig(...))``), what a
run folder stores (``config.json``) and what the command line is made from (:mod:`highwaynet.cli`:
one option per field, with the field's default and help). They import no PyTorch, so that
``highwaynet --help`` answers at once.
"""

from ._fields import check_settings, setting
from .images import ACTIVATIONS, IMAGE_DATA, CNNConfig, DepthConfig, MLPConfig
from .sentences import ENCODERS, SENTENCE_TASKS, SentenceConfig, SweepConfig
from .text import CORPORA, CharLMConfig, LMConfig, RHNDepthConfig, TransformerDepthConfig
from .train import TrainConfig

__all__ = ["ACTIVATIONS", "CORPORA", "CNNConfig", "CharLMConfig", "DepthConfig", "ENCODERS", "IMAGE_DATA",
           "LMConfig", "MLPConfig", "RHNDepthConfig", "SENTENCE_TASKS", "SentenceConfig", "SweepConfig", "TrainConfig",
           "TransformerDepthConfig", "check_settings", "setting"]
