"""The language-modelling recipes' settings: one model (:class:`LMConfig`) and the RHN depth study
(:class:`RHNDepthConfig`)."""

from __future__ import annotations

from dataclasses import dataclass

from ._fields import check_settings, setting
from .train import TrainConfig

__all__ = ["CORPORA", "LMConfig", "RHNDepthConfig"]

#: The corpora known by name (any folder with train.txt, valid.txt and test.txt works too).
CORPORA = ("tinyshakespeare", "austen")


@dataclass
class LMConfig:
    """A language model: embedding, an RHN (or an LSTM), a decoder tied to the embedding.
    ``hidden`` is the state size of the RHN or the LSTM."""

    corpus: str = setting("tinyshakespeare", help="tinyshakespeare, austen, or a folder with train.txt, valid.txt "
                                                  "and test.txt")
    level: str = setting("char", help="model characters or words", choices=("char", "word"))
    model: str = setting("rhn", help="the recurrent layer", choices=("rhn", "lstm"))
    depth: int = setting(4, help="the RHN's recurrence depth", minimum=1)
    hidden: int = setting(256, help="state size", minimum=1)
    layers: int = setting(1, help="stacked recurrent layers", minimum=1)
    tie_weights: bool = setting(True, help="tie the embedding and decoder weights")
    input_dropout: float = setting(0.1, help="variational dropout on the embeddings", minimum=0.0, below=1.0)
    state_dropout: float = setting(0.1, help="variational dropout on the RHN's states", minimum=0.0, below=1.0)
    output_dropout: float = setting(0.1, help="variational dropout on the recurrent layer's outputs", minimum=0.0,
                                    below=1.0)
    gate_bias: float = setting(-2.0, help="the RHN's initial transform-gate bias")
    max_vocab: int | None = setting(None, help="most frequent tokens kept (none: every character, or 10000 words)",
                                    minimum=2)
    batch_size: int = setting(32, help="training batch size (parallel streams)", minimum=1)
    bptt: int = setting(50, help="truncated backpropagation-through-time window", minimum=1)
    steps_per_epoch: int | None = setting(200, help="windows per epoch, from a random start (0: the whole training "
                                                    "text)", minimum=0)
    eval_batch_size: int = setting(64, help="validation and test batch size", minimum=1)
    train: TrainConfig = setting(help="how to train", factory=lambda: TrainConfig(
        epochs=10, optimizer="adam", lr=2e-3, grad_clip=1.0, schedule="cosine", monitor="val_loss"))

    def __post_init__(self) -> None:
        check_settings(self)
        if self.steps_per_epoch == 0:  # (the command line's way to say the whole text)
            self.steps_per_epoch = None


@dataclass
class RHNDepthConfig:
    """RHN language models at several recurrence depths with the parameter budget fixed (Zilly et
    al., 2017, Fig. 4), then an LSTM of the same budget trained for as long as the best RHN took.
    ``corpora`` entries are ``name:level``; ``base`` sets everything but the corpus, the model, its
    depth and its size."""

    corpora: list[str] = setting(help="name:level pairs", factory=lambda: ["tinyshakespeare:char"])
    depths: list[int] = setting(help="recurrence depths", factory=lambda: [1, 2, 4, 6, 8, 10], minimum=1)
    budget: int = setting(200_000, help="parameters per model", minimum=1)
    lstm: bool = setting(True, help="train the LSTM baseline of the same budget and time")
    #: Replay each training step as a CUDA graph (``None``: on a GPU). The RHN's many small
    #: micro-steps are launch-bound (``benchmarks/rhn.py``), and an equal-time comparison should not
    #: be decided by launch overhead.
    cuda_graph: bool | None = setting(None, help="replay training steps as CUDA graphs (default: on a GPU)")
    base: LMConfig = setting(help="every model's settings", factory=lambda: LMConfig(
        batch_size=128, bptt=50, steps_per_epoch=50, input_dropout=0.0, state_dropout=0.0, output_dropout=0.0,
        train=TrainConfig(epochs=8, optimizer="adam", lr=3e-3, grad_clip=1.0, schedule="cosine")))

    def __post_init__(self) -> None:
        check_settings(self)
        for entry in self.corpora:
            if entry.count(":") != 1 or entry.split(":")[1] not in ("char", "word"):
                raise ValueError(f"corpora entries are 'name:level' with level char or word, got {entry!r}")
