"""The run folder: what a run was (``config.json``), alongside what it did (metrics, checkpoints).

A run folder has one writer: :func:`open_run` (and the Trainer) hold an exclusive lock on its
``.lock`` file while they write (an OS lock, ``fcntl.flock``, which the OS releases when the process
dies however it dies), and a second process is told who holds it. Every state an interruption can
leave has a way forward: a folder killed before its first checkpoint starts over, stray temporary
files are removed, and the checkpoint before the last is kept (``checkpoint.prev.pt``) for a last
one that was damaged. A run writes only into a folder that is new, empty or its own, and starting
one over removes only what it wrote (:mod:`highwaynet.training.files`).
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
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

try:  # the run-folder lock: POSIX only (elsewhere a folder is not locked)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

import numpy as np
import torch

from .._checks import check_path, parse_json
from .._files import NOFOLLOW
from ..config.train import device_of
from . import files
from .checkpoint import flat_settings, identity_in_folder
from .distributed import barrier, init_distributed, is_main_process
from .progress import SweepProgress

__all__ = ["RunFolderBusy", "RunPlan", "SettingsDiffer", "cpu_model", "environment", "finish_sweep",
           "finished_an_epoch", "finite_or_inf", "flat_settings", "format_mean_std", "hold_run_dir", "held_by",
           "look_again", "check_complete_summary",
           "load_best_weights", "load_run_config", "mean_std", "open_run", "paired_differences", "paired_interval",
           "plan_run", "prepare_run_dir", "read_json", "read_metrics", "read_results", "release_lock", "run_once",
           "saved_config", "settings_differ", "settings_named_by", "start_sweep", "t95", "take_lock", "write_text"]


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


def read_json(path: str | Path, what: str = "", optional: bool = False) -> Any:
    """A JSON file of highwaynet's, read as data; a message naming the file where it is missing, a link,
    or not JSON (damaged, or edited by hand). ``what`` says what the file is, for the message. With
    ``optional``, a file that is missing or a link gives None (a report shows what is there)."""
    path = check_path("path", path)
    data = files.read_regular(path.parent, path.name)
    if data is None:
        if optional:
            return None
        if path.is_symlink():
            raise files.LinkInFolder(f"{path} is a symbolic link: highwaynet reads only its own files, not a link "
                                     f"to a file elsewhere; put the file itself back")
        raise FileNotFoundError(f"{path} is missing" + (f" ({what})" if what else ""))
    try:
        return parse_json(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"{path} is not valid JSON ({error}): it was damaged or edited by hand; put back the "
                         f"file the run wrote, or start the run over with --restart") from None


def load_run_config(run_dir: str | Path, recipe: str | None = None) -> dict[str, Any]:
    """The ``config.json`` of a run folder, with a clear error when the folder is not a run (or, given
    ``recipe``, not a run of that recipe), or its file is not what a run writes (hand-edited)."""
    run_dir = check_path("run_dir", run_dir)
    path = run_dir / "config.json"
    if not path.is_file() and not path.is_symlink():
        written_by = _WRITTEN_BY.get(recipe or "", "'highwaynet train ... --out DIR' writes DIR")
        runs = _runs_inside(run_dir, recipe)
        inside = f"; it holds {count(len(runs), 'run folder')}: {', '.join(runs[:4])}" + \
            (", ..." if len(runs) > 4 else "") if runs else ""
        raise FileNotFoundError(f"{run_dir} is not a run folder: it has no config.json ({written_by}){inside}")
    saved = read_json(path)
    if not isinstance(saved, dict) or not isinstance(saved.get("config"), dict):
        raise ValueError(f"{path} is not a run's configuration (a JSON object with its recipe and a 'config' "
                         f"object): it was edited by hand; put back the file the run wrote, or start the run over "
                         f"with --restart")
    if recipe is not None and saved.get("recipe") != recipe:
        raise ValueError(f"{run_dir} holds a run of recipe {saved.get('recipe')!r}; this needs one of recipe "
                         f"{recipe!r} ({_WRITTEN_BY[recipe]})")
    return saved


C = TypeVar("C")


def saved_config(config_class: Callable[..., C], saved: dict[str, Any], run_dir: str | Path,
                 file: str = "config.json") -> C:
    """``config_class(**saved)``, the configuration a run folder holds (or a sweep folder, in ``file``); a
    message naming the file where a hand edit left a setting of the wrong type, an unknown one, or a value
    out of bounds."""
    run_dir = check_path("run_dir", run_dir)
    try:
        return config_class(**saved)
    except (TypeError, ValueError) as error:
        name = getattr(config_class, "__name__", "configuration")
        raise ValueError(f"{run_dir / file} does not hold a {name} ({error}): it was edited by hand; "
                         f"undo the edit, or start the run over with --restart") from None


def _runs_inside(folder: Path, recipe: str | None) -> list[str]:
    """The run folders (of ``recipe``, if given) one to three levels inside ``folder``, where a sweep
    keeps its runs (``OUT/sst2/hbilstm-L1/seed0``): named in the error for a sweep's folder given
    where one run was wanted."""
    runs = []
    for depth in range(1, 4):
        for path in sorted(folder.glob("/".join(["*"] * depth + ["config.json"]))):
            saved = read_json(path, optional=True) if not any(p.is_symlink() for p in path.parents) else None
            if isinstance(saved, dict) and (recipe is None or saved.get("recipe") == recipe):
                runs.append(str(path.parent))
    return runs


def finished_an_epoch(run_dir: str | Path) -> bool:
    """Whether a run in ``run_dir`` has something to lose: a checkpoint (an epoch finished and saved)
    or its results. A folder without either (a run killed before its first checkpoint) holds
    nothing a run could go on from: run again, it starts over."""
    run_dir = check_path("run_dir", run_dir)
    return any((run_dir / f).is_file() and not (run_dir / f).is_symlink()
               for f in ("checkpoint.pt", "checkpoint.prev.pt", "results.json"))


def read_metrics(run_dir: str | Path) -> list[dict[str, float]]:
    """The per-epoch metrics of a run folder, in order (a last line cut short by a kill is left out)."""
    path = check_path("run_dir", run_dir) / "metrics.jsonl"
    if path.is_symlink():
        raise files.LinkInFolder(f"{path} is a symbolic link: a run's metrics are read from its own file only; put "
                                 f"the file back, or start the run over with --restart")
    data = files.read_regular(path.parent, path.name)
    if data is None:
        return []
    lines = [line for line in data.decode("utf-8", errors="replace").splitlines() if line.strip()]
    metrics: list[dict[str, float]] = []
    for number, line in enumerate(lines, 1):
        try:
            found = parse_json(line)
        except ValueError:
            if number < len(lines):
                raise ValueError(f"{path}, line {number}: not a line of metrics ({line[:60]!r}): it was damaged or "
                                 f"edited; put back the file the run wrote, or start the run over with --restart"
                                 ) from None
            continue
        if not (isinstance(found, dict) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                for v in found.values())
                and isinstance(found.get("epoch"), int) and "time" in found and "lr" in found):
            raise ValueError(f"{path}, line {number}: not a line of metrics (an epoch's numbers: {line[:60]!r}): it "
                             f"was edited; put back the file the run wrote, or start the run over with --restart")
        # (a run writes the same metrics every epoch: a report's columns are the first line's)
        missing = [k for k in metrics[0] if k.startswith(("train_", "val_")) and k not in found] if metrics else []
        if missing:
            raise ValueError(f"{path}, line {number}: not a line of metrics (it lacks {', '.join(missing)}, which "
                             f"line 1 holds): it was edited; put back the file the run wrote, or start the run over "
                             f"with --restart")
        metrics.append(found)
    return metrics


#: What each recipe's results.json holds that the sweeps read, and of which kind (``number``: int or float).
_RESULTS: dict[str, dict[str, Any]] = {"mlp": {"final": dict, "test": dict, "parameters": int},
            "cnn": {"final": dict, "test": dict, "parameters": int},
            # (a study's runs: a search's run is not tested, and none writes a sample; None where left out)
            "lm": {"final": dict, "test": (dict, type(None)), "parameters": int, "best_val": "number",
                   "train_seconds": "number", "epochs": int, "sample": (str, type(None))},
            "sentences": {"test": dict, "parameters": int, "best_val_acc": "number"}}


def read_results(run_dir: str | Path) -> dict[str, Any] | None:
    """A finished run's ``results.json``, read as data and checked (a regular file in the folder, not a
    link; a JSON object holding what its recipe writes); None where the run has none, or where the file
    is not that (edited or damaged: the run then goes on, and writes it again)."""
    run_dir = check_path("run_dir", run_dir)
    data = files.read_regular(run_dir, "results.json")
    try:
        results = parse_json(data.decode("utf-8")) if data is not None else None
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(results, dict):
        return None
    config = read_json(run_dir / "config.json", optional=True) if (run_dir / "config.json").is_file() else None
    recipe = config.get("recipe") if isinstance(config, dict) else None
    for key, kind in _RESULTS.get(str(recipe), {"test": dict}).items():
        value = results.get(key)
        fits = isinstance(value, (int, float)) if kind == "number" else isinstance(value, kind)  # type: ignore[arg-type]
        if not fits or isinstance(value, bool):
            return None
    settings = config.get("config") if isinstance(config, dict) else None
    for key, needed in _metrics_needed(str(recipe), settings).items():
        value = results.get(key)
        if isinstance(value, dict) and not (all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                for v in value.values()) and set(needed) <= set(value)):
            return None
    return results


def _metrics_needed(recipe: str, settings: Any) -> dict[str, tuple[str, ...]]:
    """The numbers a recipe's ``results.json`` holds in its ``final`` and ``test`` entries that the studies
    read back (a language model's ``bpc`` or ``ppl`` by its level)."""
    if recipe in ("mlp", "cnn"):
        return {"final": ("train_loss", "val_loss"), "test": ("loss", "acc")}
    if recipe == "sentences":
        return {"test": ("loss", "acc")}
    if recipe == "lm":
        level = settings.get("level") if isinstance(settings, dict) else None
        key = {"char": "bpc", "word": "ppl"}.get(str(level))
        return {"final": ("train_loss", "val_loss", *((f"val_{key}",) if key else ())),
                "test": ("loss", *((key,) if key else ()))}
    return {}



class RunFolderBusy(FileExistsError):
    """Another process is writing the run folder (it holds the folder's lock): ``holder``, who
    ("process 123 on host"), as its lock file names it."""

    def __init__(self, message: str, holder: str = "another process") -> None:
        super().__init__(message)
        self.holder = holder


# Locks this process holds, by resolved folder: [the lock file's descriptor, how many holders inside]
_held: dict[Path, list[int]] = {}


@contextmanager
def hold_run_dir(run_dir: str | Path | None, kind: str = "run", what: str = "",
                 log: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the folder's lock while the block runs: its one writer. Re-entrant within a process
    (a recipe holds it, and its Trainer again); under torchrun rank 0 alone holds it (it alone
    writes). The folder is made highwaynet's first (:func:`~highwaynet.training.files.claim`, as a
    ``kind`` folder; ``what`` names the writer in its messages): one holding anything else is refused.
    A second process gets :class:`RunFolderBusy`, naming the holder's process and host. The OS
    releases the lock when the holder dies, however it dies. A run folder whose marker was lost or
    damaged gets back the identity its checkpoint carries (one line on ``log`` says so)."""
    if run_dir is None or not is_main_process():
        yield
        return
    folder = check_path("run_dir", run_dir)
    files.check_claimable(folder, kind, what)  # (before the lock file: nothing is written into another's folder)
    files.make_dirs(folder)
    identity = identity_in_folder if kind == "run" else None
    key = folder.resolve()
    if key in _held:
        _held[key][1] += 1
        try:
            yield
        finally:
            _held[key][1] -= 1
        return
    if fcntl is None:  # pragma: no cover - Windows: no lock
        files.claim(folder, kind, what, identity=identity, log=log)
        yield
        return
    path = folder / ".lock"
    fd = cast(int, take_lock(path, lambda holder: RunFolderBusy(
        f"{folder} is being written by {holder} (it holds {path}): wait for that run to end, or pass another --out",
        holder)))
    _held[key] = [fd, 1]
    try:
        files.claim(folder, kind, what, identity=identity, log=log)
        yield
    finally:
        del _held[key]
        release_lock(fd)


def take_lock(path: Path, busy: Callable[[str], Exception]) -> int | None:
    """Lock the file ``path`` (made where missing, never through a link) for this process alone, and write
    who holds it there; its descriptor, for :func:`release_lock` (None where the OS has no such lock:
    Windows). Held by another process, ``busy(holder)`` is raised (``holder``: "process 123 on host"). The
    OS releases the lock when the process dies."""
    if fcntl is None:  # pragma: no cover - Windows: no lock
        return None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o644)
    except OSError:
        if path.is_symlink():
            raise files.LinkInFolder(f"{path} is a symbolic link: highwaynet keeps its own lock file there and does "
                                     f"not write through a link; remove the link and run again") from None
        raise
    holder = _lock_or_holder(fd, fcntl.LOCK_EX)
    if holder is not None:
        os.close(fd)
        raise busy(holder)
    os.ftruncate(fd, 0)
    os.write(fd, f"process {os.getpid()} on {socket.gethostname()}\n".encode())
    return fd


def _lock_or_holder(fd: int, kind: int) -> str | None:
    """Lock the lock file open on ``fd`` (``kind``: ``fcntl.LOCK_EX`` or ``LOCK_SH``) without waiting: None
    once this process holds it; where another process holds it, who ("process 123 on host", as
    :func:`take_lock` wrote it there; "another process" where it has written nothing yet). The one reader
    of a lock's holder, for :func:`take_lock` and :func:`held_by`."""
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.read(fd, 200).decode(errors="replace").strip() or "another process"
    return None


def release_lock(fd: int | None) -> None:
    """Release a lock :func:`take_lock` took."""
    if fd is None:  # pragma: no cover - Windows: no lock
        return
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


@dataclass
class RunPlan:
    """What a command does with a run folder (:func:`plan_run`).

    Attributes:
        action: ``"new"`` (a new folder, or one whose run never saved an epoch: nothing to lose),
            ``"restart"`` (``--restart``), ``"go on"`` (the folder holds this run: the same settings)
            or ``"resume"`` (``--resume``: the run goes on with its own settings, whatever was asked).
        config: the configuration the run trains with (a dictionary, as ``config.json`` holds it).
        held: whether the folder held a run that had saved an epoch.
        finished: whether that run had finished (its results written).
        not_applied: for ``"resume"``, the settings asked that the run does not take.
    """

    action: str
    config: dict[str, Any]
    held: bool = False
    finished: bool = False
    not_applied: list[str] = field(default_factory=list)


# How the messages of a folder's settings (a run or study with other settings refused, the settings --resume does
# not apply) name each setting: by the option that sets it while a command runs (settings_named_by), as the user
# typed it; by its path in the configuration (`train.lr`) for a caller in Python.
_SETTING_NAMES: ContextVar[Mapping[str, str] | None] = ContextVar("setting_names", default=None)


@contextmanager
def settings_named_by(options: Mapping[str, str]) -> Iterator[None]:
    """While the block runs, name the settings in the messages about a folder's settings (:class:`SettingsDiffer`,
    the settings ``--resume`` does not apply) by ``options``, each setting's path in the configuration to the
    command-line option that sets it (``{"train.lr": "--lr"}``, :attr:`ConfigOptions.flags
    <highwaynet.config.options.ConfigOptions>`): the command line's, so that they say what the user typed."""
    token = _SETTING_NAMES.set(options)
    try:
        yield
    finally:
        _SETTING_NAMES.reset(token)


def _setting_name(key: str, names: Mapping[str, str] | None = None) -> str:
    return ((_SETTING_NAMES.get() if names is None else names) or {}).get(key, key)


class SettingsDiffer(FileExistsError):
    """A folder holds a run (or a study) with other settings than those asked: refused, naming each
    difference and the two ways on (``--restart``, another ``--out``). ``differences`` holds
    ``(setting, in the folder, asked)``; the message names the settings by their options under
    :func:`settings_named_by` (the command line's), :meth:`describe` by those given."""

    def __init__(self, folder: Path, what: str, differences: list[tuple[str, Any, Any]]) -> None:
        self.folder, self.what, self.differences = folder, what, differences
        super().__init__(self.describe())

    def describe(self, flags: Mapping[str, str] | None = None) -> str:
        shown = "; ".join(f"{_setting_name(key, flags)} {saved!r} there, {asked!r} asked"
                          for key, saved, asked in self.differences)
        removed = "what the run wrote there is removed" if self.what == "run" else "the runs it holds are removed"
        return (f"{self.folder} holds a {self.what} with other settings ({shown}). To train the settings asked, "
                f"start it over with --restart ({removed}) or pass another --out; to go on with the {self.what} "
                f"there, run the command with its settings (or add --resume, which takes them from the folder)")


def _asked_dict(config: Any) -> dict[str, Any]:
    return json.loads(json.dumps(asdict(config) if is_dataclass(config) and not isinstance(config, type) else config))


def plan_run(run_dir: str | Path, recipe: str, asked: Any, *, resume: bool = False,
             restart: bool = False) -> RunPlan:
    """What a command asking for ``asked`` (a recipe's configuration) does with ``run_dir``, changing
    nothing: a run folder run again goes on. A folder holding this run (the same settings, but for the
    device) goes on with it, a finished run trained no further; with ``resume`` it goes on with the
    settings it was started with, whatever was asked; with ``restart`` it is started over; a folder
    whose run never saved an epoch is started anew (it holds nothing to lose).

    Raises:
        SettingsDiffer: the folder holds a run with other settings (and neither ``resume`` nor ``restart``).
        FileNotFoundError: ``resume`` of a folder that holds no run.
    """
    run_dir = check_path("run_dir", run_dir)
    if resume and restart:
        raise ValueError("--resume goes on with the run in a folder and --restart starts it over: pass one of them")
    config = _asked_dict(asked)
    held = finished_an_epoch(run_dir) and ((run_dir / "config.json").exists() or (run_dir / "config.json").is_symlink())
    if resume:
        saved = load_run_config(run_dir, recipe)["config"]
        return RunPlan("resume", _device_asked(saved, config), held, held and read_results(run_dir) is not None,
                       settings_differ(saved, asked))
    if restart or not held:
        return RunPlan("restart" if restart else "new", config, held)
    saved = load_run_config(run_dir, recipe)["config"]
    differences = _differences(saved, asked)
    if differences:
        raise SettingsDiffer(run_dir, "run", [(key, old, new) for key, old, new, _ in differences])
    return RunPlan("go on", _device_asked(saved, config), True, read_results(run_dir) is not None)


def prepare_run_dir(run_dir: str | Path, recipe: str, config: Any, resume: bool = False,
                    restart: bool = False) -> dict[str, Any]:
    """Create ``run_dir`` for a new run, or check it for one that goes on (:func:`plan_run`); returns
    the config to use (a dictionary, as ``config.json`` holds it).

    A run that goes on takes the configuration saved in the folder, so that it continues exactly as it
    started, but for the device asked now; one started anew or over removes what a run there wrote
    before (its own files only) and writes ``config.json``. Take the folder's lock first (:func:`open_run`).
    """
    run_dir = check_path("run_dir", run_dir)
    plan = plan_run(run_dir, recipe, config, resume=resume, restart=restart)
    if not is_main_process():  # under torchrun, rank 0 alone writes the run folder
        return plan.config
    files.remove_stray_files(run_dir)
    if plan.action in ("new", "restart"):
        files.clear(run_dir)  # what a run there wrote before (started over, or stopped before its first checkpoint)
        record = {"recipe": recipe, "config": plan.config, "environment": environment(),
                  "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        write_text(run_dir / "config.json", json.dumps(record, indent=2) + "\n")
    return plan.config


#: Settings of where a run computes, not of what: taken from what is asked when a folder goes on (the device;
#: a study's workers, the runs it trains side by side).
_PLACEMENT = ("device", "workers")


def _device_asked(saved: dict[str, Any], asked: dict[str, Any]) -> dict[str, Any]:
    """``saved`` with the device settings of ``asked``: a run resumes with the settings it was started
    with, except where it runs (a run started on a GPU goes on on the CPU, or the reverse; a study's
    runs trained two side by side or one after another)."""
    return {key: asked[key] if key in _PLACEMENT and isinstance(asked.get(key), (str, int)) else
            _device_asked(value, asked[key]) if isinstance(value, dict) and isinstance(asked.get(key), dict) else value
            for key, value in saved.items()}


@contextmanager
def open_run(run_dir: str | Path, recipe: str, config: Any, *, resume: bool = False,
             restart: bool = False, device: str = "auto", log: Callable[[str], None] | None = None
             ) -> Iterator[dict[str, Any]]:
    """Hold ``run_dir``'s lock (:func:`hold_run_dir`) and prepare it (:func:`prepare_run_dir`) for the
    block, which gets the configuration to run: what a recipe's ``run`` does around its training.
    ``config`` is the recipe's configuration (or its dictionary). Under torchrun each process first joins
    the process group for the run's ``device``."""
    init_distributed(device)
    with hold_run_dir(run_dir, log=log):
        yield prepare_run_dir(run_dir, recipe, config, resume, restart)


def write_text(path: str | Path, text: str) -> None:
    """Write a file of a run or a sweep folder in one step (a reader, or a kill, never meets half of
    it; :func:`~highwaynet.training.files.write_text`); under torchrun rank 0 alone writes, the others read."""
    if is_main_process():
        files.write_text(path, text)


def _walk_names(folder: Path) -> Iterator[str]:
    """The names of the files under ``folder``, links not followed."""
    for _, _, names in os.walk(folder):
        yield from names


def start_sweep(out: str | Path, recipe: str, config: C, *, resume: bool = False, restart: bool = False,
                report_only: bool = False, log: Callable[[str], None] = print) -> tuple[Path, C]:
    """Open a sweep's folder (highwaynet's own: :func:`~highwaynet.training.files.claim`) for ``config``;
    returns the folder and the configuration the sweep runs. Run again, a sweep goes on.

    A new folder gets ``sweep.json`` (the recipe and its configuration). A folder holding this study
    (the same settings, but for the device) goes on with it: finished runs are skipped, unfinished ones
    resumed, the report written again; one line says so. One holding a study with other settings is
    refused, naming each difference (:class:`SettingsDiffer`), unless ``resume`` (the study goes on with
    the settings of its ``sweep.json``, and one line names those asked that it does not take),
    ``restart`` (what it held is removed: :func:`~highwaynet.training.files.clear`, and it starts over),
    or its runs never saved an epoch (nothing to lose: it starts over). ``report_only`` reports what is
    there, whatever was asked.

    Under torchrun every process runs the sweep, each run data-parallel over all of them: each joins
    the process group for the runs' device first, and looks at the folder before rank 0 writes
    to it, so that all decide alike.
    """
    init_distributed(device_of(config))
    out = check_path("out", out)
    if resume and restart:
        raise ValueError("--resume goes on with the study in a folder and --restart starts it over: pass one of "
                         "them")
    files.check_claimable(out, "sweep")
    record = _read_sweep_record(out, recipe)
    if record is not None and not (restart or report_only):
        _check_known_settings(out / "sweep.json", record, config)
    entries = set(os.listdir(out)) - {files.MARKER, files.MARKER + ".tmp", ".lock", "sweep.json"} \
        if out.is_dir() else set()
    names = list(_walk_names(out)) if entries else []
    trained = any(n in ("checkpoint.pt", "checkpoint.prev.pt", "results.json") for n in names)
    use, fresh, write, line = config, False, True, ""
    if report_only:
        write = False
    elif restart:
        fresh = True
        line = f"starting the study in {out} over: what it held is removed" if entries else ""
    elif record is None:
        line = (f"{out} holds a study without its sweep.json (one of highwaynet 0.3 or before): going on with the "
                f"settings asked; each run keeps the settings it was trained with") if entries else ""
    else:
        differences = _differences(record, config)
        if not differences:
            write = False
            done = out / "report.md" if files.read_regular(out, "summary.json") is not None else None
            finished = sum(n == "results.json" for n in names)
            line = (f"the study in {out} is done: its report is {done} (written again now from its runs, after "
                    f"training any run it lacks, such as one a newer version of the recipe adds; --restart runs "
                    f"it again)" if done else
                    f"{out} holds this study, unfinished ({count(finished, 'run')} done so far): going on where it "
                    f"stopped, finished runs skipped and unfinished ones resumed (--restart starts it over)")
        elif resume:
            asked = _asked_dict(config)
            use = saved_config(type(config), _device_asked(record, asked), out, "sweep.json")
            write = False
            line = (f"{out} holds a study with other settings: --resume goes on with its own; not applied: "
                    + ", ".join(settings_differ(record, config)))
        elif not trained:
            fresh = True
            line = f"{out} held a study with other settings that had not saved an epoch: starting it over"
        else:
            raise SettingsDiffer(out, "study", [(key, old, new) for key, old, new, _ in differences])
    barrier()  # (every process has decided, from the same files, before rank 0 changes them)
    if is_main_process():
        files.claim(out, "sweep", log=log)
        if fresh:
            files.clear(out)
        if write:
            write_text(out / "sweep.json", json.dumps({"recipe": recipe, "config": _asked_dict(use)}, indent=2))
    if line:
        log(line)
    return out, use


def _read_sweep_record(out: Path, recipe: str) -> dict[str, Any] | None:
    """The configuration a sweep folder's ``sweep.json`` holds (None where it has none), checked: a JSON
    object naming ``recipe`` and holding a ``config`` object."""
    if not (out / "sweep.json").exists() and not (out / "sweep.json").is_symlink():
        return None
    path = out / "sweep.json"
    saved = read_json(path, "the study's settings")
    if not isinstance(saved, dict) or not isinstance(saved.get("config"), dict):
        raise ValueError(f"{path} is not a study's settings (a JSON object with its recipe and a 'config' object): "
                         f"it was edited by hand; put back the file the study wrote, or start it over with --restart")
    if saved.get("recipe") != recipe:
        raise ValueError(f"{out} holds a study of {saved.get('recipe')!r}, not of {recipe!r}: pass another --out")
    return cast("dict[str, Any]", saved["config"])


def _check_known_settings(path: Path, saved: dict[str, Any], asked: Any) -> None:
    """Refuse a study's saved settings that name one this version does not have (a hand edit, or a file
    of another version): compared on the settings both hold, the study would be taken as the same while
    its file says otherwise. A run's ``config.json`` is refused alike (:func:`saved_config`); a setting a
    later version removes must be dropped where the record is read (none has been removed so far)."""
    known = flat_settings(_asked_dict(asked))
    unknown = [key for key in flat_settings(saved) if key not in known]
    if unknown:
        from .. import __version__

        one = len(unknown) == 1
        raise ValueError(f"{path} holds {', '.join(map(repr, unknown))}, {'not a setting' if one else 'not settings'} "
                         f"of this study in highwaynet {__version__}: the file was edited by hand, or written by "
                         f"another version. Remove {'it' if one else 'them'} from the file to go on with the study, "
                         f"or pass another --out (--restart starts the study there over)")


def finish_sweep(out: Path, summary: dict[str, Any], write_report: Callable[[Path, dict[str, Any]], Any],
                 progress: SweepProgress | None = None, log: Callable[[str], None] = print,
                 left_out: Mapping[Path, str | None] | None = None) -> dict[str, Any]:
    """Write a sweep's ``summary.json`` and its report (rank 0 alone under torchrun); returns ``summary``.

    A study that had ended and is run again (its report written again) keeps its time: ``seconds`` and
    ``cpu_seconds``, this session's, are added to the earlier summary's. (A study killed before its
    summary counts from the session that ends it.)

    A split sweep's runs still unfinished at its end (``progress.held``, after :func:`look_again`; or
    ``left_out``, a report's) are left out of it: the summary records them (``left_out``: each run's
    folder and who holds it) and is partial (:func:`partial_summary`, which readers of a summary refuse),
    the report says so at its top, and one line on ``log`` names them and the way to the whole summary."""
    held = {**(progress.held if progress is not None else {}), **(left_out or {})}
    if held:
        summary["left_out"] = [{"run": str(run), "held_by": holder} for run, holder in held.items()]
        log(_left_out_line(out, summary["left_out"]))
    try:
        earlier = read_json(out / "summary.json", optional=True)
    except (OSError, ValueError):  # (a damaged summary: written again now)
        earlier = None
    for key in ("seconds", "cpu_seconds"):
        before = earlier.get(key) if isinstance(earlier, dict) else None
        if isinstance(summary.get(key), (int, float)) and isinstance(before, (int, float)) \
                and not isinstance(before, bool) and math.isfinite(before) and before >= 0:
            summary[key] = round(before + summary[key], 1)
    if is_main_process():
        write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")
        write_report(out, summary)
        report = out / "report.md"
        text = files.read_regular(out, "report.md") if held else None
        if text is not None:  # (a warning under the report's title, where a reader meets it first)
            title, _, rest = text.decode("utf-8").partition("\n")
            write_text(report, f"{title}\n\n> **Partial:** {_left_out_line(out, summary['left_out'])}\n{rest}")
    return summary


def _left_out_line(out: Path, left_out: list[dict[str, Any]]) -> str:
    runs = "; ".join(f"{entry['run']} (" + (f"being written by {entry['held_by']}" if entry["held_by"] else
                                            "unfinished: the process that held it ended") + ")" for entry in left_out)
    return (f"the summary and report of {out} hold only the finished runs: {count(len(left_out), 'run')} of this "
            f"sweep left out, {'unfinished' if len(left_out) == 1 else 'each unfinished'} at its end: {runs}. Run the "
            f"same command again once that process has ended: it will then write the whole summary")


def check_complete_summary(summary: Any, path: str | Path) -> None:
    """Refuse a sweep's summary (read from ``path``) that is partial: one that left out runs another process
    of a split sweep had not finished (:func:`finish_sweep`'s ``left_out``), which would otherwise pass for
    the whole sweep's."""
    left_out = summary.get("left_out") if isinstance(summary, dict) else None
    if left_out:
        runs = [entry.get("run") if isinstance(entry, dict) else entry for entry in left_out]
        raise ValueError(f"{path} is a partial summary: {count(len(runs), 'run')} of its sweep left out, unfinished "
                         f"when it was written ({', '.join(map(str, runs))}). Run the sweep's command again once "
                         f"the process writing {'it' if len(runs) == 1 else 'them'} has ended: it then writes the "
                         f"whole summary")


def _differences(saved: dict[str, Any], asked: Any) -> list[tuple[str, Any, Any, bool]]:
    """``(setting, saved value, asked value, whether the saved run predates the setting)`` for each
    setting, other than the device, where a folder's saved configuration differs from ``asked`` (a
    dataclass, or its dictionary), compared as JSON stores them. A setting newer than the folder's run
    is missing from it: the run goes on built from the saved one as ``type(asked)(**saved)``, which
    gives it its default, and it is named where something else is asked for."""
    stored = flat_settings(saved)
    resumed = stored
    if is_dataclass(asked) and not isinstance(asked, type):
        try:
            resumed = flat_settings(_asked_dict(type(asked)(**saved)))
        except (TypeError, ValueError):  # a saved setting the class no longer has (or a hand edit): as stored
            pass
    return [(key, resumed[key], value, key not in stored) for key, value in flat_settings(_asked_dict(asked)).items()
            if key in resumed and resumed[key] != value and key.rsplit(".", 1)[-1] not in _PLACEMENT]


def settings_differ(saved: dict[str, Any], asked: Any, names: Mapping[str, str] | None = None) -> list[str]:
    """``"setting saved (asked value)"`` for each setting, other than the device, where a run folder's
    saved configuration differs from ``asked``, the configuration (a dataclass) asked for
    (:func:`_differences`); each setting named by ``names`` (its path to its name; by default as
    :func:`settings_named_by` says: by its option on the command line, else by its path)."""
    return [f"{_setting_name(key, names)} {old!r}" + (", the default, as the run predates the setting" if newer else "")
            + f" (asked {new!r})" for key, old, new, newer in _differences(saved, asked)]


class Train(Protocol):
    """What :func:`run_once` runs: one training into its folder, started anew or resumed."""

    def __call__(self, *, resume: bool) -> dict[str, Any]: ...


def run_once(run_dir: Path, train: Train, log: Callable[[str], None], what: str, config: Any = None,
             progress: SweepProgress | None = None, required: bool = False) -> dict[str, Any] | None:
    """One run of a sweep: skipped when finished, resumed when it has a checkpoint, else started anew.

    ``train(resume=...)`` runs it into ``run_dir`` and returns its results (also in ``results.json``).
    A run that was started but never saved a checkpoint is started over. A finished or resumed run
    keeps the settings it was started with: given the ``config`` asked for, each setting where they
    differ is logged. An unfinished run is held (its folder's lock, :func:`hold_run_dir`) before it is
    looked at and trained. A run another process is writing (a sweep split over several) is left to it:
    logged, recorded in ``progress`` (:attr:`SweepProgress.held`, for :func:`look_again` at the sweep's
    end, which takes its results if it has finished by then and has :func:`finish_sweep` mark the summary
    partial if not), and None returned, unless the sweep needs its result to go on (``required``: then
    :class:`RunFolderBusy` says so). ``progress`` counts the sweep's runs and says what is left.
    """
    with ExitStack() as holding:
        if read_results(run_dir) is None:  # (a finished run is read, never written: no lock to take)
            try:
                holding.enter_context(hold_run_dir(run_dir, log=log))
            except RunFolderBusy as busy:
                if required:
                    raise RunFolderBusy(f"{busy}; this sweep needs its result to go on: run the sweep's command "
                                        f"again once that process has finished", busy.holder) from None
                holder = busy.holder
                log(f"{run_dir}: {what}: held by another process ({holder}), left to it: a sweep split over "
                    f"several processes; looked at again at the sweep's end")
                if progress is not None:
                    progress.held[run_dir] = holder
                    progress.finished(None)
                return None
        return _run_held(run_dir, train, log, what, config, progress)


def _run_held(run_dir: Path, train: Train, log: Callable[[str], None], what: str, config: Any,
              progress: SweepProgress | None) -> dict[str, Any] | None:
    """:func:`run_once`'s run, its folder held (or finished)."""
    done, resume = read_results(run_dir), finished_an_epoch(run_dir)
    if done is None and ((run_dir / "results.json").exists() or (run_dir / "results.json").is_symlink()):
        log(f"{run_dir / 'results.json'} is not the results its run wrote (edited, damaged or a link): the run goes "
            f"on, and writes them again")
    if config is not None and (done is not None or resume):
        # (a run's own settings, by their paths: a study's options set the study's, not each run's one for one)
        differ = settings_differ(load_run_config(run_dir)["config"], config, names={})
        if differ:
            log(f"{run_dir}: keeps the settings it was trained with: " + ", ".join(differ))
    barrier()  # under torchrun every process has decided, from the same files, before rank 0 changes them
    if done is not None:
        log(f"{run_dir}: done, skipped")
        if progress is not None:
            progress.finished(None)
        return done
    if progress is not None:
        log(progress.line())
    log(f"{run_dir}: {what}" + (" (resumed)" if resume else ""))
    earlier = len(read_metrics(run_dir))  # (the epochs of this session are the ones after these)
    start = time.perf_counter()
    results = train(resume=resume)
    if progress is not None:
        epochs = sum(m["time"] for m in read_metrics(run_dir)[earlier:])
        progress.finished(time.perf_counter() - start, epochs)
    return results


def held_by(run_dir: str | Path) -> str | None:
    """Who holds ``run_dir``'s lock ("process 123 on host"), or None where no other process holds it: looked
    at without taking the lock, or writing anything (a report that trains nothing asks)."""
    if fcntl is None:  # pragma: no cover - Windows: no lock
        return None
    folder = check_path("run_dir", run_dir)
    if folder.resolve() in _held:
        return None
    try:
        fd = os.open(folder / ".lock", os.O_RDONLY | NOFOLLOW)
    except OSError:  # (no lock file: no run was ever held there)
        return None
    try:
        holder = _lock_or_holder(fd, fcntl.LOCK_SH)
        if holder is None:
            fcntl.flock(fd, fcntl.LOCK_UN)
        return holder
    finally:
        os.close(fd)


def look_again(progress: SweepProgress, log: Callable[[str], None]) -> dict[Path, dict[str, Any]]:
    """At a split sweep's end, before its summary: the results of each run :func:`run_once` left to another
    process (``progress.held``) that has finished since, by its folder (each taken as a run skipped as
    done, and dropped from ``progress.held``). Those still unfinished stay there, with who holds them now
    (None: no process does; the one that did ended first), for :func:`finish_sweep` to name."""
    found = {}
    for run_dir in list(progress.held):
        results = read_results(run_dir)
        if results is not None:
            log(f"{run_dir}: finished by the process that held it: its results are in the summary")
            found[run_dir] = results
            del progress.held[run_dir]
        else:
            progress.held[run_dir] = held_by(run_dir)
    return found


def load_best_weights(model: torch.nn.Module, run_dir: str | Path) -> torch.nn.Module:
    """Load a run folder's best weights (``model.pt``) into ``model``, onto the model's device."""
    run_dir = check_path("run_dir", run_dir)
    path = run_dir / "model.pt"
    if not path.is_file():
        if (run_dir / "results.json").is_file() or finished_an_epoch(run_dir):
            raise FileNotFoundError(f"{path} is missing from a run that has finished epochs: it was removed or moved. "
                                    f"Put it back, or train the run again (--restart)")
        raise FileNotFoundError(f"{path} not found: the run has not finished an epoch yet")
    if path.is_symlink():
        raise files.LinkInFolder(f"{path} is a symbolic link: a run's weights are read from its own file only")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # (a damaged file fails in many ways: zip, pickle, truncation)
        raise ValueError(f"{path} cannot be read ({str(error).splitlines()[0] if str(error) else error!r}): it is "
                         f"damaged; train the run again (--restart)") from error
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        raise ValueError(f"{path} does not fit the model its config.json describes ({' '.join(lines[:2])}): was "
                         f"config.json edited? Undo the edit, or train the run again (--restart)") from None
    return model


def finite_or_inf(x: float) -> float:
    """``x``, or infinity where it is NaN or infinite: a diverged run's loss, which must never win a search."""
    return x if math.isfinite(x) else math.inf


def mean_std(values: list[float]) -> dict[str, float]:
    """Mean and sample standard deviation of a sweep's repeats; NaN (a diverged run) propagates,
    so that a table shows the divergence rather than hiding the run."""
    if any(math.isnan(v) for v in values):
        return {"mean": float("nan"), "std": float("nan")}
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0}


#: Two-sided 95% quantiles of Student's t for 1 to 30 degrees of freedom (beyond: the normal's 1.96).
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t95(pairs: int) -> float:
    """The two-sided 95% quantile of Student's t that :func:`paired_interval` multiplies sd / √n by for
    ``pairs`` paired differences (``pairs`` − 1 degrees of freedom; beyond 31 pairs, the normal's 1.96):
    12.706 for two, 4.303 for three. What a report says of its intervals' t is read from here."""
    if isinstance(pairs, bool) or not isinstance(pairs, int) or pairs < 2:
        raise ValueError(f"pairs must be a whole number of at least 2 (one pair has no interval), got {pairs!r}")
    return _T95[pairs - 2] if pairs - 1 <= len(_T95) else 1.96


def paired_interval(differences: list[float]) -> dict[str, float]:
    """Mean of paired differences and its two-sided 95% t-interval (``lo``, ``hi``: :func:`t95`); ``n`` pairs."""
    n = len(differences)
    mean = statistics.fmean(differences) if n else math.nan
    if n < 2:
        return {"mean": mean, "lo": math.nan, "hi": math.nan, "n": n}
    half = t95(n) * statistics.stdev(differences) / math.sqrt(n)
    return {"mean": mean, "lo": mean - half, "hi": mean + half, "n": n}


def paired_differences(first: Mapping[Any, float], second: Mapping[Any, float]) -> dict[str, Any]:
    """``first`` − ``second`` (each a result by its seed, or any key that pairs two runs: the same seed
    trains on the same batches), over the keys both hold, sorted (``seeds``), with one difference each
    (``differences``), and :func:`paired_interval`'s fields: their mean, 95% t-interval and ``n``."""
    seeds = sorted(set(first) & set(second))
    differences = [first[s] - second[s] for s in seeds]
    return {"seeds": seeds, "differences": differences, **paired_interval(differences)}


def count(n: int, noun: str) -> str:
    """``"1 run"``, ``"3 runs"``: ``n`` and ``noun``, plural (with an s) unless ``n`` is 1."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def format_mean_std(stats: dict[str, float], runs: int, digits: int = 1) -> str:
    """``"88.5 ± 0.8"`` for :func:`mean_std`'s ``stats`` over ``runs`` repeats; the mean alone for one
    run, whose spread is unknown rather than zero."""
    mean = f"{stats['mean']:.{digits}f}"
    return mean if runs < 2 else f"{mean} ± {stats['std']:.{digits}f}"
