"""A run's checkpoint: what it holds, whose it is, and how it is read back on any device.

A checkpoint holds the model, optimiser and schedule states, every random generator's state (of
each process under torchrun) and the run's identity: the run folder's identity, the package
version, and the configuration it was trained with. Reading one back:

- **Independent of the device.** Everything is loaded onto the CPU, then placed: the model's and
  optimiser's states by their own ``load_state_dict`` (onto the parameters' device), the generator
  states where they belong (they are CPU byte tensors even for a GPU's generator). A run started on
  a GPU resumes on the CPU and the reverse, and on a machine with another number of GPUs; where a
  generator cannot be restored (another device type), one line says so.
- **Whose it is.** A checkpoint from another run (copied in), or trained with settings other than
  those the folder's ``config.json`` now holds (edited since), is refused, saying which
  (:class:`CheckpointMismatch`); so is one that does not fit the model. Only a file that cannot be
  read at all is called damaged (:class:`CorruptCheckpoint`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from .._checks import check_device, check_path, parse_json

__all__ = ["CheckpointMismatch", "CorruptCheckpoint", "RESUMABLE_SETTINGS", "START_OVER", "check_identity",
           "fit_state", "flat_settings", "gather_rng_states", "identity_in_folder", "read_checkpoint",
           "restore_rng_state", "rng_state", "run_identity"]

#: Settings a run may change when it resumes: where and how fast it runs, and for how long.
RESUMABLE_SETTINGS = frozenset({"device", "epochs", "compile", "cuda_graph", "tensorboard"})
#: The way on that every refusal of a run folder offers, for the command line and for Python alike.
START_OVER = "start the run over (--restart; from Python, Trainer.fit(restart=True))"


def flat_settings(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested configuration as one level, nested keys joined by dots (``train.lr``)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        flat.update(flat_settings(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key: value})
    return flat


class CorruptCheckpoint(ValueError):
    """A run folder's checkpoint cannot be read at all; the message says which file and how to go on."""


class CheckpointMismatch(ValueError):
    """A readable checkpoint that is not this run's to resume: another run's, trained with other settings, or
    not fitting the model; the message says which, and what to do."""


def rng_state(device: torch.device) -> dict[str, Any]:
    """This process's generator states: Python's, NumPy's, the CPU's, and the run's CUDA device's, if any."""
    # numpy's state holds an ndarray: stored as a tensor, so that the checkpoint loads with weights_only=True.
    kind, keys, *rest = cast("tuple[str, np.ndarray, int, int, float]", np.random.get_state(legacy=True))
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate(),
                             "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), *rest)}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def gather_rng_states(device: torch.device) -> list[dict[str, Any]]:
    """Every process's :func:`rng_state`, in rank order (one process: its own). A collective under
    torchrun: every process calls it."""
    import torch.distributed as dist

    from .distributed import world

    mine = rng_state(device)
    if world()[1] == 1:
        return [mine]
    states: list[Any] = [None] * world()[1]
    dist.all_gather_object(states, mine)
    return cast("list[dict[str, Any]]", states)


def _cuda_state(saved: Any, device: torch.device) -> torch.Tensor | None:
    """The CUDA generator state to restore on ``device`` from what a checkpoint saved: one state
    (0.3), or 0.2's list of every GPU's (that of this device's index, or the first)."""
    if isinstance(saved, torch.Tensor):
        return saved
    if isinstance(saved, (list, tuple)) and saved:
        index = device.index if device.index is not None else torch.cuda.current_device()
        return saved[index] if index < len(saved) else saved[0]
    return None


def restore_rng_state(saved: Any, device: torch.device, rank: int, seed: int) -> list[str]:
    """Restore this process's generators from a checkpoint's ``rng`` entry (every rank's states, or
    0.2's one); returns lines that say what could not be restored as saved (empty when all was).

    Each process takes its own rank's states; where the checkpoint has fewer processes' states, the
    others take rank 0's. A CUDA generator is restored where both runs are on CUDA; a run that moves
    to CUDA from a checkpoint without its state seeds it from ``seed`` instead.
    """
    states = saved if isinstance(saved, list) else [saved]
    notes = []
    if rank >= len(states):
        notes.append(f"the checkpoint holds the random generator states of {len(states)} process"
                     f"{'es' if len(states) != 1 else ''}; process {rank} takes those of process 0")
    state = states[rank] if rank < len(states) else states[0]
    torch.set_rng_state(state["torch"].cpu())
    random.setstate(state["python"])
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, keys.cpu().numpy().astype(np.uint32), *rest))
    cuda = _cuda_state(state.get("cuda"), device) if device.type == "cuda" else None
    if cuda is not None:
        torch.cuda.set_rng_state(cuda.cpu(), device)
    elif device.type == "cuda":
        torch.cuda.manual_seed(seed)
        notes.append("the checkpoint was saved off CUDA: the CUDA generator starts from the seed, so random numbers "
                     "from here on differ from an uninterrupted run's")
    elif state.get("cuda") is not None:
        notes.append(f"the checkpoint was saved on CUDA and this run is on {device.type}: random numbers from here "
                     f"on differ from an uninterrupted run's")
    return notes


def run_identity(run_dir: Path | None, train_config: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint records of its run: the folder's identity (its marker), the package version,
    and the configuration (the folder's ``config.json``'s, else the Trainer's own), as flat settings."""
    from .. import __version__
    from .files import marker, read_regular

    config, source = train_config, "the Trainer's configuration"
    found = marker(run_dir) if run_dir is not None else None
    if run_dir is not None:
        text = read_regular(run_dir, "config.json")
        if text is not None:
            try:
                saved = parse_json(text)
                if isinstance(saved, dict) and isinstance(saved.get("config"), dict):
                    config, source = saved["config"], "its run folder's config.json"
            except ValueError:
                pass
    return {"run": found["id"] if found else None, "highwaynet": __version__, "source": source,
            "config": flat_settings(json.loads(json.dumps(config)))}


def _differences(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    keys = sorted(set(saved) | set(now), key=str)
    return [f"{key} {saved.get(key, '(unset)')!r} then, {now.get(key, '(unset)')!r} now" for key in keys
            if saved.get(key) != now.get(key) and str(key).rsplit(".", 1)[-1] not in RESUMABLE_SETTINGS]


def check_identity(saved: dict[str, Any] | None, now: dict[str, Any], path: Path) -> list[str]:
    """Refuse a checkpoint that another run saved, or that was trained with settings the run folder no
    longer holds (:class:`CheckpointMismatch`); returns lines worth saying (another package version).
    A checkpoint of 0.2, without an identity, is taken as it is."""
    if not saved:
        return []
    if not isinstance(saved, dict) or not isinstance(saved.get("config", {}), dict):
        raise CorruptCheckpoint(f"{path} holds an identity that is not what highwaynet saves ({type(saved).__name__}):"
                                f" it was edited or damaged. To go on, {START_OVER}")
    if saved.get("run") and now.get("run") and saved["run"] != now["run"]:
        raise CheckpointMismatch(
            f"{path} was saved by another run (run {saved['run'][:8]}) than the one in {path.parent} (run "
            f"{now['run'][:8]}): it was copied or moved here. Put this run's own checkpoint back, or {START_OVER}")
    differ = _differences(saved.get("config", {}), now.get("config", {}))
    if differ:
        shown = "; ".join(differ[:6]) + ("; ..." if len(differ) > 6 else "")
        edited = ("the configuration was edited after the checkpoint was saved. Undo the edit to resume"
                  if now.get("source", "").endswith("config.json") else "go on with the settings it was trained with")
        raise CheckpointMismatch(f"{path} was trained with other settings than {now.get('source')} ({shown}): "
                                 f"{edited}, or {START_OVER}")
    if saved.get("highwaynet") != now.get("highwaynet"):
        return [f"{path.name} was saved by highwaynet {saved.get('highwaynet')}; this is {now.get('highwaynet')}"]
    return []


def read_checkpoint(path: str | Path, previous: str | Path | None) -> dict[str, Any]:
    """A checkpoint's contents, on the CPU, read as data (``weights_only``: never code to run).

    Raises:
        CorruptCheckpoint: the file cannot be read, or is not a highwaynet checkpoint.
    """
    path = check_path("path", path)
    previous = check_path("previous", previous) if previous is not None else None

    def way_on() -> str:
        back = (f"go on from the epoch before with `mv {previous} {path}` and resume again, or "
                if previous is not None and previous != path and previous.is_file() else "")
        return f"To go on, {back}{START_OVER}"

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # (a damaged file fails in many ways: zip, pickle, truncation)
        why = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CorruptCheckpoint(f"{path} cannot be read ({why}): it is damaged. {way_on()}") from error
    missing = [k for k in ("epoch", "model", "optimizer", "scheduler", "rng") if not isinstance(state, dict)
               or k not in state]
    if missing:
        raise CorruptCheckpoint(f"{path} is not a highwaynet checkpoint (it has no {', '.join(missing)}). {way_on()}")
    wrong = _wrong_entries(state)
    if wrong:
        raise CorruptCheckpoint(f"{path} is not a checkpoint as highwaynet saves it ({'; '.join(wrong)}): it was "
                                f"edited or damaged. {way_on()}")
    return cast("dict[str, Any]", state)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _wrong_entries(state: dict[str, Any]) -> list[str]:
    """What in a checkpoint's entries is not of the kind a highwaynet checkpoint holds (each one named)."""
    checks = {
        "epoch": _is_count(state["epoch"]),
        "steps": _is_count(state.get("steps", 0)),
        "best": state.get("best") is None or (isinstance(state.get("best"), (int, float))
                                              and not isinstance(state.get("best"), bool)),
        "seconds": isinstance(state.get("seconds", 0.0), (int, float)) and not isinstance(state.get("seconds"), bool),
        "model": isinstance(state["model"], dict),
        "optimizer": isinstance(state["optimizer"], dict) and isinstance(state["optimizer"].get("param_groups"), list),
        "scheduler": isinstance(state["scheduler"], dict),
        "rng": isinstance(state["rng"], dict) or (isinstance(state["rng"], list) and bool(state["rng"])
                                                  and all(isinstance(r, dict) for r in state["rng"])),
        "identity": state.get("identity") is None or isinstance(state.get("identity"), dict),
        "device": state.get("device") is None or _is_device(state.get("device")),
    }
    return [f"its {key} is {_shown(state.get(key))}" for key, fine in checks.items() if not fine]


def _is_device(value: Any) -> bool:
    """Whether ``value`` is a device's name as a checkpoint records it (``"cpu"``, ``"cuda:0"``)."""
    if not isinstance(value, str):
        return False
    try:
        check_device("device", value)
    except ValueError:
        return False
    return True


def _shown(value: Any) -> str:
    text = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def identity_in_folder(folder: Path) -> tuple[str | None, str]:
    """The run identity a run folder's own files carry, for a folder whose marker was lost or damaged:
    its checkpoint's (``checkpoint.pt``, else ``checkpoint.prev.pt``), where the checkpoint and the
    folder's ``config.json`` agree on the run's settings; None otherwise. With a few words on how it
    was found, or why it was not (a new identity is then given: the checkpoint is refused as another
    run's when it is resumed)."""
    import io

    from .files import read_regular

    for name in ("checkpoint.pt", "checkpoint.prev.pt"):
        data = read_regular(folder, name)
        if data is not None:
            break
    else:
        return None, "the run had no checkpoint to take its identity from: it is a new run"
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception:  # (a damaged file fails in many ways)
        return None, f"its identity could not be taken back: {name} cannot be read"
    saved = state.get("identity") if isinstance(state, dict) else None
    if not isinstance(saved, dict) or not isinstance(saved.get("run"), str) or not saved["run"] \
            or not isinstance(saved.get("config"), dict):
        return None, f"its identity could not be taken back: {name} holds none (a checkpoint of 0.2)"
    text = read_regular(folder, "config.json")
    try:
        record = parse_json(text.decode("utf-8")) if text is not None else None
    except (UnicodeDecodeError, ValueError):
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("config"), dict):
        return None, "its identity could not be taken back: config.json is missing or not a run's configuration"
    differ = _differences(saved["config"], flat_settings(json.loads(json.dumps(record["config"]))))
    if differ:
        return None, (f"its identity could not be taken back: {name} and config.json disagree ({'; '.join(differ[:3])}"
                      f"{'; ...' if len(differ) > 3 else ''})")
    return saved["run"], f"the run's identity taken back from {name}, which agrees with config.json"


def fit_state(what: str, path: Path, load: Callable[[], Any]) -> None:
    """Run ``load`` (a ``load_state_dict``); a state that does not fit is a :class:`CheckpointMismatch`
    naming ``what`` (the model, the optimiser) and the first line of the reason."""
    try:
        load()
    except (RuntimeError, ValueError, KeyError, TypeError) as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        why = " ".join(lines[:2]) if lines else type(error).__name__
        raise CheckpointMismatch(
            f"{path} does not fit {what} ({why}): the model or its training was built with other settings than "
            f"the checkpoint's. Go on with the settings it was saved with, or {START_OVER}"
        ) from error
