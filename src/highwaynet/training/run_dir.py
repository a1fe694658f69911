"""The run folder: what a run was (``config.json``), alongside what it did (metrics, checkpoints).

A run folder has one writer: :func:`open_run` (and the Trainer) hold an exclusive lock on its
``.lock`` file while they write (an OS lock, ``fcntl.flock``, which the OS releases when the process
dies however it dies), and a second process is told who holds it. Every state an interruption can
leave has a way forward: a folder killed before its first checkpoint starts over, stray temporary
files are removed, and the checkpoint before the last is kept (``checkpoint.prev.pt``) for a last
one that was damaged.
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

try:  # the run-folder lock: POSIX only (elsewhere a folder is not locked)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

import numpy as np
import torch

from .distributed import barrier, is_main_process

__all__ = ["RUN_FILES", "RunFolderBusy", "SweepProgress", "cpu_model", "environment", "finished_an_epoch",
           "finish_sweep", "flat_settings", "hold_run_dir", "load_best_weights", "load_run_config", "format_mean_std",
           "mean_std", "open_run", "prepare_run_dir", "run_once", "settings_differ", "start_sweep", "write_text"]

#: What a run writes in its folder (a fresh start or ``--restart`` removes these, and nothing else).
RUN_FILES = ("config.json", "metrics.jsonl", "checkpoint.pt", "checkpoint.prev.pt", "model.pt", "results.json",
             "vocab.json", "report.md", "report.html", "curves.png")


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
    """Whether a run in ``run_dir`` has something to lose: a checkpoint (an epoch finished and saved)
    or its results. A folder without either (a run killed before its first checkpoint) holds
    nothing a new run or ``--resume`` could go on from: either starts it over."""
    return any((Path(run_dir) / f).exists() for f in ("checkpoint.pt", "checkpoint.prev.pt", "results.json"))


class RunFolderBusy(FileExistsError):
    """Another process is writing the run folder (it holds the folder's lock)."""


# Locks this process holds, by resolved folder: [the lock file's descriptor, how many holders inside]
_held: dict[Path, list[int]] = {}


@contextmanager
def hold_run_dir(run_dir: str | Path | None) -> Iterator[None]:
    """Hold the run folder's lock while the block runs: its one writer. Re-entrant within a process
    (a recipe holds it, and its Trainer again); under torchrun rank 0 alone holds it (it alone
    writes). A second process gets :class:`RunFolderBusy`, naming the holder's process and host.
    The OS releases the lock when the holder dies, however it dies."""
    if run_dir is None or fcntl is None or not is_main_process():
        yield
        return
    folder = Path(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    key = folder.resolve()
    if key in _held:
        _held[key][1] += 1
        try:
            yield
        finally:
            _held[key][1] -= 1
        return
    path = folder / ".lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise RunFolderBusy(f"{folder} is being written by {holder} (it holds {path}): wait for that run to end, "
                            f"or pass another --out") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"process {os.getpid()} on {socket.gethostname()}\n".encode())
    _held[key] = [fd, 1]
    try:
        yield
    finally:
        del _held[key]
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def remove_stray_files(run_dir: str | Path) -> list[str]:
    """Remove the temporary files a killed writer can leave (``*.tmp``); returns their names. Call
    with the folder's lock held: then nobody is writing them."""
    stray = sorted(Path(run_dir).glob("*.tmp"))
    for path in stray:
        path.unlink(missing_ok=True)
    return [p.name for p in stray]


def _clear(run_dir: Path) -> None:
    """Remove what a run wrote (:data:`RUN_FILES`, its TensorBoard events), nothing else."""
    import shutil

    for name in RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)
    shutil.rmtree(run_dir / "tensorboard", ignore_errors=True)


def prepare_run_dir(run_dir: str | Path, recipe: str, config: dict[str, Any], resume: bool,
                    restart: bool = False) -> dict[str, Any]:
    """Create ``run_dir`` for a new run, or check it for a resumed one; returns the config to use.

    A new run refuses a folder that already holds a run (nothing is overwritten) unless ``restart``
    says to start it over, but not one whose run never saved a checkpoint (it holds nothing to lose:
    it is started over, as a sweep does). A resumed run takes the configuration saved in the folder,
    so that it continues exactly as it started. Take the folder's lock first (:func:`open_run`).
    """
    run_dir = Path(run_dir)
    if resume and restart:
        raise ValueError("--resume continues the run in a folder and --restart starts it over: pass one of them")
    if resume:
        saved = load_run_config(run_dir, recipe)["config"]
        if is_main_process():
            remove_stray_files(run_dir)
        return saved
    if not is_main_process():  # under torchrun, rank 0 alone writes the run folder
        return config
    if (run_dir / "config.json").exists() and finished_an_epoch(run_dir) and not restart:
        raise FileExistsError(f"{run_dir} already holds a run: resume it with --resume, start it over with "
                              f"--restart, or pass another --out")
    run_dir.mkdir(parents=True, exist_ok=True)
    _clear(run_dir)
    remove_stray_files(run_dir)
    record = {"recipe": recipe, "config": config, "environment": environment(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    write_text(run_dir / "config.json", json.dumps(record, indent=2) + "\n")
    return config


@contextmanager
def open_run(run_dir: str | Path, recipe: str, config: dict[str, Any], *, resume: bool = False,
             restart: bool = False) -> Iterator[dict[str, Any]]:
    """Hold ``run_dir``'s lock (:func:`hold_run_dir`) and prepare it (:func:`prepare_run_dir`) for the
    block, which gets the configuration to run: what a recipe's ``run`` does around its training."""
    with hold_run_dir(run_dir):
        yield prepare_run_dir(run_dir, recipe, config, resume, restart)


def write_text(path: str | Path, text: str) -> None:
    """Write a file of a run or a sweep folder in one step (a reader, or a kill, never meets half of
    it); under torchrun rank 0 alone writes, the others read."""
    if is_main_process():
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)


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
        write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")
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


def run_once(run_dir: Path, train: Train, log: Callable[[str], None], what: str, config: Any = None,
             progress: SweepProgress | None = None, required: bool = False) -> dict[str, Any] | None:
    """One run of a sweep: skipped when finished, resumed when it has a checkpoint, else started anew.

    ``train(resume=...)`` runs it into ``run_dir`` and returns its results (also in ``results.json``).
    A run that was started but never saved a checkpoint is started over. A finished or resumed run
    keeps the settings it was started with: given the ``config`` asked for, each setting where they
    differ is logged. A run another process is writing (a sweep split over several) is left to it:
    logged, and None returned, unless the sweep needs its result to go on (``required``: then
    :class:`RunFolderBusy` says so). ``progress`` counts the sweep's runs and says what is left.
    """
    done, resume = (run_dir / "results.json").is_file(), finished_an_epoch(run_dir)
    if config is not None and (done or resume):
        differ = settings_differ(load_run_config(run_dir)["config"], config)
        if differ:
            log(f"{run_dir}: keeps the settings it was trained with: " + ", ".join(differ))
    barrier()  # under torchrun every process has decided, from the same files, before rank 0 changes them
    if done:
        log(f"{run_dir}: done, skipped")
        if progress is not None:
            progress.finished(None)
        return json.loads((run_dir / "results.json").read_text())
    if progress is not None:
        log(progress.line())
    log(f"{run_dir}: {what}" + (" (resumed)" if resume else ""))
    start = time.perf_counter()
    try:
        results = train(resume=resume)
    except RunFolderBusy as busy:
        if required:
            raise RunFolderBusy(f"{busy}; this sweep needs its result to go on: run the sweep again with --resume "
                                f"once that process has finished") from None
        log(f"{run_dir}: skipped: {busy}")
        results = None
    if progress is not None:
        progress.finished(None if results is None else time.perf_counter() - start)
    return results


class SweepProgress:
    """A sweep's overall progress: runs done and left, and an estimate of the time left from the
    runs trained so far in this session (finished runs skipped on a resume do not count)."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.seconds, self.timed = total, 0, 0.0, 0

    def finished(self, seconds: float | None) -> None:
        """One more run done (``seconds`` it took to train, or None where it was skipped)."""
        self.done += 1
        if seconds is not None:
            self.seconds += seconds
            self.timed += 1

    def line(self) -> str:
        left = self.total - self.done
        eta = ""
        if self.timed:
            minutes = left * self.seconds / self.timed / 60
            eta = f"; about {minutes:.0f} min left" if minutes >= 1 else f"; about {60 * minutes:.0f} s left"
        return f"run {self.done + 1} of {self.total} ({self.done} done, {left} to go{eta})"


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
