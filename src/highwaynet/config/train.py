"""How to train: the :class:`TrainConfig` every recipe nests, and the Trainer reads."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from ._fields import check_settings, setting

__all__ = ["DEVICE_FORMS", "SEED_LIMIT", "TrainConfig", "check_device_name", "check_monitor", "device_of"]

#: The device settings' forms, for messages.
DEVICE_FORMS = "auto, cpu, cuda, cuda:N or mps"
#: Seeds are below this (NumPy's range; PyTorch's generators take them, and the seeds derived from them).
SEED_LIMIT = 2**32


def check_device_name(name: str) -> None:
    """A ``ValueError`` naming the forms where ``name`` is not a device setting (``"auto"`` or a torch device
    string). The spelling only: whether the machine has it is :func:`highwaynet.training.devices.pick_device`'s
    question. (PyTorch is imported only for an uncommon name.)"""
    if name in ("auto", "cpu", "cuda", "mps") or re.fullmatch(r"cuda:\d+", name):
        return
    import torch

    try:
        torch.device(name)
    except (RuntimeError, TypeError):
        raise ValueError(f"device {name!r} is not a device: use {DEVICE_FORMS}") from None


def check_monitor(monitor: str, metrics: tuple[str, ...]) -> None:
    """A ``ValueError`` where ``monitor`` is not ``val_`` or ``train_`` and one of ``metrics`` (what the
    recipe's task reports): a typo would otherwise train to the end and never keep best weights."""
    known = [f"{split}_{name}" for split in ("val", "train") for name in metrics]
    if monitor not in known:
        raise ValueError(f"TrainConfig.monitor {monitor!r} is not a metric this recipe reports: use one of "
                         f"{', '.join(known)}")


def device_of(config: Any) -> str:
    """The device setting of a recipe's configuration: its own ``device`` field, or its training's
    (``train.device``), or its base run's (``base.train.device``); ``"auto"`` where it has none."""
    queue = [config]
    while queue:
        current = queue.pop(0)
        fields = {f.name: getattr(current, f.name) for f in dataclasses.fields(current)}
        if isinstance(fields.get("device"), str):
            return str(fields["device"])
        queue += [v for v in fields.values() if dataclasses.is_dataclass(v) and not isinstance(v, type)]
    return "auto"


@dataclass
class TrainConfig:
    """How to train. Everything here is written to the run folder.

    Attributes:
        epochs: passes over the training split.
        optimizer: ``"sgd"`` (with ``momentum``, Nesterov off), ``"adam"`` or ``"adamw"``.
        lr: the peak learning rate.
        momentum: SGD momentum.
        weight_decay: L2 penalty (decoupled for AdamW).
        weight_decay_on: the parameters it applies to: ``"all"``, or ``"matrices"`` (those of two
            dimensions or more: weight matrices and embeddings, not biases, norms' gains, gates'
            biases or learned scales), as nanoGPT and GPT-2's recipes decay.
        beta2: Adam's and AdamW's second-moment decay (0.999, PyTorch's default; nanoGPT's
            character model uses 0.99).
        schedule: ``"constant"``, ``"cosine"`` (to 0 over the epochs) or ``"step"`` (x ``gamma``
            every ``step_epochs``); a schedule steps once per epoch.
        warmup_epochs: linear warm-up epochs before the schedule.
        warmup_steps: linear warm-up over the first optimiser steps, on top of the epoch schedule
            (a Transformer's usual warm-up: step ``k`` runs at ``(k + 1) / warmup_steps`` of the rate).
        grad_clip: clip the gradients' global norm to this (None or 0: no clipping).
        seed: seeds the model's initialisation (through the recipe), dropout and the data order.
        device: ``"auto"`` (CUDA, then MPS, then CPU) or a torch device string.
        amp: train under bfloat16 autocast.
        compile: run the model through ``torch.compile``.
        cuda_graph: replay each training step (forward, backward, clipping, optimiser) as a CUDA
            graph (:class:`~highwaynet.training.cuda_graph.GraphedStep`): for small deep nets whose
            steps are launch-bound. CUDA only, one process, tasks with ``graph_safe = True``.
        monitor: the validation metric that picks the best weights (``model.pt``); lower is better
            unless it ends in ``acc``.
        ema: the decay of an exponential moving average of the weights (and buffers), updated
            after every step (``torch.optim.swa_utils.AveragedModel``; 0.99-0.999 are usual). The
            average, not the last weights, is validated, saved as ``model.pt`` and held by the
            model when ``fit`` returns; the checkpoint keeps both. 0: off.
        nonfinite: what numbers that stop being finite do: ``"stop"`` the run at the end of the
            epoch with :class:`~highwaynet.training.TrainingDiverged` (the last good checkpoint kept);
            ``"skip"`` each step whose gradients are not finite, as AMP's gradient scaler does
            (counted in the epoch's metrics as ``skipped``); or ``"record"``: end the run at that
            epoch as its result, its metrics NaN (for a search that expects some settings to diverge).
        tensorboard: also write TensorBoard event files (``RUN_DIR/tensorboard``): the epoch
            metrics and, for models with highway gates, a histogram of each gate's activity on the
            validation set every epoch.
    """

    epochs: int = setting(10, help="passes over the training data", minimum=1)
    optimizer: str = setting("sgd", help="the optimiser", choices=("sgd", "adam", "adamw"))
    lr: float = setting(0.01, help="the (peak) learning rate", minimum=0.0)
    momentum: float = setting(0.9, help="SGD's momentum", minimum=0.0, below=1.0)
    weight_decay: float = setting(0.0, help="L2 penalty (decoupled for AdamW)", minimum=0.0)
    weight_decay_on: str = setting("all", help="the parameters weight decay applies to: all, or matrices only "
                                               "(not biases, norms, gate biases, scales: nanoGPT's way)",
                                   choices=("all", "matrices"))
    beta2: float = setting(0.999, help="Adam's and AdamW's second-moment decay", minimum=0.0, below=1.0)
    schedule: str = setting("constant", help="the learning rate over the epochs",
                            choices=("constant", "cosine", "step"))
    warmup_epochs: int = setting(0, help="linear warm-up epochs before the schedule", minimum=0)
    warmup_steps: int = setting(0, help="linear warm-up over the first optimiser steps", minimum=0)
    gamma: float = setting(0.1, help="the step schedule's factor", minimum=0.0)
    step_epochs: int = setting(10, help="epochs between the step schedule's steps", minimum=1)
    grad_clip: float | None = setting(None, help="clip the gradients' global norm to this (0: no clipping)",
                                      minimum=0.0)
    seed: int = setting(0, help="seeds initialisation, dropout and data order", minimum=0, below=SEED_LIMIT)
    device: str = setting("auto", help="auto (CUDA, MPS, then CPU), cpu, cuda, cuda:1, ...")
    amp: bool = setting(False, help="train under bfloat16 autocast")
    compile: bool = setting(False, help="run the model through torch.compile")
    cuda_graph: bool = setting(False, help="replay each training step as a CUDA graph (launch-bound models on a "
                                           "GPU: small deep nets, RHNs)")
    monitor: str = setting("val_loss", help="the validation metric that picks the best weights (lower is better "
                                            "unless it ends in acc)")
    ema: float = setting(0.0, help="validate and keep an exponential moving average of the weights with this "
                                   "decay, updated every step (e.g. 0.995; 0: off)", minimum=0.0, below=1.0,
                         metavar="DECAY")
    nonfinite: str = setting("stop", help="numbers that stop being finite stop the run (the last good checkpoint "
                                          "kept); or each such step is skipped; or the run ends there as its result",
                             choices=("stop", "skip", "record"))
    tensorboard: bool = setting(False, help="also write TensorBoard event files (RUN_DIR/tensorboard): metrics, "
                                            "and each highway gate's activity on the validation set")

    def __post_init__(self) -> None:
        check_settings(self)
        check_device_name(self.device)
        if self.lr == 0:
            raise ValueError("TrainConfig.lr must be positive, got 0")
