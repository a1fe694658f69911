"""The run folder: what a run was (``config.json``), alongside what it did (metrics, checkpoints)."""

from __future__ import annotations

import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from .distributed import barrier, is_main_process

__all__ = ["cpu_model", "environment", "finished_an_epoch", "finish_sweep", "flat_settings", "load_best_weights",
           "load_run_config", "format_mean_std", "mean_std", "prepare_run_dir", "run_once", "settings_differ",
           "start_sweep", "write_text"]


def environment() -> dict[str, Any]:
    """Versions and machine, recorded in every run folder so that a result can be traced."""
    from .. import __version__

    return {
        "highwaynet": __version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def cpu_model() -> str:
    """The CPU's model name where Linux gives it, else its architecture. Results move with it: the
    same code and seed train to other figures (MKL takes other paths on AMD than on Intel), and the
    same kernels rank differently."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} CPU"


#: Where a run folder of each recipe comes from, for the error that asks for one.
_WRITTEN_BY = {"mlp": "'highwaynet train mlp --out DIR' writes DIR; a depth sweep, OUT/highway-50/seed0",
               "cnn": "'highwaynet train cnn --out DIR' writes DIR",
               "lm": "'highwaynet train lm --out DIR' writes DIR; an rhn-depth sweep, "
                     "OUT/tinyshakespeare-char/rhn-depth4",
               "sentences": "'highwaynet reproduce sentences --out OUT' writes OUT/sst2/hbilstm-L1/seed0 and the like"}


def load_run_config(run_dir: str | Path, recipe: str | None = None) -> dict[str, Any]:
    """The ``config.json`` of a run folder, with a clear error when the folder is not a run (or, given
    ``recipe``, not a run of that recipe)."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        written_by = _WRITTEN_BY.get(recipe or "", "'highwaynet train ... --out DIR' writes DIR")
        runs = _runs_inside(Path(run_dir), recipe)
        inside = f"; it holds {count(len(runs), 'run folder')}: {', '.join(runs[:4])}" + \
            (", ..." if len(runs) > 4 else "") if runs else ""
        raise FileNotFoundError(f"{run_dir} is not a run folder: it has no config.json ({written_by}){inside}")
    saved = json.loads(path.read_text())
    if recipe is not None and saved.get("recipe") != recipe:
        raise ValueError(f"{run_dir} holds a run of recipe {saved.get('recipe')!r}; this needs one of recipe "
                         f"{recipe!r} ({_WRITTEN_BY[recipe]})")
    return saved


def _runs_inside(folder: Path, recipe: str | None) -> list[str]:
    """The run folders (of ``recipe``, if given) one to three levels inside ``folder``, where a sweep
    keeps its runs (``OUT/sst2/hbilstm-L1/seed0``): named in the error for a sweep's folder given
    where one run was wanted."""
    runs = []
    for depth in range(1, 4):
        for path in sorted(folder.glob("/".join(["*"] * depth + ["config.json"]))):
            try:
                if recipe is None or json.loads(path.read_text()).get("recipe") == recipe:
                    runs.append(str(path.parent))
            except (OSError, ValueError, AttributeError):
                continue
    return runs


def finished_an_epoch(run_dir: str | Path) -> bool:
    """Whether a run in ``run_dir`` has saved anything: what a run writes once its first epoch has
    finished (a folder without it holds nothing to lose, and a new run may start over it)."""
    return any((Path(run_dir) / f).exists() for f in ("metrics.jsonl", "checkpoint.pt", "results.json"))


def prepare_run_dir(run_dir: str | Path, recipe: str, config: dict[str, Any], resume: bool) -> dict[str, Any]:
    """Create ``run_dir`` for a new run, or check it for a resumed one; returns the config to use.

    A new run refuses a folder that already holds a run (nothing is overwritten), but not one whose
    run never finished an epoch (it saved nothing to lose: it is started over, as a sweep does). A
    resumed run takes the configuration saved in the folder, so that it continues exactly as it started.
    """
    run_dir = Path(run_dir)
    if resume:
        return load_run_config(run_dir, recipe)["config"]
    if not is_main_process():  # under torchrun, rank 0 alone writes the run folder
        return config
    if (run_dir / "config.json").exists() and finished_an_epoch(run_dir):
        raise FileExistsError(f"{run_dir} already holds a run: resume it with --resume, or pass "
                              f"another --out")
    run_dir.mkdir(parents=True, exist_ok=True)
    record = {"recipe": recipe, "config": config, "environment": environment(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    (run_dir / "config.json").write_text(json.dumps(record, indent=2) + "\n")
    return config


def write_text(path: str | Path, text: str) -> None:
    """Write a file of a run or a sweep folder; under torchrun rank 0 alone writes, the others read."""
    if is_main_process():
        Path(path).write_text(text)


def start_sweep(out: str | Path, resume: bool) -> Path:
    """Create a sweep's folder; refuse one that already holds results unless resuming.

    Under torchrun every process runs the sweep, each run data-parallel over all of them: every
    process looks at the folder before rank 0 writes to it, so that all decide alike.
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not resume:
        raise FileExistsError(f"{out} already holds a sweep: continue it with --resume, or pass another --out")
    barrier()
    if is_main_process():
        out.mkdir(parents=True, exist_ok=True)
    return out


def finish_sweep(out: Path, summary: dict[str, Any], write_report: Callable[[Path, dict[str, Any]], Any]
                 ) -> dict[str, Any]:
    """Write a sweep's ``summary.json`` and its report (rank 0 alone under torchrun); returns ``summary``."""
    if is_main_process():
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        write_report(out, summary)
    return summary


def flat_settings(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested configuration as one level, nested keys joined by dots (``train.lr``)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        flat.update(flat_settings(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key: value})
    return flat


def settings_differ(saved: dict[str, Any], asked: Any) -> list[str]:
    """``"key saved (asked value)"`` for each setting, other than the device, where a run folder's
    saved configuration differs from ``asked``, the configuration (a dataclass) asked for; compared
    as JSON stores them. A setting newer than the folder's run is missing from it: the resumed run
    is built from the saved one as ``type(asked)(**saved)``, which gives it its default, and it is
    named when something else is asked for."""
    def flat(config: Any) -> dict[str, Any]:
        return flat_settings(json.loads(json.dumps(asdict(config))))

    stored = flat_settings(saved)
    try:
        resumed = flat(type(asked)(**saved))
    except TypeError:  # a saved setting the class no longer has: compare what the folder holds
        resumed = stored
    differ = []
    for key, value in flat(asked).items():
        if key in resumed and resumed[key] != value and key.rsplit(".", 1)[-1] != "device":
            newer = "" if key in stored else ", the default, as the run predates the setting"
            differ.append(f"{key} {resumed[key]!r}{newer} (asked {value!r})")
    return differ


class Train(Protocol):
    """What :func:`run_once` runs: one training into its folder, started anew or resumed."""

    def __call__(self, *, resume: bool) -> dict[str, Any]: ...


def run_once(run_dir: Path, train: Train, log: Callable[[str], None],
             what: str, config: Any = None) -> dict[str, Any]:
    """One run of a sweep: skipped when finished, resumed when it has a checkpoint, else started anew.

    ``train(resume=...)`` runs it into ``run_dir`` and returns its results (also in ``results.json``).
    A run that was started but never finished an epoch is started over. A finished or resumed run
    keeps the settings it was started with: given the ``config`` asked for, each setting where they
    differ is logged.
    """
    done, resume = (run_dir / "results.json").is_file(), (run_dir / "checkpoint.pt").is_file()
    if config is not None and (done or resume):
        differ = settings_differ(load_run_config(run_dir)["config"], config)
        if differ:
            log(f"{run_dir}: keeps the settings it was trained with: " + ", ".join(differ))
    barrier()  # under torchrun every process has decided, from the same files, before rank 0 changes them
    if done:
        log(f"{run_dir}: done, skipped")
        return json.loads((run_dir / "results.json").read_text())
    if is_main_process() and (run_dir / "config.json").is_file() and not resume:
        for f in run_dir.iterdir():
            f.unlink()
    log(f"{run_dir}: {what}" + (" (resumed)" if resume else ""))
    return train(resume=resume)


def load_best_weights(model: torch.nn.Module, run_dir: str | Path) -> torch.nn.Module:
    """Load a run folder's best weights (``model.pt``) into ``model``, onto the model's device."""
    path = Path(run_dir) / "model.pt"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: the run has not finished an epoch yet")
    device = next(model.parameters()).device
    model.load_state_dict(torch.load(path, map_location=device, weights_only=True))
    return model


def mean_std(values: list[float]) -> dict[str, float]:
    """Mean and sample standard deviation of a sweep's repeats; NaN (a diverged run) propagates,
    so that a table shows the divergence rather than hiding the run."""
    if any(math.isnan(v) for v in values):
        return {"mean": float("nan"), "std": float("nan")}
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0}


def count(n: int, noun: str) -> str:
    """``"1 run"``, ``"3 runs"``: ``n`` and ``noun``, plural (with an s) unless ``n`` is 1."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def format_mean_std(stats: dict[str, float], runs: int, digits: int = 1) -> str:
    """``"88.5 ± 0.8"`` for :func:`mean_std`'s ``stats`` over ``runs`` repeats; the mean alone for one
    run, whose spread is unknown rather than zero."""
    mean = f"{stats['mean']:.{digits}f}"
    return mean if runs < 2 else f"{mean} ± {stats['std']:.{digits}f}"
