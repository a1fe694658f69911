"""The Trainer: one small, general training loop for images, sentences and language models.

What a Trainer does not know is owned by a :class:`Task`: how to cut a split into batches, how to
compute the loss of a batch and which statistics to sum, and how to turn the sums into metrics.
The Trainer owns the rest: optimiser and schedule, devices, mixed precision, ``torch.compile``,
progress bars, evaluation each epoch, the run folder (``metrics.jsonl``, checkpoints) and exact
resumption.

Resuming is exact: a checkpoint holds the model, optimiser and schedule states and every random
number generator's state, and a task's training order is a function of ``(seed, epoch)`` alone, so
a run interrupted and resumed writes the same metrics as one that never stopped.

A run whose numbers stop being finite does not pass for a finished one: by default it stops with
:class:`TrainingDiverged` (the last good checkpoint kept); ``TrainConfig.nonfinite`` can skip such
steps instead, or end the run there as a result (for a search that expects some settings to diverge).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from tqdm.auto import tqdm

from .._checks import check_finite, check_flag, check_int, check_module, check_path, describe
from .._versions import release
from ..analysis import gate_means
from ..config import TrainConfig
from ..config.train import check_monitor
from . import files
from .checkpoint import (
    START_OVER,
    CheckpointMismatch,
    CorruptCheckpoint,
    check_identity,
    fit_state,
    gather_rng_states,
    read_checkpoint,
    restore_rng_state,
    run_identity,
)
from .cuda_graph import GraphedStep
from .devices import pick_device
from .distributed import (
    all_reduce_sums,
    barrier,
    batch_length,
    check_backend,
    init_distributed,
    rank_zero_decides,
    shard_batch,
    shard_weight,
)
from .run_dir import hold_run_dir, read_metrics

__all__ = ["CheckpointMismatch", "CorruptCheckpoint", "Task", "TrainConfig", "Trainer", "TrainingDiverged",
           "pick_device"]


class TrainingDiverged(RuntimeError):
    """The loss (or a metric) stopped being a finite number: the run stopped, its last good checkpoint kept."""

# The optimisers' fused CPU kernels came with torch 2.4 (torch 2.3 has them for CUDA only).
_FUSED_ON_CPU = release(torch.__version__) >= (2, 4)


class Task(Protocol):
    """What the Trainer needs from a data set and its loss."""

    def batches(self, split: str, epoch: int) -> Iterable[Any]:
        """The batches of ``split`` (``"train"``, ``"val"``, ``"test"``); the training order may
        depend on ``epoch`` and the task's seed, and on nothing else."""

    def step(self, model: nn.Module, batch: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """``(loss to minimise, statistics to sum over the split)`` for one batch already on the device.

        The loss is a mean over the batch's examples (under torchrun each process weighs its slice's
        mean by the slice's share, so that the processes' gradients average to the whole batch's)."""

    # Optional: ``to(device)`` moves the task's data to the training device (called once by the Trainer);
    # ``metric_names`` lists what ``summarize`` returns (the Trainer then refuses a monitor of another name
    # before training); ``graph_safe = True`` allows ``TrainConfig.cuda_graph``; ``batch_dim`` (default 0)
    # is the dimension along which data-parallel processes split a batch.

    def summarize(self, sums: dict[str, float]) -> dict[str, float]:
        """Metrics of a split from its summed statistics (for example loss and accuracy)."""




def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (tuple, list)):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch


def _lr_factor(c: TrainConfig, epoch: int) -> float:
    """The factor on ``c.lr`` in ``epoch`` (from 0): linear warm-up, then the schedule."""
    if epoch < c.warmup_epochs:
        return (epoch + 1) / (c.warmup_epochs + 1)
    done = epoch - c.warmup_epochs
    if c.schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * done / max(1, c.epochs - c.warmup_epochs)))
    if c.schedule == "step":
        return c.gamma ** (done // c.step_epochs)
    return 1.0


class Trainer:
    """Trains ``model`` on ``task`` as ``config`` says, writing to ``run_dir``.

    Args:
        model: any ``nn.Module``; it is moved to the configured device.
        task: the data and loss (:class:`Task`).
        config: a :class:`TrainConfig`.
        run_dir: the run folder for ``metrics.jsonl``, ``checkpoint.pt`` (the last epoch, to resume)
            and ``model.pt`` (the best weights by ``config.monitor``). None: nothing is written.
        log: where the one line per epoch goes (default: printed above the progress bars).
        progress: show tqdm progress bars (they hide themselves when output is not a terminal).
        gate_means: each epoch's metrics also hold every gate's mean over the validation pass
            (``gate/NAME``, :func:`~highwaynet.analysis.gate_means`): how a model's gates and scales
            move over training.

    Attributes:
        seconds: wall seconds :meth:`fit` has spent on this run, its earlier sessions included.
        earlier_seconds: the part of ``seconds`` spent before this session (0 unless resumed): a
            recipe adds it to its own session's time to report the whole run's.
        diverged: the epoch at which the run ended because its numbers stopped being finite
            (``TrainConfig(nonfinite="record")``), else None.

    Example::

        trainer = Trainer(model, ClassificationTask(data, batch_size=100), TrainConfig(epochs=5), "runs/x")
        history = trainer.fit()            # run again, it goes on where it stopped; fit(restart=True) starts over
        print(trainer.evaluate("test"))
    """

    def __init__(self, model: nn.Module, task: Task, config: TrainConfig, run_dir: str | Path | None = None,
                 log: Callable[[str], None] | None = None, progress: bool = True, gate_means: bool = False) -> None:
        check_module("model", model)
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {describe(config)}")
        if not all(callable(getattr(task, name, None)) for name in ("batches", "step", "summarize")):
            raise TypeError(f"task must be a Task (with batches, step and summarize), got {describe(task)}")
        if log is not None and not callable(log):
            raise TypeError(f"log must be a function taking a line (or None), got {describe(log)}")
        progress, gate_means = check_flag("progress", progress), check_flag("gate_means", gate_means)
        run_dir = check_path("run_dir", run_dir) if run_dir is not None else None
        self.config = config
        self._gate_means = gate_means
        self.task = task
        _check_monitor(config.monitor, task)
        # (the device first: under torchrun it picks the process group's backend, NCCL or gloo)
        self.device = pick_device(config.device)
        self.rank, self.world_size = init_distributed(self.device)
        check_backend(self.device)
        self.model = model.to(self.device)
        if hasattr(task, "to"):  # tasks that can hold their data on the device do
            task.to(self.device)
        if config.cuda_graph:
            self._check_graphable()
        self.run_dir = Path(run_dir) if run_dir is not None else None
        # Under torchrun only rank 0 writes files and logs.
        self._out = self.run_dir if self.rank == 0 else None  # the folder this process writes, if any
        self.log = (log or tqdm.write) if self.rank == 0 else (lambda message: None)
        self.progress = progress and self.rank == 0
        self.optimizer = self._make_optimizer()
        # (a function of the config, not a bound method: a Trainer that references itself lives on
        # until the collector runs, and with it a DDP wrapper's process group)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, functools.partial(_lr_factor, config))
        self.epoch = 0  # epochs finished
        self.steps = 0  # optimiser steps taken (for the warm-up by steps)
        self._identity: dict[str, Any] | None = None  # what a checkpoint records of the run (read once a fit)
        self.best: float | None = None
        self.history: list[dict[str, float]] = []
        self.seconds = self.earlier_seconds = 0.0
        self.diverged: int | None = None
        # The first states (model, optimiser, schedule, average), kept on the CPU as a fit starts from them, and
        # whether a fit stopped part-way (interrupted, or an error): fit again then starts from a checkpoint, or
        # from these, as a new process would (:meth:`_from_first_states`).
        self._first: list[Any] | None = None
        self._partial = False
        self._board: Any = None  # the TensorBoard log while fit runs, if asked for
        forward = DistributedDataParallel(self.model) if self.world_size > 1 else self.model
        # (torch.compile gives an nn.Module for a module, typed as any callable)
        self._forward_model = cast(nn.Module, torch.compile(forward)) if config.compile else forward
        # Evaluation needs no gradient synchronisation: the bare model (compiled once if asked).
        self._eval_model = self._forward_model if self.world_size == 1 else self.model
        # (under a graph nonfinite is never "skip": _check_graphable refuses it, so every step gives its statistics)
        self._graphed = GraphedStep(cast(Callable[[Any], dict[str, Tensor]], self._train_step),
                                    self.optimizer) if config.cuda_graph else None
        # The average is a copy of the model beside it, updated after each step (outside a CUDA graph).
        self.ema = AveragedModel(self.model, multi_avg_fn=get_ema_multi_avg_fn(config.ema),
                                 use_buffers=True) if config.ema else None

    # -- set-up ---------------------------------------------------------------------------------
    def _check_graphable(self) -> None:
        if not getattr(self.task, "graph_safe", False):
            raise ValueError(f"cuda_graph: {type(self.task).__name__} does not declare graph_safe = True (its "
                             f"steps may copy to the host or keep state in new tensors)")
        if self.device.type != "cuda":
            raise ValueError("cuda_graph: it needs a CUDA device")
        if self.world_size > 1:
            raise ValueError("cuda_graph: it runs in one process (not under torchrun)")
        if self.config.compile:
            raise ValueError("cuda_graph: it does not combine with compile (torch.compile's "
                             "mode='reduce-overhead' uses graphs itself)")
        if self.config.nonfinite == "skip":
            raise ValueError("cuda_graph: it does not combine with nonfinite='skip', which decides on the host "
                             "after each step whether to apply it")

    def _make_optimizer(self) -> torch.optim.Optimizer:
        c = self.config
        params: Any = list(self.model.parameters())
        if c.weight_decay_on == "matrices":  # (nanoGPT's split: matrices and embeddings decay, nothing else)
            params = [{"params": [p for p in params if p.dim() >= 2]},
                      {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        # On the CPU the fused update (torch >= 2.4) makes one pass over each parameter where the
        # default makes one per operation, several times faster for a model of millions of
        # parameters (benchmarks/optimizer_step.py). On a GPU the default stays, as the GPU figures
        # and the CUDA-graph steps were measured with it.
        fused = True if self.device.type == "cpu" and _FUSED_ON_CPU else None
        if c.optimizer == "sgd":
            return torch.optim.SGD(params, lr=c.lr, momentum=c.momentum, weight_decay=c.weight_decay, fused=fused)
        # Under a CUDA graph Adam's step counter must live on the GPU.
        adam = torch.optim.Adam if c.optimizer == "adam" else torch.optim.AdamW
        return adam(params, lr=c.lr, betas=(0.9, c.beta2), weight_decay=c.weight_decay, capturable=c.cuda_graph,
                    fused=fused)

    def _autocast(self) -> torch.autocast:
        # A captured graph must not rely on autocast's cache of cast weights (they change every step).
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.config.amp,
                              cache_enabled=False if self.config.cuda_graph else None)

    # -- the loop -------------------------------------------------------------------------------
    def fit(self, resume: bool = False, max_time: float | None = None, *, restart: bool = False,
            max_epochs: int | None = None) -> list[dict[str, float]]:
        """Train for the configured epochs, going on from the run folder's checkpoint where it holds one:
        a run fit again goes on where it stopped (a finished one trains no further), and says so.

        Where there is no checkpoint to go on from, fit again after a fit that stopped part-way (interrupted, or an
        error) starts over from the model's first weights (and the optimiser's, schedule's and average's first
        states, as a new process would), not from where it stopped: so on a Trainer without a run folder, and on
        one stopped before its first epoch was saved.

        ``resume`` is the older spelling of going on (fit goes on either way; with ``resume`` a folder
        without a checkpoint yet is said to start from scratch). ``restart`` starts the run over,
        removing what it wrote into the folder (its own files only, and the analyses of its weights in
        ``RUN/gates`` and ``RUN/lesion``). ``max_time`` (seconds) stops
        after the first epoch at which the epochs' summed time reaches it, to compare models trained
        for the same time (such a run depends on the machine's speed). ``max_epochs`` stops after that
        many epochs, the learning-rate schedule still set for ``config.epochs`` (a run cut short on a
        longer run's schedule; a run that has trained them trains no further). Returns the metrics of every
        epoch (those of earlier sessions included when going on). With ``config.ema`` the model then
        holds the averaged weights. While it runs, it holds the run folder's lock
        (:func:`~highwaynet.training.run_dir.hold_run_dir`).

        Raises:
            TrainingDiverged: an epoch's loss or metrics were not finite (``config.nonfinite="stop"``).
            CorruptCheckpoint: going on, the checkpoint could not be read.
            CheckpointMismatch: going on, the checkpoint is another run's, or was trained with other
                settings, or does not fit this model (``restart=True`` starts over).
            ~highwaynet.training.files.FolderNotOurs: the run folder holds files highwaynet did not write.
        """
        resume, restart = check_flag("resume", resume), check_flag("restart", restart)
        if max_time is not None and check_finite("max_time", max_time) < 0:
            raise ValueError(f"max_time must be at least 0 (seconds), or None, got {max_time}")
        if max_epochs is not None:
            max_epochs = check_int("max_epochs", max_epochs, minimum=1)
        if resume and restart:
            raise ValueError("fit: resume goes on with the run in the folder and restart starts it over: pass one")
        _check_splits(self.task)
        if restart and (self.epoch or self.steps):  # (before anything is removed: the run there stays)
            raise ValueError(f"fit(restart=True) starts the run over from the model's first weights, and this "
                             f"Trainer's model has been trained since (or loaded from the checkpoint of epoch "
                             f"{self.epoch}): to start over, make a new Trainer with a new model and call its "
                             f"fit(restart=True)")
        with hold_run_dir(self._out, log=self.log):
            self._identity = None  # (the folder's identity as the lock found it: a restart gives it a new one)
            if restart and self._out is not None:
                files.clear(self._out)
            barrier()  # (under torchrun: no process looks for a checkpoint before rank 0 has removed it)
            return self._fit(resume, max_time, max_epochs)

    def _fit(self, resume: bool, max_time: float | None, max_epochs: int | None = None) -> list[dict[str, float]]:
        saved = self.run_dir is not None and any(
            (self.run_dir / name).exists() or (self.run_dir / name).is_symlink()
            for name in ("checkpoint.pt", "checkpoint.prev.pt"))
        if not ((resume or saved) and self.load_checkpoint()):
            self._from_first_states()
            seed_everything(self.config.seed)
            if self._out is not None:  # what a run stopped before its first checkpoint wrote (its own files only)
                files.remove_written(self._out, {"metrics.jsonl", "model.pt"})
        start, before = time.perf_counter(), self.seconds
        self._board = self._open_tensorboard()
        self._partial = True  # (until the epochs end as they should)
        try:
            for epoch in range(self.epoch, min(self.config.epochs, max_epochs or self.config.epochs)):
                try:
                    metrics = self._run_epoch(epoch)
                except KeyboardInterrupt:
                    self.log(f"interrupted in epoch {epoch + 1}; " + self._resume_hint())
                    raise
                self.log(format_metrics(metrics, self.config.epochs))
                self.seconds = before + time.perf_counter() - start
                if not all(math.isfinite(v) for v in metrics.values()):
                    self._diverged(epoch, metrics)
                    break
                self.epoch = epoch + 1
                self.history.append(metrics)
                self._save(metrics)
                if self.run_dir is not None:
                    self._first = None  # (a checkpoint holds where to go on from)
                if self._board is not None:
                    self._board.epoch(metrics)
                if max_time is not None and rank_zero_decides(sum(m["time"] for m in self.history) >= max_time):
                    break
        finally:
            if self._board is not None:
                self._board.close()
        self._partial = False
        barrier()  # under torchrun: the run folder is complete (rank 0 writes it) when fit returns, on every rank
        if self.ema is not None:
            self.model.load_state_dict(self.ema.module.state_dict())
        return self.history

    def _from_first_states(self) -> None:
        """Start from the first states: kept as a first fit starts; put back where a fit stopped part-way with no
        checkpoint to go on from (stopped before its first, or without a run folder), whose weights, momentum and
        average are part-trained: fit again then ends as a run never interrupted, as a new process would."""
        if self._first is None and not self.steps:
            self._first = self._states()
        elif self._first is not None and self._partial:
            self._put_back(self._first)
            self.epoch = self.steps = 0
            self.best, self.history, self.diverged = None, [], None
            self.seconds = self.earlier_seconds = 0.0

    def _parts(self) -> list[Any]:
        """What a fit trains and a checkpoint holds, each with a state dict: the model, optimiser, schedule and
        average (where there is one)."""
        return [part for part in (self.model, self.optimizer, self.scheduler, self.ema) if part is not None]

    def _states(self) -> list[Any]:
        """A copy of :meth:`_parts`' states on the CPU, to put back with :meth:`_put_back`."""
        return [_copy_on_cpu(part.state_dict()) for part in self._parts()]

    def _put_back(self, states: list[Any]) -> None:
        """Load ``states`` (from :meth:`_states`) into the parts they were copied from."""
        for part, state in zip(self._parts(), states, strict=True):
            part.load_state_dict(state)

    def _diverged(self, epoch: int, metrics: dict[str, float]) -> None:
        """Epoch ``epoch`` (from 0) ended with non-finite numbers: stop, or record it as the run's end."""
        bad = ", ".join(f"{k} {v}" for k, v in metrics.items() if not math.isfinite(v))
        if self.config.nonfinite == "record":
            self.diverged = epoch + 1
            self.history.append(metrics)
            if self._out is not None:  # its metrics line, not its weights: the last checkpoint stays the last good one
                files.append_line(self._out / "metrics.jsonl", json.dumps(metrics))
            self.log(f"epoch {epoch + 1} ended with {bad}: the run ends here (nonfinite='record')")
            return
        kept = (f"{self._out / 'checkpoint.pt'} holds epoch {self.epoch}, the last good one"
                if self._out is not None and self.epoch else "no epoch before it was saved")
        raise TrainingDiverged(f"epoch {epoch + 1} ended with {bad}: training diverged, and the run stopped ({kept}). "
                               f"Try a lower learning rate (--lr), clipping the gradients (--grad-clip), or skipping "
                               f"such steps (--nonfinite skip)")

    def _open_tensorboard(self) -> Any:
        if not self.config.tensorboard or self._out is None:
            return None
        from .tensorboard import TensorBoardLog

        # (purge_step: a resumed run's events replace those a killed session wrote past its checkpoint)
        files.make_folder(self._out / "tensorboard")  # (listed as the run's: a restart removes it)
        return TensorBoardLog(self._out / "tensorboard", purge_step=self.epoch + 1)

    def _run_epoch(self, epoch: int) -> dict[str, float]:
        start = time.perf_counter()
        self.model.train()
        sums: dict[str, Tensor] = {}
        skipped = 0
        batches = tqdm(self.task.batches("train", epoch), desc=f"epoch {epoch + 1}", leave=False,
                       disable=None if self.progress else True)
        for batch in batches:
            weight = 1.0
            if self.world_size > 1:
                n = batch_length(batch, self._batch_dim)
                if n < self.world_size:
                    continue  # every process takes part in a step, which one without an example cannot
                weight = shard_weight(n, self.rank, self.world_size)
            batch = to_device(self._shard(batch), self.device)
            self._warm_up()
            stats = self._graphed(batch) if self._graphed else self._train_step(batch, weight)
            self.steps += 1
            if stats is None:  # (nonfinite="skip": a step left out)
                skipped += 1
                continue
            _accumulate(sums, stats)
            if self.ema is not None:
                self.ema.update_parameters(self.model)
        if not sums and skipped:
            raise TrainingDiverged(f"every step of epoch {epoch + 1} ({skipped}) had non-finite gradients: skipping "
                                   f"them cannot go on. Try a lower learning rate (--lr) or clipping the gradients "
                                   f"(--grad-clip)")
        if not sums:
            raise RuntimeError("the training split gave no batches: is it empty, or smaller than a batch?")
        lr = self.optimizer.param_groups[0]["lr"]
        self.scheduler.step()
        train = self.task.summarize({k: v.item() for k, v in all_reduce_sums(sums).items()})
        validated = self.ema.module if self.ema is not None else self._eval_model
        # (each gate's mean over the validation pass, where asked: a study of the gates over training)
        recording: contextlib.AbstractContextManager[dict[str, float]] = \
            gate_means(validated) if self._gate_means else contextlib.nullcontext({})
        with recording as gates:
            if self.config.tensorboard:
                from .tensorboard import GateHistograms

                with GateHistograms(validated) as histograms:
                    val = self.evaluate("val", validated)
                if self._board is not None:
                    self._board.gates(histograms.reduced(), epoch + 1)
            else:
                val = self.evaluate("val", validated)
        return {"epoch": epoch + 1, "time": round(time.perf_counter() - start, 3), "lr": lr,
                **{f"train_{k}": v for k, v in train.items()}, **{f"val_{k}": v for k, v in val.items()},
                **({"skipped": skipped} if self.config.nonfinite == "skip" else {}),
                **{f"gate/{name}": value for name, value in gates.items()}}

    def _warm_up(self) -> None:
        """The rate of the next step during the warm-up by steps: its share of the epoch's rate (set outside
        the step, which may be a CUDA graph: a graph re-captures at a new rate)."""
        if self.steps < self.config.warmup_steps:
            factor = (self.steps + 1) / self.config.warmup_steps
            for group, lr in zip(self.optimizer.param_groups, self.scheduler.get_last_lr(), strict=True):
                group["lr"] = lr * factor

    def _train_step(self, batch: Any, weight: float = 1.0) -> dict[str, Tensor] | None:
        """One optimiser step; its statistics, or None where ``nonfinite="skip"`` left it out."""
        with self._autocast():
            loss, stats = self.task.step(self._forward_model, batch)
        if weight != 1.0:  # under torchrun, a slice of a batch that the processes split unevenly
            loss = loss * weight
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        skip = self.config.nonfinite == "skip"
        if self.config.grad_clip or skip:
            # (the norm of the gradients, summed over the processes by DDP already: every one decides alike)
            norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip or math.inf)
            if skip and not bool(torch.isfinite(norm)):
                self.optimizer.zero_grad(set_to_none=True)
                return None
        self.optimizer.step()
        return stats

    @torch.no_grad()
    def evaluate(self, split: str = "val", model: nn.Module | None = None) -> dict[str, float]:
        """The task's metrics on ``split``, in evaluation mode (no dropout): of the model, or of ``model``."""
        model = model if model is not None else self._eval_model
        was_training = self.model.training, model.training
        self.model.eval()
        model.eval()
        sums: dict[str, Tensor] = {}
        try:
            for batch in self.task.batches(split, 0):
                batch = self._shard(batch)
                if self.world_size > 1 and batch_length(batch, self._batch_dim) == 0:
                    continue  # (a batch smaller than the processes: the others' sums count it)
                with self._autocast():
                    _, stats = self.task.step(model, to_device(batch, self.device))
                _accumulate(sums, stats)
        finally:
            model.train(was_training[1])
            self.model.train(was_training[0])  # (last: a compiled model's mode is the model's own)
        if not sums:
            raise RuntimeError(f"the {split!r} split gave no batches")
        return self.task.summarize({k: v.item() for k, v in all_reduce_sums(sums).items()})

    def _shard(self, batch: Any) -> Any:
        if self.world_size == 1:
            return batch
        return shard_batch(batch, self.rank, self.world_size, self._batch_dim)

    @property
    def _batch_dim(self) -> int:
        # Tasks whose batches are not batch-first say so (language models: (T, B) windows, cut by stream).
        return getattr(self.task, "batch_dim", 0)

    # -- the run folder -------------------------------------------------------------------------
    def _is_better(self, value: float) -> bool:
        if self.best is None or math.isnan(self.best):
            return True
        return value > self.best if self.config.monitor.endswith("acc") else value < self.best

    def _resume_hint(self) -> str:
        """What an interruption kept, and how to go on from it: with no checkpoint (no run folder, or none saved
        yet), fit again starts over from the first weights (:meth:`_from_first_states`)."""
        if self._out is None:
            return f"nothing is saved (no run folder): fit() again starts over from {_FIRST_WEIGHTS}"
        if self.epoch == 0:
            return (f"no epoch had finished, so nothing is saved: run the same command again to start over (from "
                    f"Python: fit() again starts over from {_FIRST_WEIGHTS})")
        return (f"epoch {self.epoch} is the last saved: run the same command again to go on from there (from "
                f"Python: fit() again, on the same run folder {self.run_dir})")

    def _save(self, metrics: dict[str, float]) -> None:
        if self.run_dir is None:
            return
        # Every process's generators (a collective under torchrun: before rank 0 alone goes on to write).
        rng = gather_rng_states(self.device)
        if self._out is None:
            return
        # The metrics line first, then the checkpoint: a run killed between the two re-runs the
        # epoch on resume, and load_checkpoint drops the line it had written for it.
        files.append_line(self._out / "metrics.jsonl", json.dumps(metrics))
        value = metrics.get(self.config.monitor)
        if value is not None and self._is_better(value):
            self.best = value
            validated = self.ema.module if self.ema is not None else self.model
            files.save_torch(validated.state_dict(), self._out / "model.pt")
        checkpoint = {
            "epoch": self.epoch,
            "steps": self.steps,
            "best": self.best,
            "seconds": self.seconds,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": rng,
            "device": str(self.device),
            "config": asdict(self.config),
            "identity": self._run_identity(),
            **({"ema": self.ema.state_dict()} if self.ema is not None else {}),
        }
        # The one before is kept as checkpoint.prev.pt: the way on if the last is ever damaged.
        files.save_torch(checkpoint, self._out / "checkpoint.pt", keep_previous=self._out / "checkpoint.prev.pt")

    def _run_identity(self) -> dict[str, Any]:
        """The run's identity (:func:`~highwaynet.training.checkpoint.run_identity`): read from the folder
        once, not at every checkpoint."""
        if self._identity is None:
            self._identity = run_identity(self.run_dir, asdict(self.config))
        return self._identity

    def load_checkpoint(self) -> bool:
        """Restore the last finished epoch from ``run_dir/checkpoint.pt`` (for :meth:`fit` with resume).

        Returns False, having said so, where the folder holds no checkpoint yet (its run was stopped
        before its first epoch was saved): the run then starts from scratch. Where a run was killed
        between putting the previous checkpoint aside and the new one in place, it resumes from
        ``checkpoint.prev.pt``. The checkpoint is read on the CPU whatever device saved it, then
        placed on this run's device.

        Raises:
            CorruptCheckpoint: the checkpoint cannot be read (the message names the ways on).
            CheckpointMismatch: it is another run's, was trained with settings the folder's
                ``config.json`` no longer holds, or does not fit the model.
        """
        if self.run_dir is None:
            raise ValueError("resuming needs a run folder")
        path, previous = self.run_dir / "checkpoint.pt", self.run_dir / "checkpoint.prev.pt"
        if not path.is_file():
            if not previous.is_file():
                self.log(f"{self.run_dir} holds no checkpoint yet (its run stopped before an epoch was saved): "
                         f"starting it from scratch")
                return False
            self.log(f"{path.name} is missing (its run was stopped while saving it): resuming from {previous.name}")
            path = previous
        for name in (path.name, "config.json"):
            if (self.run_dir / name).is_symlink():
                raise files.LinkInFolder(f"{self.run_dir / name} is a symbolic link: a run resumes only from its "
                                         f"own files; remove the link, or {START_OVER}")
        state = read_checkpoint(path, previous)
        notes = check_identity(state.get("identity"), self._run_identity(), path)
        history = read_metrics(self.run_dir)[: state["epoch"]]
        # (the metrics line of an epoch is written before its checkpoint: fewer lines is a file cut short or edited,
        # which the rewrite below would make for good)
        if [m["epoch"] for m in history] != list(range(1, state["epoch"] + 1)):
            raise ValueError(f"{self.run_dir / 'metrics.jsonl'} holds the metrics of epochs "
                             f"{[m['epoch'] for m in history]}, not of the {state['epoch']} epochs {path} holds: "
                             f"it was cut short or edited; put back the file the run wrote, or {START_OVER}")
        # A load that fails part-way leaves the model as it was, not part this checkpoint's: fit(restart=True), the
        # way on the error names, starts from its first weights.
        before = self._states()
        try:
            notes += self._load_state(state, path)
        except BaseException:
            self._put_back(before)
            raise
        self.epoch, self.best, self.steps = state["epoch"], state["best"], state.get("steps", 0)
        self.history = history
        self.seconds = self.earlier_seconds = state.get("seconds", sum(m["time"] for m in self.history))
        if self._out is not None:
            # Rewrite the metrics without lines of epochs that the checkpoint does not hold; in one
            # step, as the other processes under torchrun may be reading them (above).
            files.write_text(self._out / "metrics.jsonl", "".join(json.dumps(m) + "\n" for m in self.history))
        saved_on = state.get("device")
        moved = f" (saved on {saved_on}, now on {self.device})" if saved_on and \
            torch.device(saved_on).type != self.device.type else ""
        if self.epoch >= self.config.epochs:
            self.log(f"{self.run_dir} holds this run, finished after epoch {self.epoch}: nothing left to train{moved}")
        else:
            self.log(f"resumed {self.run_dir} after epoch {self.epoch}{moved}")
        for note in notes:
            self.log(f"note: {note}")
        return True


    def _load_state(self, state: dict[str, Any], path: Path) -> list[str]:
        """Load a checkpoint's states into the model, optimiser, schedule, average and generators; the notes
        on the generators (:meth:`load_checkpoint`)."""
        fit_state("the model", path, lambda: self.model.load_state_dict(state["model"]))
        fit_state("the optimiser", path,
                  lambda: self.optimizer.load_state_dict(_with_update_of(self.optimizer, state["optimizer"])))
        fit_state("the learning-rate schedule", path, lambda: self.scheduler.load_state_dict(state["scheduler"]))
        ema = self.ema
        if ema is not None:
            if "ema" not in state:
                raise CheckpointMismatch(f"{path} holds no average of the weights: its run was started without ema, "
                                         f"and resumes only without it")
            fit_state("the average of the weights (ema)", path, lambda: ema.load_state_dict(state["ema"]))
        try:
            return restore_rng_state(state["rng"], self.device, self.rank, self.config.seed + state["epoch"])
        except (TypeError, ValueError, KeyError, IndexError, RuntimeError, AttributeError) as error:
            raise CorruptCheckpoint(f"{path}'s random generator states are not what highwaynet saves "
                                    f"({type(error).__name__}: {error}): it was edited or damaged. To go on, "
                                    f"{START_OVER}") from error


#: Where a fit again starts from when the fit before it stopped with no checkpoint to go on from.
_FIRST_WEIGHTS = "the model's first weights, not from where it stopped"


def _copy_on_cpu(value: Any) -> Any:
    """A copy of a state dict, its tensors on the CPU (a copy to put back, costing no GPU memory)."""
    if isinstance(value, Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _copy_on_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copy_on_cpu(v) for v in value)
    return value

# How an optimiser runs its update, which belongs to the machine that resumes, not to the checkpoint.
_UPDATE_KEYS = ("fused", "foreach", "capturable")


def _with_update_of(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> dict[str, Any]:
    """``saved`` (an optimiser state dict) with ``optimizer``'s way of running its update.

    ``load_state_dict`` takes every group setting from the checkpoint, these too: a run saved on a
    CPU with the fused update (torch >= 2.4) would resume with it on a GPU, or fail under torch 2.3,
    which has no fused CPU kernels; one saved under a CUDA graph would resume with ``capturable``
    set on a CPU. Setting them before the load also puts Adam's step counters where the update
    expects them (on the parameters' device when fused or capturable, else on the CPU). A count of
    groups that differs is left for ``load_state_dict`` to report.
    """
    groups = [{**saved_group, **{k: group[k] for k in _UPDATE_KEYS if k in group}}
              for saved_group, group in zip(saved["param_groups"], optimizer.param_groups, strict=False)]
    return {**saved, "param_groups": groups}


def _check_monitor(monitor: str, task: Task) -> None:
    """Refuse, before any training, a monitored metric the task does not report (a typo would otherwise
    train to the end and never pick best weights); tasks that do not list their metrics are trusted."""
    names = getattr(task, "metric_names", None)
    if names is not None:
        check_monitor(monitor, tuple(names))


def _check_splits(task: Task) -> None:
    """Refuse, before any training, a task without a split that fit reads ('train', and 'val' after each
    epoch), which failed only once the first epoch had trained; tasks that do not hold their splits in a
    dict (``splits``, as :class:`~highwaynet.training.ClassificationTask` does) are trusted."""
    splits = getattr(task, "splits", None)
    if not isinstance(splits, dict):
        return
    missing = [name for name in ("train", "val") if name not in splits]
    if missing:
        raise ValueError(f"fit: the task has no {' and no '.join(map(repr, missing))} split (it has "
                         f"{', '.join(map(repr, splits)) or 'none'}): the Trainer trains on 'train' and validates "
                         f"on 'val' after each epoch")


def _accumulate(sums: dict[str, Tensor], stats: dict[str, Tensor]) -> None:
    for k, v in stats.items():
        v = v.detach().double() if isinstance(v, Tensor) else torch.tensor(float(v), dtype=torch.float64)
        sums[k] = sums[k] + v if k in sums else v


def format_metrics(metrics: dict[str, float], epochs: int) -> str:
    """The one-line summary of an epoch: ``epoch 3/10  1.2s  train_loss 0.4102  val_loss ...``."""
    parts = [f"epoch {metrics['epoch']:>{len(str(epochs))}}/{epochs}", f"{metrics['time']:6.2f}s"]
    for k, v in metrics.items():
        if k.startswith(("train_", "val_")):
            parts.append(f"{k} {v:.4f}")
    if metrics.get("skipped"):
        parts.append(f"skipped {metrics['skipped']} non-finite steps")
    return "  ".join(parts)
