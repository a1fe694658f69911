"""The depth study redrawn for Transformers, with the controls that say why a connection helps.

The highway paper's Fig. 1 trains plain and highway MLPs of 10 to 100 layers; here causal
character-level Transformers of ``depths`` blocks (Tiny Shakespeare, nanoGPT's ``shakespeare_char``
task) train in each variant (:func:`~highwaynet.config.text.parse_variant`): the LayerNorms before
each sublayer (``pre``), after each connection (``post``) or nowhere (``none``), with a final
LayerNorm where the blocks have them (or as asked), and the connection one of the residual family
(:mod:`highwaynet.nn.residual`): a plain sum, a fixed gate (a highway gate frozen at its initial
bias: the control for a learned gate), ReZero/SkipInit's scalar, LayerScale, DeepNorm, a highway
gate, GTrXL's gate; and plain residual models whose MLP is widened to a gated model's parameters.
No warm-up by default: the original post-LN Transformer is known to need one as it deepens (Xiong
et al., 2020; Liu et al., 2020), and the question is which connections do without.

The method, fixed before any run:

- each depth and variant's learning rate is the one of the grid ``lrs`` whose run with
  ``search_seed`` ends with the lowest validation loss, the grid extended by its own ratio while
  the pick sits at an edge (``extend`` steps a side at most); a run whose numbers stop being finite
  ends there and never wins;
- then ``seeds`` (not the search's) train at that rate, and the weights with the best validation
  loss of each are tested on the test split: the numbers reported;
- the pre-registered contrasts (:func:`contrasts`) are paired differences over the seeds (every
  variant trains on the same batches for a seed), with 95% t-intervals; a verdict says a
  difference only where its interval excludes 0 (no correction for the number of contrasts);
- the gates' and scales' means per block are recorded on the validation split at initialisation
  and after every epoch.

Every run is an ``lm`` run folder (``highwaynet generate`` samples from any of them); a study run
again goes on where it stopped. Writes ``summary.json``, ``depth.png`` (validation loss against
steps), ``gates.png`` (each gated or scaled variant's mean gate per block over training) and
``report.md``.
"""

from __future__ import annotations

import ctypes
import math
import os
import resource
import signal
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

import torch

from ..config import LMConfig, TransformerDepthConfig
from ..config.text import depth_gate_bias, parse_variant
from ..data.corpora import NGRAM_CELLS, Corpus, load_corpus
from ..models.transformer import GATED
from ..report import (
    FIGURE_WIDTH,
    findings,
    markdown_table,
    save_figure,
    subplots,
    whole_numbers,
)
from ..training import read_metrics
from ..training.devices import pick_device
from ..training.progress import SweepProgress
from ..training.run_dir import (  # (paired_interval: importable from here, below)
    finish_sweep,
    finite_or_inf,
    paired_differences,
    paired_interval,  # noqa: F401
    run_once,
    start_sweep,
    write_text,
)
from . import lm

# paired_interval lives in run_dir now; the name stays importable from here for code written against 0.3.
__all__ = ["TransformerDepthConfig", "contrast_text", "contrasts", "label", "mean_gates", "run", "test_loss_text",
           "verdicts", "write_report"]


def label(variant: str) -> str:
    """A variant's name in words (``pre-fixed`` → ``pre-LN, fixed gate``)."""
    parts = parse_variant(variant)
    norm = {"pre": "pre-LN", "post": "post-LN", "none": "no LN"}[str(parts["norm"])]
    kind = {"residual": "sum", "fixed": "fixed gate (frozen)", "rezero": "learned scalar α (ReZero's, SkipInit's)",
            "layerscale": "LayerScale", "deepnorm": "DeepNorm", "highway": "highway gate", "gtrxl": "GTrXL gate"}
    text = f"{norm}, {kind[str(parts['residual'])]}"
    if parts["final_norm"] is not None:
        text += ", final LN" if parts["final_norm"] else ", no final LN"
    if parts["matched"]:
        text += f", MLP widened to {parts['matched']}'s parameters"
    return text


def _run_config(config: TransformerDepthConfig, depth: int, variant: str, lr: float, seed: int,
                mlp_hidden: int | None) -> LMConfig:
    parts = parse_variant(variant)
    base = asdict(config.base)
    train = {**base["train"], "lr": lr, "seed": seed, "warmup_steps": config.warmup}
    gate_bias = config.gate_bias if config.gate_bias is not None else depth_gate_bias(depth)
    return LMConfig(**{**base, "layers": depth, "norm": parts["norm"], "residual": parts["residual"],
                       "final_norm": parts["final_norm"], "mlp_hidden": mlp_hidden,
                       "gate_bias": round(gate_bias, 4) if parts["residual"] in GATED else base["gate_bias"],
                       "train": train})


def _matched_mlp_hidden(config: TransformerDepthConfig, depth: int, variant: str, vocab: list[str]) -> int | None:
    """The MLP width at which ``variant`` (a ``-matched-KIND`` one) has the parameters of ``NORM-KIND``."""
    parts = parse_variant(variant)
    if parts["matched"] is None:
        return None
    target = lm.count_parameters(lm.build_model(
        _run_config(config, depth, f"{parts['norm']}-{parts['matched']}", 1.0, 0, None), vocab, device="meta"))
    return lm.hidden_for_budget(_run_config(config, depth, variant, 1.0, 0, None), vocab, target, field="mlp_hidden")


@torch.no_grad()
def mean_gates(model: torch.nn.Module, corpus: Corpus, bptt: int, batch: int = 16) -> dict[str, list[float]]:
    """Each block's mean gate (``T`` highway, ``z`` GTrXL, ``t`` fixed, ``α`` ReZero, ``γ``
    LayerScale; 1 a plain sum) on the first validation window of ``batch`` streams, attention and MLP
    connections apart."""
    from ..analysis import gate_means
    from ..training.language_model import batchify

    window = batchify(corpus.valid, batch)[:bptt]
    model.eval()
    with gate_means(model) as means:
        model(window)
    return _by_part(means)


def _by_part(means: dict[str, float]) -> dict[str, list[float]]:
    """``{"attention": [...], "mlp": [...]}`` from gate means named ``...blocks.K.attn...``/``...mlp...``."""
    parts: dict[str, list[float]] = {"attention": [], "mlp": []}
    for name, value in means.items():  # (in module order: block by block)
        parts["attention" if ".attn." in name else "mlp"].append(value)
    return parts


def _best(search: dict[float, dict[str, Any]]) -> float:
    """The rate whose run ends with the lowest validation loss (a diverged run never wins)."""
    return min(sorted(search), key=lambda lr: finite_or_inf(search[lr]["final"]["val_loss"]))


def _beyond(search: dict[float, dict[str, Any]], grid: list[float], ratio: float, extend: int) -> float | None:
    """The rate one grid step beyond the edge where the search's pick sits, while fewer than ``extend``
    were added on that side; None where the pick is inside the grid (or that side is done)."""
    best, ordered = _best(search), sorted(search)
    if best == ordered[0] and sum(lr < grid[0] for lr in search) < extend:
        return float(f"{best / ratio:.2g}")
    if best == ordered[-1] and sum(lr > grid[-1] for lr in search) < extend:
        return float(f"{best * ratio:.2g}")
    return None


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its finished worker processes."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _grid_ratio(lrs: list[float]) -> float:
    ordered = sorted(lrs)
    return (ordered[-1] / ordered[0]) ** (1 / (len(ordered) - 1))


class _Runs:
    """Trains the study's runs (each with :func:`~highwaynet.training.run_dir.run_once`: a finished one
    skipped, a started one resumed): one after another in this process, or ``workers`` side by side,
    each in a process of its own on one CPU thread (a model this small gains little from a second
    thread, and two runs at once use two cores)."""

    def __init__(self, corpus: Corpus, workers: int, log, progress: bool) -> None:
        self.corpus, self.workers, self.log, self.progress = corpus, workers, log, progress
        self._pool: Any = None

    def train(self, jobs: list[tuple[LMConfig, Path, str]], phase: str, test: bool) -> list[dict[str, Any]]:
        """Each job's results (``(config, run folder, what it is)``), in the jobs' order; tested on the test
        split where ``test`` (the seeds), not (a search's runs: nothing is chosen on the test split)."""
        if not jobs:
            return []
        if self.workers == 1:
            sweep = SweepProgress([((c.layers, c.residual, c.mlp_hidden), c.layers, c.residual) for c, _, _ in jobs])
            return [cast(dict, run_once(run_dir, lambda resume, c=c, d=run_dir: lm.run(
                c, d, resume=resume, corpus=self.corpus, log=self.log, progress=self.progress, gate_means=True,
                write_sample=False, test=test),
                self.log, f"{phase}: {what}", config=c, progress=sweep, required=True)) for c, run_dir, what in jobs]
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_worker_start, initargs=(self.corpus, os.getpid()))
        order = sorted(range(len(jobs)), key=lambda k: -jobs[k][0].layers)  # (the longest first: the two end together)
        futures = {self._pool.submit(_worker_train, asdict(jobs[k][0]), str(jobs[k][1]), f"{phase}: {jobs[k][2]}",
                                     test): k for k in order}
        results: list[dict[str, Any]] = [{} for _ in jobs]
        start = time.perf_counter()
        for done, future in enumerate(as_completed(futures), 1):
            results[futures[future]] = future.result()
            self.log(f"{phase}: {done} of {len(jobs)} runs done ({(time.perf_counter() - start) / 60:.1f} min)")
        return results

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()


_CORPUS: Corpus | None = None  # (a worker process's copy of the corpus)
_PARENT = 0  # (the study's process, which a worker outlives never)


def _worker_start(corpus: Corpus, parent: int) -> None:
    global _CORPUS, _PARENT
    _CORPUS, _PARENT = corpus, parent
    torch.set_num_threads(1)
    if sys.platform.startswith("linux"):  # (the study killed, however: its workers go too, none trains on alone)
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    _exit_if_orphaned()


def _exit_if_orphaned() -> None:
    if os.getppid() != _PARENT:  # (the study died before this worker could ask to go with it)
        os._exit(1)


def _worker_train(config: dict[str, Any], run_dir: str, what: str, test: bool) -> dict[str, Any]:
    _exit_if_orphaned()
    cfg, folder = LMConfig(**config), Path(run_dir)
    return cast(dict, run_once(folder, lambda resume: lm.run(cfg, folder, resume=resume, corpus=_CORPUS, log=print,
                                                             progress=False, gate_means=True, write_sample=False,
                                                             test=test),
                               print, what, config=cfg, required=True))


def run(config: TransformerDepthConfig, out: str | Path, *, resume: bool = False, restart: bool = False,
        data_dir: str | Path | None = None, download: bool = False, log=print, progress: bool = True) -> dict[str, Any]:
    """Run the searches and the seeds into ``out``; write ``summary.json``, the figures and ``report.md``."""
    config = config.resolved()
    out, config = start_sweep(out, "transformer-depth", config, resume=resume, restart=restart, log=log)
    start, cpu_start = time.perf_counter(), _cpu_seconds()
    corpus = load_corpus(config.base.corpus, "char", data_dir, download=download)
    steps = config.base.train.epochs * (config.base.steps_per_epoch or 1)
    cells = [(depth, variant) for depth in config.depths for variant in config.variants]
    hidden = {(depth, variant): _matched_mlp_hidden(config, depth, variant, corpus.vocab) for depth, variant in cells}

    def job(depth: int, variant: str, lr: float, seed: int) -> tuple[LMConfig, Path, str]:
        return (_run_config(config, depth, variant, lr, seed, hidden[depth, variant]),
                out / f"depth{depth}" / variant / f"lr{lr:g}-seed{seed}", f"{depth} blocks, {variant}: lr {lr:g}, "
                                                                         f"seed {seed}")

    # (side by side only on the CPU: runs on one GPU would share it)
    workers = config.workers if pick_device(config.base.train.device).type == "cpu" else 1
    runs = _Runs(corpus, workers, log, progress)
    try:
        grid = sorted(config.lrs)
        jobs = [job(depth, variant, lr, config.search_seed) for depth, variant in cells for lr in grid]
        found = runs.train(jobs, "learning-rate search", test=False)
        search = {cell: {lr: found[k * len(grid) + i] for i, lr in enumerate(grid)} for k, cell in enumerate(cells)}
        ratio = _grid_ratio(grid)
        for _ in range(2 * config.extend):  # (the grid extended by its ratio where the pick is at an edge)
            more = {cell: lr for cell in cells if (lr := _beyond(search[cell], grid, ratio, config.extend)) is not None}
            if not more:
                break
            found = runs.train([job(*cell, lr, config.search_seed) for cell, lr in more.items()], "grid extended",
                               test=False)
            for (cell, lr), result in zip(more.items(), found, strict=True):
                search[cell][lr] = result
        best = {cell: _best(search[cell]) for cell in cells}
        found = runs.train([job(*cell, best[cell], seed) for cell in cells for seed in config.seeds], "seeds",
                           test=True)
    finally:
        runs.close()
    rows = []
    for k, (depth, variant) in enumerate(cells):
        tested = found[k * len(config.seeds):(k + 1) * len(config.seeds)]
        lr = best[depth, variant]
        run_dirs = [job(depth, variant, lr, seed)[1] for seed in config.seeds]
        init_model = lm.build_model(_run_config(config, depth, variant, lr, config.seeds[0], hidden[depth, variant]),
                                    corpus.vocab)
        rows.append({
            "depth": depth, "variant": variant, "label": label(variant), "lr": lr,
            "parameters": tested[0]["parameters"], "mlp_hidden": hidden[depth, variant],
            "gate_bias": job(depth, variant, lr, 0)[0].gate_bias if parse_variant(variant)["residual"] in GATED
            else None,
            "search": {f"{rate:g}": search[depth, variant][rate]["final"]["val_loss"]
                       for rate in sorted(search[depth, variant])},
            "extended": len(search[depth, variant]) - len(grid),
            "diverged": [not math.isfinite(r["final"]["val_loss"]) for r in tested],
            "test_loss": [r["test"]["loss"] for r in tested],
            "val_loss": [r["best_val"] for r in tested],
            "train_seconds": [r["train_seconds"] for r in tested],
            "curves": [[m["val_loss"] for m in read_metrics(d)] for d in run_dirs],
            "gates": _gates_over_training(init_model, corpus, config.base.bptt, run_dirs),
            "run_dirs": [str(d) for d in run_dirs],
        })
    summary = {"recipe": "transformer-depth", "config": asdict(config), "rows": rows,
               "steps_per_epoch": config.base.steps_per_epoch,
               "tokens_per_run": steps * config.base.batch_size * config.base.bptt,
               "unigram_nats": corpus.unigram_entropy_bits("test") * math.log(2),
               # (what a model has learned after its steps, against counts: which character follows which)
               "ngram_nats": {str(n): corpus.ngram_nats(n, "test") for n in (2, 3)
                              if len(corpus.vocab) ** n <= NGRAM_CELLS},  # (a table too large: left out)
               "seconds": round(time.perf_counter() - start, 1),
               "cpu_seconds": round(_cpu_seconds() - cpu_start, 1), "workers": workers,
               "threads": 1 if workers > 1 else torch.get_num_threads()}
    summary["contrasts"] = contrasts(summary)
    return finish_sweep(out, summary, write_report)


def _gates_over_training(model: torch.nn.Module, corpus: Corpus, bptt: int, run_dirs: list[Path]
                         ) -> dict[str, Any] | None:
    """Each block's mean gate at initialisation (the first seed's model) and after each epoch (the
    runs' recorded means, averaged over the seeds); None for a connection with nothing to record
    (a plain sum, DeepNorm's fixed sum)."""
    init = mean_gates(model, corpus, bptt)
    if all(v == 1.0 for part in init.values() for v in part):
        return None
    epochs: list[dict[str, list[list[float]]]] = []  # per epoch, per part: each seed's values by block
    for run_dir in run_dirs:
        for k, metrics in enumerate(read_metrics(run_dir)):
            means = _by_part({name[len("gate/"):]: v for name, v in metrics.items() if name.startswith("gate/")})
            if k == len(epochs):
                epochs.append({part: [] for part in means})
            for part, values in means.items():
                epochs[k][part].append(values)
    return {"init": init, "epochs": [{part: [statistics.fmean(column) for column in zip(*seeds, strict=True)]
                                      for part, seeds in epoch.items() if seeds} for epoch in epochs]}


# -- the statistics -----------------------------------------------------------------------------

def _finite(row: dict[str, Any]) -> dict[int, float]:
    """Each seed's test loss (by position in the seeds) where the run did not diverge."""
    return {i: v for i, (v, bad) in enumerate(zip(row["test_loss"], row["diverged"], strict=True))
            if not bad and math.isfinite(v)}


def _contrast(a: dict[str, Any], b: dict[str, Any], kind: str) -> dict[str, Any]:
    """``a`` − ``b`` in test loss, paired by seed over those both trained, with its interval and verdict (the
    stored keys: the interval's fields alone, not the seeds and differences)."""
    paired = paired_differences(_finite(a), _finite(b))
    interval = {k: paired[k] for k in ("mean", "lo", "hi", "n")}
    if interval["n"] < 2:
        verdict = "too few runs that trained to compare"
    elif interval["hi"] < 0 or interval["lo"] > 0:
        lower = a if interval["hi"] < 0 else b
        # (across depths the depth says which: the two may be the same variant)
        verdict = lower["variant"] + ("" if a["depth"] == b["depth"] else f" at {lower['depth']} blocks") + " lower"
    else:
        verdict = "no difference resolved"
    return {"kind": kind, "a": a["variant"], "a_depth": a["depth"], "b": b["variant"], "b_depth": b["depth"],
            **interval, "verdict": verdict}


def contrasts(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The pre-registered contrasts, each a paired difference of test losses (``a − b``, nats per
    character; negative: ``a`` better) over the seeds where both runs trained, with its 95%
    t-interval and a verdict from it. At each depth: the learned highway gate against the fixed
    gate and against the pre-LN model widened to its parameters; GTrXL against its widened model;
    ReZero with a final LayerNorm against ReZero without; every variant against pre-LN's plain
    sum. Across depths: every variant at each depth against the shallowest pre-LN model (does depth
    pay at all?); the verdict then names the depth ("pre-residual at 2 blocks lower")."""
    rows = {(r["depth"], r["variant"]): r for r in summary["rows"]}
    depths = summary["config"]["depths"]
    out = []
    for depth in depths:
        planned = [("pre-highway", "pre-fixed", "learned gate vs fixed gate"),
                   ("pre-highway", "pre-residual-matched-highway", "learned gate vs parameter-matched sum"),
                   ("pre-gtrxl", "pre-residual-matched-gtrxl", "GTrXL gate vs parameter-matched sum"),
                   ("none-rezero-final-norm", "none-rezero", "final LayerNorm added to ReZero")]
        planned += [(v, "pre-residual", "vs pre-LN sum") for v in summary["config"]["variants"] if v != "pre-residual"]
        for a, b, kind in planned:
            if (depth, a) in rows and (depth, b) in rows:
                out.append(_contrast(rows[depth, a], rows[depth, b], kind))
    shallow = min(depths)
    for depth in depths:
        if depth == shallow or (shallow, "pre-residual") not in rows:
            continue
        for variant in summary["config"]["variants"]:
            if (depth, variant) in rows:
                out.append(_contrast(rows[depth, variant], rows[shallow, "pre-residual"],
                                     f"vs pre-LN sum at {shallow} blocks"))
    return out


def test_loss_text(row: dict[str, Any]) -> str:
    """A row's test loss as the tables show it: ``2.567 ± 0.012``, with how many seeds trained where
    some did not."""
    return _mean_sd(row)


def contrast_text(c: dict[str, Any]) -> str:
    """A contrast in a line: ``pre-highway − pre-fixed +0.010 [−0.020, +0.040] nats: no difference resolved``."""
    left = c["a"] if c["a_depth"] == c["b_depth"] else f"{c['a']} ({c['a_depth']} blocks)"
    right = c["b"] if c["a_depth"] == c["b_depth"] else f"{c['b']} ({c['b_depth']} blocks)"
    return f"{left} − {right} {_interval(c)} nats: {c['verdict']}"


def _mean_sd(row: dict[str, Any]) -> str:
    values = list(_finite(row).values())
    if not values:
        return "all diverged"
    text = f"{statistics.fmean(values):.3f}" + (f" ± {statistics.stdev(values):.3f}" if len(values) > 1 else "")
    return text + (f" ({len(values)} of {len(row['test_loss'])})" if len(values) < len(row["test_loss"]) else "")


def _interval(c: dict[str, Any]) -> str:
    if c["n"] < 2:
        return "–"
    return f"{c['mean']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}]"


#: A resolved contrast whose interval ends closer than this to 0 (nats) is marked as weak evidence.
_NEAR_ZERO = 0.01


def verdicts(summary: dict[str, Any]) -> list[str]:
    """The pre-registered contrasts whose 95% interval excludes 0, as sentences (the rest: one line
    saying how many resolved nothing); and the variants that failed to train (a seed diverged, or
    tested less than 0.1 nats better than the characters' frequencies)."""
    lines = []
    unigram = summary["unigram_nats"]
    for row in summary["rows"]:
        finite = list(_finite(row).values())
        diverged, flat = len(row["test_loss"]) - len(finite), sum(v > unigram - 0.1 for v in finite)
        if diverged or flat:
            lines.append(f"{row['depth']} blocks, {row['variant']}: did not train on {diverged + flat} of "
                         f"{len(row['test_loss'])} seeds ({diverged} diverged, {flat} tested less than 0.1 nats "
                         f"better than the characters' frequencies, {unigram:.3f})")
    resolved = [c for c in summary.get("contrasts", []) if c["verdict"].endswith("lower")]
    for c in resolved:
        edge = (f" (its interval ends within {_NEAR_ZERO} nats of 0: weak evidence)"
                if min(abs(c["lo"]), abs(c["hi"])) < _NEAR_ZERO else "")
        if c["a_depth"] == c["b_depth"]:
            lines.append(f"{c['a_depth']} blocks: {c['a']} − {c['b']} = {_interval(c)} nats ({c['kind']}): "
                         f"{c['verdict']}{edge}")
        else:
            lines.append(f"{c['a_depth']} blocks against {c['b_depth']}: {c['a']} at {c['a_depth']} blocks − {c['b']} "
                         f"at {c['b_depth']} blocks = {_interval(c)} nats (does depth pay?): {c['verdict']}{edge}")
    unresolved = len(summary.get("contrasts", [])) - len(resolved)
    lines.append(f"{unresolved} of {len(summary.get('contrasts', []))} contrasts resolved no difference")
    return lines


# -- the report ---------------------------------------------------------------------------------

# (twelve colours no two alike; a matched baseline dashed in the colour of the model it matches)
_COLOURS = {"post-residual": "C0", "pre-residual": "C2", "pre-highway": "C1", "pre-gtrxl": "C3", "none-rezero": "C4",
            "pre-fixed": "C5", "pre-layerscale": "C6", "pre-rezero": "C7", "none-rezero-final-norm": "C8",
            "post-deepnorm": "C9", "pre-residual-matched-highway": "C1", "pre-residual-matched-gtrxl": "C3"}


def write_report(out: Path, summary: dict[str, Any]) -> Path:
    """``depth.png`` (validation loss against steps, one panel per depth, mean over the seeds),
    ``gates.png`` (each gated or scaled variant's mean gate per block, at initialisation and after
    each epoch, at the deepest depth) and ``report.md`` (the tables, the contrasts and the verdicts)."""
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    config, rows = summary["config"], summary["rows"]
    depths, per_epoch = config["depths"], summary["steps_per_epoch"] or 1
    columns = min(2, len(depths))  # (panels two a row: each legible at the page's width)
    rows_of_panels = -(-len(depths) // columns)
    fig, axes = subplots(rows_of_panels, columns, figsize=(FIGURE_WIDTH, 3.2 * rows_of_panels), squeeze=False,
                         sharey=True)
    panels = list(axes.flat)
    for ax in panels[len(depths):]:
        ax.axis("off")
    for ax, depth in zip(panels, depths, strict=False):
        for row in (r for r in rows if r["depth"] == depth):
            width = max(map(len, row["curves"]))
            curves = np.array([c + [math.nan] * (width - len(c)) for c in row["curves"]])
            steps = per_epoch * np.arange(1, curves.shape[1] + 1)
            mean = np.nanmean(curves, axis=0) if np.isfinite(curves).any() else curves[0]
            ax.plot(steps, mean, color=_COLOURS.get(row["variant"]), lw=1.2, label=row["variant"],
                    ls="--" if parse_variant(row["variant"])["matched"] else "-")
        ax.axhline(summary["unigram_nats"], color="gray", ls=":", lw=1, label="characters' frequencies")
        for n, style in (("2", "-."), ("3", (0, (1, 3)))):
            if n in summary.get("ngram_nats", {}):
                ax.axhline(summary["ngram_nats"][n]["nats"], color="black", ls=style, lw=0.8,
                           label={"2": "bigram counts", "3": "trigram counts"}[n] + " (test)")
        ax.set(title=f"{depth} blocks", xlabel="step")
        whole_numbers(ax.xaxis)
        ax.grid(alpha=0.3)
    handles, labels = panels[0].get_legend_handles_labels()
    if len(panels) > len(depths):  # (the legend in the empty panel, off the curves)
        panels[-1].legend(handles, labels, loc="center", fontsize="small", frameon=False)
    else:
        fig.legend(handles, labels, loc="lower center", ncol=3, fontsize="small", bbox_to_anchor=(0.5, -0.02 - 0.05
                                                                                                   * len(labels) / 3))
    for row_axes in axes:
        row_axes[0].set_ylabel("validation loss (nats/char)")
    fig.suptitle("Causal Transformers on Tiny Shakespeare (characters), by residual connection", y=1.0)
    save_figure(fig, out / "depth.png")

    deepest = max(depths)
    gated = [r for r in rows if r["depth"] == deepest and r.get("gates")]
    figures = ["![validation loss against steps, mean over the seeds](depth.png)", ""]
    if gated:
        # (two variants a line, each as two panels: its attention and its MLP connections)
        lines = -(-len(gated) // 2)
        fig, axes = subplots(lines, 4, figsize=(FIGURE_WIDTH, 2.3 * lines), squeeze=False, sharex=True)
        for k, row in enumerate(gated):
            epochs = row["gates"]["epochs"]
            for j, part in enumerate(("attention", "mlp")):
                ax = axes[k // 2][2 * (k % 2) + j]
                blocks = range(1, len(row["gates"]["init"][part]) + 1)
                ax.plot(blocks, row["gates"]["init"][part], color="gray", ls=":", lw=1, label="at initialisation")
                for e, epoch in enumerate(epochs):
                    ax.plot(blocks, epoch[part], color=(0.1, 0.3, 0.8, 0.25 + 0.75 * (e + 1) / len(epochs)),
                            lw=0.8, label="after the last epoch" if e == len(epochs) - 1 else None)
                ax.set_title(f"{row['variant']}\n{part}", fontsize="small")
                ax.xaxis.set_major_locator(MaxNLocator(4, integer=True))
                ax.yaxis.set_major_locator(MaxNLocator(4))
                ax.grid(alpha=0.3)
        for k, ax in enumerate(axes.flat):
            if k >= 2 * len(gated):
                ax.axis("off")
            elif k + 4 >= 2 * len(gated):  # (the lowest panel of its column: its blocks labelled)
                ax.tick_params(labelbottom=True)
                ax.set_xlabel("block")
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper center", ncol=2, fontsize="small", bbox_to_anchor=(0.5, 1.04))
        fig.tight_layout()
        save_figure(fig, out / "gates.png")
        figures += [f"Each block's mean gate on a validation window, at {deepest} blocks (highway: T; GTrXL: z; fixed: "
                    f"t; ReZero/SkipInit: α; LayerScale: mean γ): dotted at initialisation, then after each epoch "
                    f"(darker later), the mean over the seeds:", "", "![mean gate per block](gates.png)", ""]
    base, train = config["base"], config["base"]["train"]
    seeds = config["seeds"]
    by_depth = {(c["a"], c["a_depth"]): c for c in summary["contrasts"] if c["kind"] == "vs pre-LN sum"}
    table = markdown_table(
        ["blocks", "variant", "parameters", "lr", "test loss (nats/char)", "− pre-LN sum, 95% interval", "verdict"],
        [[r["depth"], r["variant"], f"{r['parameters']:,}", f"{r['lr']:g}", _mean_sd(r),
          _interval(by_depth[r["variant"], r["depth"]]) if (r["variant"], r["depth"]) in by_depth else "",
          by_depth[r["variant"], r["depth"]]["verdict"] if (r["variant"], r["depth"]) in by_depth else ""]
         for r in rows])
    planned = markdown_table(
        ["contrast", "a", "b", "blocks", "a − b, 95% interval (nats)", "pairs", "verdict"],
        [[c["kind"], c["a"], c["b"], c["a_depth"] if c["a_depth"] == c["b_depth"] else f"{c['a_depth']} vs "
          f"{c['b_depth']}", _interval(c), c["n"], c["verdict"]] for c in summary["contrasts"]
         if c["kind"] != "vs pre-LN sum"])
    search = markdown_table(["blocks", "variant", "search: final validation loss by lr (search seed)"],
                            [[r["depth"], r["variant"], ", ".join(f"{lr}: {v:.3f}" for lr, v in r["search"].items())
                              + (f" (grid extended {r['extended']}×)" if r["extended"] else "")] for r in rows])
    gates = markdown_table(
        ["blocks", "variant", "gate at initialisation (mean over blocks)", "after training: mean [min, max] over "
         "blocks"],
        [[r["depth"], r["variant"], f"{_mean(r['gates']['init']):.4g}",
          _spread(r["gates"]["epochs"][-1]) if r["gates"]["epochs"] else "–"] for r in rows if r.get("gates")])
    steps = train["epochs"] * per_epoch
    report = out / "report.md"
    write_text(report, "\n".join([
        "# The residual family in deep Transformers: controls, parameter-matched baselines, the test split", "",
        *findings(verdicts(summary)),
        f"Character-level causal Transformers on {base['corpus']}: width {base['hidden']}, {base['heads']} heads, "
        f"context {base['bptt']}, batch {base['batch_size']}, {steps} steps of {train['optimizer']} "
        f"({summary['tokens_per_run']:,} training tokens a run; {train['schedule']} rate, β2 {train['beta2']}, "
        f"weight decay {train['weight_decay']} on {train['weight_decay_on']}, gradient norm clipped at "
        f"{train['grad_clip']}, " + (f"{config['warmup']} warm-up steps" if config["warmup"] else "no warm-up") +
        f", dropout {base['output_dropout']}). The learning rate of each depth and variant is the one of "
        f"{config['lrs']} (extended by the grid's ratio at an edge) whose run with seed {config['search_seed']} ends "
        f"with the lowest final validation loss; seeds {seeds} then train at it, and each one's weights at the best "
        f"of its {train['epochs']} validations are tested on the whole test split. " + _validation_text(base) +
        " Gated connections' bias: "
        + ("by depth, (1 − σ(b))^(2·blocks) = 1/2, which fixes the branches' and the embeddings' relative weights "
           "at initialisation (the final LayerNorm rescales their sum) (" + ", ".join(
            f"{depth_gate_bias(d):.2f} at {d} blocks" for d in depths) + ")" if config["gate_bias"] is None
           else f"{config['gate_bias']}") +
        f". Test loss: mean ± standard deviation over the seeds that did not diverge; the characters' frequencies "
        f"alone give {summary['unigram_nats']:.3f} nats (dotted line)" + _ngram_text(summary) +
        ". Intervals: paired differences over the seeds, "
        f"95% Student-t, not corrected for the number of contrasts: of {len(summary['contrasts'])} contrasts at 95% "
        f"each, about {0.05 * len(summary['contrasts']):.1f} would exclude 0 by chance alone where nothing differs. "
        f"Study time {summary['seconds'] / 60:.0f} min wall, "
        f"{summary['cpu_seconds'] / 60:.0f} min CPU (" + (f"{summary['workers']} runs side by side, one CPU thread each"
                                                          if summary["workers"] > 1 else
                                                          f"one run at a time, {summary['threads']} threads") +
        "; this session's: a study run again in parts counts the last part).", "", *figures,
        "## Test loss by depth and variant", "", table, "",
        "## The pre-registered contrasts", "", planned, "",
        "## The gates and scales over training", "", gates, "",
        "## The learning-rate search", "", search, ""]))
    return report


def _ngram_text(summary: dict[str, Any]) -> str:
    """The n-gram references, where the summary has them (0.4.0 studies stored before had none)."""
    grams = summary.get("ngram_nats") or {}
    if "2" not in grams:
        return ""
    trigram = f" and a trigram model {grams['3']['nats']:.3f}" if "3" in grams else ""
    return ("; counted on the training split, add-k smoothed with k chosen on validation, a bigram model gives "
            f"{grams['2']['nats']:.3f} nats on the test split{trigram} (black dash-dotted and dotted lines): a "
            f"model above the bigram's loss has not yet learned which character follows which")


def _validation_text(base: dict[str, Any]) -> str:
    """What a validation reads: the whole split, or (``eval_windows``) the first windows of each of its streams."""
    if not base.get("eval_windows"):
        return "Each validation reads the whole validation split."
    windows, streams = base["eval_windows"], base["eval_batch_size"]
    return (f"Each validation reads {windows * base['bptt'] * streams:,} of the validation split's characters: the "
            f"first {windows * base['bptt']} of each of its {streams} streams (eval_windows={windows}).")


def _mean(parts: dict[str, list[float]]) -> float:
    values = [v for part in parts.values() for v in part]
    return statistics.fmean(values) if values else math.nan


def _spread(parts: dict[str, list[float]]) -> str:
    values = [v for part in parts.values() for v in part]
    return f"{statistics.fmean(values):.4g} [{min(values):.4g}, {max(values):.4g}]" if values else "–"
