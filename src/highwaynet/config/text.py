"""The language-modelling recipes' settings: one model (:class:`LMConfig`), the RHN depth study
(:class:`RHNDepthConfig`), the character-aware models (:class:`CharLMConfig`) and the Transformer depth
study (:class:`TransformerDepthConfig`)."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, replace

from ._fields import check_settings, setting
from .train import SEED_LIMIT, TrainConfig, check_monitor

__all__ = ["CORPORA", "NORMS", "RESIDUALS", "TRANSFORMER_VARIANTS", "CharLMConfig", "LMConfig", "RHNDepthConfig",
           "TransformerDepthConfig", "depth_gate_bias", "parse_variant"]

#: The corpora known by name (any folder with train.txt, valid.txt and test.txt works too).
CORPORA = ("tinyshakespeare", "austen")


#: The Transformer's residual connections (:data:`highwaynet.models.transformer.CONNECTIONS`) and LayerNorm
#: places (:data:`highwaynet.models.transformer.NORM_PLACEMENTS`), for the command line (which imports no PyTorch).
RESIDUALS = ("residual", "fixed", "rezero", "layerscale", "deepnorm", "highway", "gtrxl")
NORMS = ("pre", "post", "none")


@dataclass
class LMConfig:
    """A language model: embedding, an RHN, an LSTM or a causal Transformer, a decoder tied to the
    embedding. ``hidden`` is the state size of the RHN or the LSTM, or the Transformer's width;
    ``layers`` its stacked layers (the Transformer's blocks), and ``bptt`` its context. ``state_dropout``
    is the RHN's: for the other models it is 0, what they apply (and what their runs record)."""

    corpus: str = setting("tinyshakespeare", help="tinyshakespeare, austen, or a folder with train.txt, valid.txt "
                                                  "and test.txt")
    level: str = setting("char", help="model characters or words", choices=("char", "word"))
    model: str = setting("rhn", help="the sequence model", choices=("rhn", "lstm", "transformer"))
    depth: int = setting(4, help="the RHN's recurrence depth", minimum=1)
    hidden: int = setting(256, help="state size", minimum=1)
    layers: int = setting(1, help="stacked recurrent layers", minimum=1)
    tie_weights: bool = setting(True, help="tie the embedding and decoder weights (word inputs)")
    input: str = setting("words", help="how a word-level model reads each word: its own vector, or its characters "
                                       "through a CNN with highway layers (Kim et al., 2016)",
                         choices=("words", "chars"))
    char_encoder: str = setting("kim-small", help="the character encoder's preset (--input chars)",
                                choices=("kim-small", "kim-large", "elmo", "compact"))
    char_layers: int | None = setting(None, help="highway (or MLP) layers after the character convolutions "
                                                 "(default: the preset's)", minimum=0)
    char_mlp: bool = setting(False, help="plain MLP layers in the highway layers' place (the paper's comparison)")
    heads: int = setting(4, help="the Transformer's attention heads (hidden must be a multiple)", minimum=1)
    residual: str = setting("residual", help="the Transformer's residual connections: a plain sum, a fixed gate "
                                             "(no parameters), ReZero's scalar, LayerScale, DeepNorm's sum (with "
                                             "--norm post), a highway gate, GTrXL's gate", choices=RESIDUALS)
    norm: str = setting("pre", help="where the Transformer's LayerNorms go: inside each branch, after each "
                                    "connection, or none", choices=NORMS)
    final_norm: bool | None = setting(None, help="a LayerNorm before the Transformer's decoder (default: where its "
                                                 "blocks have LayerNorms)")
    mlp_hidden: int | None = setting(None, help="the Transformer's MLP hidden width (default: 4 x hidden)", minimum=1)
    input_dropout: float = setting(0.1, help="(variational) dropout on the embeddings", minimum=0.0, below=1.0)
    state_dropout: float = setting(0.1, help="variational dropout on the RHN's states (the LSTM and the Transformer "
                                             "have none: 0 is recorded for them)", minimum=0.0, below=1.0)
    output_dropout: float = setting(0.1, help="variational dropout on the recurrent layer's outputs; in the "
                                              "Transformer, dropout on its attention and its sublayers' outputs",
                                    minimum=0.0, below=1.0)
    gate_bias: float = setting(-2.0, help="the initial bias of the RHN's transform gates, and of the Transformer's "
                                          "fixed, highway and GTrXL gates")
    max_vocab: int | None = setting(None, help="most frequent tokens kept (none: every character, or 10000 words)",
                                    minimum=2)
    batch_size: int = setting(32, help="training batch size (parallel streams)", minimum=1)
    bptt: int = setting(50, help="truncated backpropagation-through-time window", minimum=1)
    steps_per_epoch: int | None = setting(200, help="windows per epoch, from a random start (0: the whole training "
                                                    "text)", minimum=0)
    eval_batch_size: int = setting(64, help="validation and test batch size", minimum=1)
    eval_windows: int | None = setting(None, help="windows each validation reads (the first ones; none: the whole "
                                                  "split); the test split is read whole", minimum=1)
    train: TrainConfig = setting(help="how to train", factory=lambda: TrainConfig(
        epochs=10, optimizer="adam", lr=2e-3, grad_clip=1.0, schedule="cosine", monitor="val_loss"))

    def __post_init__(self) -> None:
        check_settings(self)
        if self.steps_per_epoch == 0:  # (the command line's way to say the whole text)
            self.steps_per_epoch = None
        if self.input == "chars" and self.level != "word":
            raise ValueError("LMConfig.input 'chars' reads the characters of each word: it needs level 'word'")
        if self.model != "rhn":
            # The RHN's alone: the LSTM and the Transformer apply none, so none is what their run records (a
            # run folder that recorded the default goes on: it is read back through here, as 0 too).
            self.state_dropout = 0.0
        check_monitor(self.train.monitor, ("loss", "bpc" if self.level == "char" else "ppl"))
        if self.model == "transformer":
            if self.hidden % self.heads:
                raise ValueError(f"LMConfig.hidden {self.hidden} must be a multiple of heads {self.heads}")
            if self.input != "words":
                raise ValueError("LMConfig.input 'chars' feeds an RHN or an LSTM, not the Transformer")


@dataclass
class RHNDepthConfig:
    """RHN language models at several recurrence depths with the parameter budget fixed (Zilly et
    al., 2017, Fig. 4), each with every one of ``seeds``; the best depth on validation is then set
    against LSTMs of the same budget, one trained for as long as the best RHN took and one for as
    many steps, with the same seeds; a control trains the best depth and an LSTM again on the first
    LSTM's schedule, stopped after as many steps. ``corpora`` entries are ``name:level``; ``base``
    sets everything but the corpus, the model, its depth, its size and (in the depth study) its seed."""

    corpora: list[str] = setting(help="name:level pairs", factory=lambda: ["tinyshakespeare:char"])
    depths: list[int] = setting(help="recurrence depths", factory=lambda: [1, 2, 4, 6, 8, 10], minimum=1)
    budget: int = setting(200_000, help="parameters per model", minimum=1)
    lstm: bool = setting(True, help="train the LSTM baselines of the same budget: one for as long as the best RHN "
                                    "took, one for as many steps; and, on the first's slowly decaying schedule "
                                    "stopped after as many steps, the best RHN and an LSTM again")
    seeds: list[int] = setting(help="seeds of each model of the depth study", factory=lambda: [0, 1, 2], minimum=0,
                               below=SEED_LIMIT)
    #: Replay each training step as a CUDA graph (``None``: on a GPU). The RHN's many small
    #: micro-steps are launch-bound (``benchmarks/rhn.py``), and an equal-time comparison should not
    #: be decided by launch overhead.
    cuda_graph: bool | None = setting(None, help="replay training steps as CUDA graphs (default: on a GPU)")
    tune: int = setting(0, help="instead of the depth study, compare RHN and LSTM under equal tuning (Melis et al., "
                                "2018): this many random-search trials each over learning rate, dropout and shape "
                                "(the RHN's depth, the LSTM's layers) at the budget, the best on validation tested",
                        minimum=0, metavar="N")
    tune_seeds: int = setting(3, help="seeds each family's best trial is trained with (the trial itself the first)",
                              minimum=1)
    base: LMConfig = setting(help="every model's settings", factory=lambda: LMConfig(
        batch_size=128, bptt=50, steps_per_epoch=50, input_dropout=0.0, state_dropout=0.0, output_dropout=0.0,
        train=TrainConfig(epochs=8, optimizer="adam", lr=3e-3, grad_clip=1.0, schedule="cosine")))

    def __post_init__(self) -> None:
        check_settings(self)
        for entry in self.corpora:
            if entry.count(":") != 1 or entry.split(":")[1] not in ("char", "word"):
                raise ValueError(f"corpora entries are 'name:level' with level char or word, got {entry!r}")
        if not self.tune and self.base.train.seed != 0:
            raise ValueError(f"RHNDepthConfig.base.train.seed (--seed) {self.base.train.seed} seeds the tuning "
                             f"(--tune) alone: the depth study trains each model with each of its seeds (--seeds)")


@dataclass
class CharLMConfig:
    """Character-aware language models at word level (Kim et al., 2016) and their ablation: the
    character CNN with 0, 1, 2 highway layers, the same numbers of MLP layers in their place, and a
    word-level LSTM; every model at about ``budget`` parameters (its LSTM's size chosen to fit),
    each trained with ``seeds``. ``base`` sets the rest; ``full`` the paper's sizes, for a GPU."""

    corpus: str = setting("austen", help="austen, or a folder with train.txt, valid.txt and test.txt (PTB format)")
    highway: list[int] = setting(help="highway-layer counts of the character models", factory=lambda: [0, 1, 2],
                                 minimum=0)
    mlp: list[int] = setting(help="MLP-layer counts of the character models with MLP layers in the highway "
                                  "layers' place (0: none)", factory=lambda: [1, 2], minimum=0)
    word_lstm: bool = setting(True, help="train the word-level LSTM of the same budget")
    seeds: list[int] = setting(help="seeds of each model", factory=lambda: [0, 1, 2], minimum=0, below=SEED_LIMIT)
    budget: int = setting(1_200_000, help="parameters per model", minimum=1)
    full: bool = setting(False, help="the paper's sizes, for a GPU: kim-large, 10,000 words, 19 M parameters, "
                                     "whole-text epochs (these replace the same settings of --budget and the base)")
    tune: int = setting(0, help="random-search trials per model over learning rate, dropout and LSTM layers at the "
                                "budget, the best on validation then trained with every seed (Melis et al., 2018); "
                                "0: the base's settings", minimum=0, metavar="N")
    base: LMConfig = setting(help="every model's settings", factory=lambda: LMConfig(
        corpus="austen", level="word", model="lstm", input="chars", layers=2, char_encoder="compact",
        input_dropout=0.1, state_dropout=0.0, output_dropout=0.25, max_vocab=5000, batch_size=20, bptt=35,
        steps_per_epoch=200, eval_batch_size=64,
        train=TrainConfig(epochs=3, optimizer="adam", lr=2e-3, grad_clip=1.0, schedule="cosine")))

    def __post_init__(self) -> None:
        check_settings(self)
        if self.base.level != "word":
            raise ValueError("CharLMConfig models words: its base needs level 'word'")

    def resolved(self) -> CharLMConfig:
        """The configuration that runs: with ``full``, the paper's sizes in place of the CPU-sized
        defaults (Kim et al.'s large model: kim-large, a 2-layer LSTM, 35-word windows of 20 streams,
        whole-text epochs)."""
        if not self.full:
            return self
        train = replace(self.base.train, epochs=25, lr=1e-3)
        base = LMConfig(**{**asdict(self.base), "char_encoder": "kim-large", "max_vocab": 10_000,
                           "steps_per_epoch": None, "input_dropout": 0.5, "output_dropout": 0.5,
                           "train": asdict(train)})
        return replace(self, budget=19_000_000, base=base, full=False)


def parse_variant(variant: str) -> dict[str, object]:
    """A Transformer depth study's variant, ``NORM-KIND[-final-norm|-no-final-norm][-matched-KIND2]``:
    the blocks' LayerNorms (``pre``, ``post``, ``none``), the connection (:data:`RESIDUALS`), a final
    LayerNorm where asked (the default: where the blocks have LayerNorms), and ``-matched-KIND2``: the
    MLP widened until the model has the parameters of ``NORM-KIND2`` (a parameter-matched baseline).
    Returns ``{"norm", "residual", "final_norm" (None: the default), "matched" (None or KIND2)}``; a
    ``ValueError`` names the forms where it is none of them."""
    match = re.fullmatch(rf"({'|'.join(NORMS)})-({'|'.join(RESIDUALS)})(-final-norm|-no-final-norm)?"
                         rf"(?:-matched-({'|'.join(RESIDUALS)}))?", variant) if isinstance(variant, str) else None
    if match is None:
        raise ValueError(f"variants are NORM-KIND[-final-norm|-no-final-norm][-matched-KIND] with NORM one of "
                         f"{', '.join(NORMS)} and KIND one of {', '.join(RESIDUALS)}; got {variant!r}")
    norm, residual, final, matched = match.groups()
    if residual == "deepnorm" and norm != "post":
        raise ValueError(f"variant {variant!r}: deepnorm is LN(αx + F(x)), post-LN: write post-deepnorm")
    if matched is not None and (residual != "residual" or matched == "residual"):
        raise ValueError(f"variant {variant!r}: -matched-KIND widens a plain residual model (NORM-residual) to the "
                         f"parameters of a gated one")
    return {"norm": norm, "residual": residual, "matched": matched,
            "final_norm": None if final is None else final == "-final-norm"}


def depth_gate_bias(blocks: int) -> float:
    """The gate bias at which, in a stack of ``blocks`` blocks (``2 * blocks`` gates at a fixed
    ``t = σ(b)``), the embeddings' term of the last block's output has weight
    ``(1 − σ(b))^(2·blocks) = 1/2`` and the branches' the other half (−1.67 at 2 blocks, −3.53 at 12,
    −4.52 at 32): it fixes the terms' relative weights at initialisation, not the stream's size (a
    final LayerNorm rescales the sum). The highway paper's advice, a more negative bias for a deeper
    network, as a rule; GTrXL's paper sets ``b_g = 2`` whatever the depth."""
    t = 1 - 2 ** (-1 / (2 * blocks))
    return math.log(t / (1 - t))


#: The study's variants, by default: the residual family and its controls.
TRANSFORMER_VARIANTS = ["post-residual", "pre-residual", "pre-layerscale", "pre-rezero", "pre-fixed", "pre-highway",
                        "pre-gtrxl", "none-rezero", "none-rezero-final-norm", "post-deepnorm",
                        "pre-residual-matched-highway", "pre-residual-matched-gtrxl"]


@dataclass
class TransformerDepthConfig:
    """The highway paper's depth study redrawn for Transformers, with its controls: causal
    character-level language models (Tiny Shakespeare, the task of nanoGPT's ``shakespeare_char``) at
    several depths, each depth in each variant (:func:`parse_variant`: where the LayerNorms go, the
    residual connection, a final LayerNorm, a parameter-matched width).

    Each depth and variant's learning rate is the one of ``lrs`` whose run with ``search_seed`` ends
    with the lowest validation loss, the grid extended by its own ratio while the pick is at an edge
    (at most ``extend`` times a side); then ``seeds`` train at it and are tested on the test split.
    The gated connections' bias follows the depth (:func:`depth_gate_bias`) unless ``gate_bias`` says.
    The same optimiser everywhere (nanoGPT's: AdamW, β2 0.99, weight decay on matrices only), no
    warm-up unless ``warmup`` says; ``base`` sets the rest; ``full`` is nanoGPT's baby GPT, for a GPU."""

    depths: list[int] = setting(help="blocks per model", factory=lambda: [2, 12, 32], minimum=1)
    variants: list[str] = setting(help="NORM-KIND[-final-norm|-no-final-norm][-matched-KIND]: the LayerNorms "
                                       "(pre, post, none), the connection (residual, fixed, rezero, layerscale, "
                                       "deepnorm, highway, gtrxl), a final LayerNorm, and a plain residual model "
                                       "widened to a gated one's parameters",
                                  factory=lambda: list(TRANSFORMER_VARIANTS))
    lrs: list[float] = setting(help="the learning-rate grid searched (search seed), extended at an edge",
                               factory=lambda: [1e-3, 1.8e-3, 3.2e-3, 5.6e-3, 1e-2], minimum=0.0)
    extend: int = setting(2, help="grid steps added beyond an edge where the pick sits there (at most, each side)",
                          minimum=0)
    search_seed: int = setting(0, help="the seed of the learning-rate search's runs (not one of the reported seeds)",
                               minimum=0, below=SEED_LIMIT)
    seeds: list[int] = setting(help="seeds of each depth and variant at its learning rate (tested)",
                               factory=lambda: [1, 2, 3, 4, 5], minimum=0, below=SEED_LIMIT)
    gate_bias: float | None = setting(None, help="the fixed, highway and GTrXL gates' initial bias (default: by "
                                                 "depth: (1 - sigmoid(b))^(2 x blocks) = 1/2, the embeddings' and "
                                                 "the branches' initial weights)")
    steps: int | None = setting(None, help="optimiser steps of each run (default: the base's epochs x steps per "
                                           "epoch); the runs validate --epochs times whatever the steps",
                                minimum=1)
    warmup: int = setting(0, help="linear warm-up steps (0: none, as the study asks: which variants need one)",
                          minimum=0)
    workers: int = setting(2, help="runs trained side by side, each a process on one CPU thread (1: one after "
                                   "another in this process, on PyTorch's threads); --full or a GPU: 1", minimum=1)
    full: bool = setting(False, help="nanoGPT's baby GPT, for a GPU: 6 blocks of 384 with 6 heads, context 256, "
                                     "dropout 0.2, batch 64, 5000 steps, 100 warm-up steps, cosine rate, AdamW with "
                                     "beta2 0.99 and weight decay 0.1 on matrices, rates around 1e-3 (these replace "
                                     "--depths, --lrs and the same settings of the base)")
    base: LMConfig = setting(help="every model's settings", factory=lambda: LMConfig(
        corpus="tinyshakespeare", level="char", model="transformer", hidden=32, heads=4, bptt=64, batch_size=8,
        steps_per_epoch=25, eval_batch_size=64, eval_windows=2, input_dropout=0.0, state_dropout=0.0,
        output_dropout=0.0, train=TrainConfig(epochs=8, optimizer="adamw", lr=1e-3, weight_decay=0.1,
                                              weight_decay_on="matrices", beta2=0.99, grad_clip=1.0,
                                              schedule="constant", nonfinite="record")))

    def __post_init__(self) -> None:
        check_settings(self)
        for variant in self.variants:
            matched = parse_variant(variant)["matched"]
            if matched is not None and f"{variant.split('-')[0]}-{matched}" not in self.variants:
                raise ValueError(f"variant {variant!r} matches the parameters of {variant.split('-')[0]}-{matched}, "
                                 f"which the variants must include")
        if len(set(self.variants)) != len(self.variants) or len(set(self.seeds)) != len(self.seeds):
            raise ValueError("TransformerDepthConfig.variants and .seeds must not repeat an entry")
        if self.search_seed in self.seeds:
            raise ValueError(f"TransformerDepthConfig.search_seed {self.search_seed} is one of the seeds: the runs "
                             f"that pick the learning rate are not the runs reported; choose another")
        if len(self.lrs) < 2 or len(set(self.lrs)) != len(self.lrs) or 0 in self.lrs:
            raise ValueError("TransformerDepthConfig.lrs needs two or more different positive rates")
        if self.base.model != "transformer" or self.base.level != "char":
            raise ValueError("TransformerDepthConfig's base is a character-level transformer")

    def resolved(self) -> TransformerDepthConfig:
        """The configuration that runs: with ``full``, nanoGPT's baby GPT (``config/train_shakespeare_char.py``)
        in place of the CPU-sized defaults; with ``steps``, the base's steps per epoch set to give them."""
        config = self
        if config.full:
            train = replace(config.base.train, epochs=20, optimizer="adamw", lr=1e-3, weight_decay=0.1,
                            weight_decay_on="matrices", beta2=0.99, schedule="cosine", grad_clip=1.0)
            base = LMConfig(**{**asdict(config.base), "hidden": 384, "heads": 6, "bptt": 256, "batch_size": 64,
                               "steps_per_epoch": 250, "eval_windows": None, "input_dropout": 0.2,
                               "output_dropout": 0.2, "train": train})
            config = replace(config, depths=[6], lrs=[3.2e-4, 5.6e-4, 1e-3, 1.8e-3, 3.2e-3],
                             warmup=config.warmup or 100, base=base, full=False, workers=1)
        if config.base.train.device not in ("cpu", "auto"):  # (side by side on one GPU: no)
            config = replace(config, workers=1)
        if config.steps is not None:
            per_epoch = -(-config.steps // config.base.train.epochs)
            config = replace(config, steps=None, base=replace(config.base, steps_per_epoch=per_epoch))
        return config
