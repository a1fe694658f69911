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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol, TypeVar

try:  # the run-folder lock: POSIX only (elsewhere a folder is not locked)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

import numpy as np
import torch

from . import files
from .distributed import barrier, init_distributed, is_main_process
from .progress import SweepProgress

__all__ = ["RunFolderBusy", "cpu_model", "environment", "finish_sweep", "finished_an_epoch", "finite_or_inf",
           "flat_settings", "format_mean_std", "hold_run_dir", "load_best_weights", "load_run_config", "mean_std",
           "open_run", "prepare_run_dir", "read_json", "read_metrics", "run_once", "saved_config", "settings_differ",
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


def read_json(path: str | Path, what: str = "", optional: bool = False) -> Any:
    """A JSON file of highwaynet's, read as data; a message naming the file where it is missing, a link,
    or not JSON (damaged, or edited by hand). ``what`` says what the file is, for the message. With
    ``optional``, a file that is missing or a link gives None (a report shows what is there)."""
    path = Path(path)
    data = files.read_regular(path.parent, path.name)
    if data is None:
        if optional:
            return None
        if path.is_symlink():
            raise files.LinkInFolder(f"{path} is a symbolic link: highwaynet reads only its own files, not a link "
                                     f"to a file elsewhere; put the file itself back")
        raise FileNotFoundError(f"{path} is missing" + (f" ({what})" if what else ""))
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"{path} is not valid JSON ({error}): it was damaged or edited by hand; put back the "
                         f"file the run wrote, or start the run over with --restart") from None


def load_run_config(run_dir: str | Path, recipe: str | None = None) -> dict[str, Any]:
    """The ``config.json`` of a run folder, with a clear error when the folder is not a run (or, given
    ``recipe``, not a run of that recipe), or its file is not what a run writes (hand-edited)."""
    path = Path(run_dir) / "config.json"
    if not path.is_file() and not path.is_symlink():
        written_by = _WRITTEN_BY.get(recipe or "", "'highwaynet train ... --out DIR' writes DIR")
        runs = _runs_inside(Path(run_dir), recipe)
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


def saved_config(config_class: Callable[..., C], saved: dict[str, Any], run_dir: str | Path) -> C:
    """``config_class(**saved)``, the configuration a run folder holds; a message naming its config.json
    where a hand edit left a setting of the wrong type, an unknown one, or a value out of bounds."""
    try:
        return config_class(**saved)
    except (TypeError, ValueError) as error:
        name = getattr(config_class, "__name__", "configuration")
        raise ValueError(f"{Path(run_dir) / 'config.json'} does not hold a {name} ({error}): it was edited by hand; "
                         f"undo the edit, or start the run over with --restart") from None


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


def read_metrics(run_dir: str | Path) -> list[dict[str, float]]:
    """The per-epoch metrics of a run folder, in order (a last line cut short by a kill is left out)."""
    path = Path(run_dir) / "metrics.jsonl"
    if path.is_symlink():
        raise files.LinkInFolder(f"{path} is a symbolic link: a run's metrics are read from its own file only; put "
                                 f"the file back, or start the run over with --restart")
    data = files.read_regular(path.parent, path.name)
    if data is None:
        return []
    lines = [line for line in data.decode("utf-8", errors="replace").splitlines() if line.strip()]
    metrics = []
    for number, line in enumerate(lines, 1):
        try:
            metrics.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):
                raise ValueError(f"{path}, line {number}: not a line of metrics ({line[:60]!r})") from None
    return metrics



class RunFolderBusy(FileExistsError):
    """Another process is writing the run folder (it holds the folder's lock)."""


# Locks this process holds, by resolved folder: [the lock file's descriptor, how many holders inside]
_held: dict[Path, list[int]] = {}


@contextmanager
def hold_run_dir(run_dir: str | Path | None, kind: str = "run", what: str = "") -> Iterator[None]:
    """Hold the folder's lock while the block runs: its one writer. Re-entrant within a process
    (a recipe holds it, and its Trainer again); under torchrun rank 0 alone holds it (it alone
    writes). The folder is made highwaynet's first (:func:`~highwaynet.training.files.claim`, as a
    ``kind`` folder; ``what`` names the writer in its messages): one holding anything else is refused.
    A second process gets :class:`RunFolderBusy`, naming the holder's process and host. The OS
    releases the lock when the holder dies, however it dies."""
    if run_dir is None or not is_main_process():
        yield
        return
    folder = Path(run_dir)
    files.check_claimable(folder, kind, what)  # (before the lock file: nothing is written into another's folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = folder.resolve()
    if key in _held:
        _held[key][1] += 1
        try:
            yield
        finally:
            _held[key][1] -= 1
        return
    if fcntl is None:  # pragma: no cover - Windows: no lock
        files.claim(folder, kind, what)
        yield
        return
    path = folder / ".lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError:
        if path.is_symlink():
            raise files.LinkInFolder(f"{path} is a symbolic link: highwaynet keeps its own lock file there and does "
                                     f"not write through a link; remove the link and run again") from None
        raise
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
        files.claim(folder, kind, what)
        yield
    finally:
        del _held[key]
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def prepare_run_dir(run_dir: str | Path, recipe: str, config: dict[str, Any], resume: bool,
                    restart: bool = False) -> dict[str, Any]:
    """Create ``run_dir`` for a new run, or check it for a resumed one; returns the config to use.

    A new run refuses a folder that already holds a run (nothing is overwritten) unless ``restart``
    says to start it over, but not one whose run never saved a checkpoint (it holds nothing to lose:
    it is started over, as a sweep does). A resumed run takes the configuration saved in the folder,
    so that it continues exactly as it started, but for the device asked now. Take the folder's lock
    first (:func:`open_run`).
    """
    run_dir = Path(run_dir)
    if resume and restart:
        raise ValueError("--resume continues the run in a folder and --restart starts it over: pass one of them")
    if resume:
        saved = load_run_config(run_dir, recipe)["config"]
        if is_main_process():
            files.remove_stray_files(run_dir)
        return _device_asked(saved, config)
    if not is_main_process():  # under torchrun, rank 0 alone writes the run folder
        return config
    if (run_dir / "config.json").exists() and finished_an_epoch(run_dir) and not restart:
        raise FileExistsError(f"{run_dir} already holds a run: resume it with --resume, start it over with "
                              f"--restart, or pass another --out")
    files.claim(run_dir, "run")
    files.remove_stray_files(run_dir)
    files.clear(run_dir)  # what a run there wrote before (started over, or stopped before its first checkpoint)
    record = {"recipe": recipe, "config": config, "environment": environment(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    write_text(run_dir / "config.json", json.dumps(record, indent=2) + "\n")
    return config


def _device_asked(saved: dict[str, Any], asked: dict[str, Any]) -> dict[str, Any]:
    """``saved`` with the device settings of ``asked``: a run resumes with the settings it was started
    with, except where it runs (a run started on a GPU goes on on the CPU, or the reverse)."""
    return {key: asked[key] if key == "device" and isinstance(asked.get(key), str) else
            _device_asked(value, asked[key]) if isinstance(value, dict) and isinstance(asked.get(key), dict) else value
            for key, value in saved.items()}


@contextmanager
def open_run(run_dir: str | Path, recipe: str, config: dict[str, Any], *, resume: bool = False,
             restart: bool = False, device: str = "auto") -> Iterator[dict[str, Any]]:
    """Hold ``run_dir``'s lock (:func:`hold_run_dir`) and prepare it (:func:`prepare_run_dir`) for the
    block, which gets the configuration to run: what a recipe's ``run`` does around its training.
    Under torchrun each process first joins the process group for the run's ``device``."""
    init_distributed(device)
    with hold_run_dir(run_dir):
        yield prepare_run_dir(run_dir, recipe, config, resume, restart)


def write_text(path: str | Path, text: str) -> None:
    """Write a file of a run or a sweep folder in one step (a reader, or a kill, never meets half of
    it; :func:`~highwaynet.training.files.write_text`); under torchrun rank 0 alone writes, the others read."""
    if is_main_process():
        files.write_text(path, text)


def start_sweep(out: str | Path, resume: bool, device: str = "auto") -> Path:
    """Create a sweep's folder (highwaynet's own: :func:`~highwaynet.training.files.claim`); refuse one
    that already holds results unless resuming.

    Under torchrun every process runs the sweep, each run data-parallel over all of them: each joins
    the process group for the runs' ``device`` first, and looks at the folder before rank 0 writes
    to it, so that all decide alike.
    """
    init_distributed(device)
    out = Path(out)
    files.check_claimable(out, "sweep")
    if out.is_dir() and set(os.listdir(out)) - {files.MARKER, ".lock"} and not resume:
        raise FileExistsError(f"{out} already holds a sweep: continue it with --resume, or pass another --out")
    barrier()
    if is_main_process():
        files.claim(out, "sweep")
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
    except (TypeError, ValueError):  # a saved setting the class no longer has (or a hand edit): compare as stored
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
    earlier = len(read_metrics(run_dir))  # (the epochs of this session are the ones after these)
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
        epochs = sum(m["time"] for m in read_metrics(run_dir)[earlier:])
        progress.finished(None if results is None else time.perf_counter() - start, epochs)
    return results


def load_best_weights(model: torch.nn.Module, run_dir: str | Path) -> torch.nn.Module:
    """Load a run folder's best weights (``model.pt``) into ``model``, onto the model's device."""
    run_dir = Path(run_dir)
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


def count(n: int, noun: str) -> str:
    """``"1 run"``, ``"3 runs"``: ``n`` and ``noun``, plural (with an s) unless ``n`` is 1."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def format_mean_std(stats: dict[str, float], runs: int, digits: int = 1) -> str:
    """``"88.5 ± 0.8"`` for :func:`mean_std`'s ``stats`` over ``runs`` repeats; the mean alone for one
    run, whose spread is unknown rather than zero."""
    mean = f"{stats['mean']:.{digits}f}"
    return mean if runs < 2 else f"{mean} ± {stats['std']:.{digits}f}"
