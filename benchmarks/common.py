"""What every benchmark here shares: timing side by side, the table, the JSON record."""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from provenance import stamp

from highwaynet.training.run_dir import cpu_model


def sync_for(device: torch.device) -> Callable[[], None]:
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


def timed_calls(fn: Callable[[], object], device: torch.device, calls: int, warmup: int = 0) -> list[float]:
    """The wall times of ``calls`` calls of ``fn()`` after ``warmup`` untimed ones, each synchronised
    on a GPU (each call is milliseconds of queued kernels, so the host clock's own cost is noise)."""
    sync, times = sync_for(device), []
    for i in range(warmup + calls):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def median_seconds(fn: Callable[[], object], device: torch.device, repeats: int, warmup: int = 3) -> float:
    """The median wall time of ``fn()`` over ``repeats`` calls after ``warmup``."""
    return statistics.median(timed_calls(fn, device, repeats, warmup))


def measure_rows(rows: dict[str, Callable[[], object]], device: torch.device, repeats: int,
                 block: int = 5) -> dict[str, float]:
    """Seconds per call of each row: the median of ``repeats`` calls, taken in blocks of ``block``
    that go round the rows in turn, so that every row samples the same stretches of a machine whose
    speed drifts (a shared 2-core VM here swings by 20-25% from one minute to the next: rows timed
    one after another, each in one stretch, moved the RHN's ratio to labml's loop from 0.45 to 0.61
    between two runs). On the CPU each block starts with one untimed call, so that a row's caches
    are as warm as in a loop of its own."""
    times: dict[str, list[float]] = {name: [] for name in rows}
    for fn in rows.values():
        timed_calls(fn, device, 0, warmup=3)
    while any(len(t) < repeats for t in times.values()):
        for name, fn in rows.items():
            calls = min(block, repeats - len(times[name]))
            if calls > 0:
                times[name] += timed_calls(fn, device, calls, warmup=int(device.type == "cpu"))
    return {name: statistics.median(t) for name, t in times.items()}


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_model()}, {torch.get_num_threads()} threads"


def report(title: str, results: dict[str, float], baseline: str, device: torch.device, path: str,
           settings: dict, extra_columns: dict[str, dict[str, float]] | None = None) -> None:
    """Print ``title`` and a table of ms and ratio to ``baseline`` (plus ``extra_columns``), write JSON."""
    base = results[baseline]
    extra = extra_columns or {}
    print(f"{title}\n{device_name(device)}, torch {torch.__version__}")
    width = max(len(n) for n in results) + 2
    print(f"{'':{width}}{'ms':>10}{'x ' + baseline.split(' ')[0]:>14}" + "".join(f"{c:>14}" for c in extra))
    for name, seconds in results.items():
        cells = "".join(f"{extra[c][name]:14.4g}" for c in extra)
        print(f"{name:{width}}{1e3 * seconds:10.3f}{seconds / base:14.2f}{cells}")
    command = "python " + " ".join([str(Path(sys.argv[0]).relative_to(Path.cwd())) if Path(sys.argv[0]).is_absolute()
                                     and Path(sys.argv[0]).is_relative_to(Path.cwd()) else sys.argv[0], *sys.argv[1:]])
    record = {"title": title, "command": command, "settings": settings, **stamp(), "torch": torch.__version__,
              "device": device_name(device),
              "ms": {k: 1e3 * v for k, v in results.items()},
              f"ratio_to_{baseline.split(' ')[0]}": {k: v / base for k, v in results.items()}, **extra}
    with open(path, "w") as f:
        json.dump(record, f, indent=2)
    print(f"wrote {path}")


def graphed(run, module=None):
    """Capture ``run`` (forward + backward of ``module``, or any work on static tensors) once as a
    CUDA graph; each call of the result replays it."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            run()
    torch.cuda.current_stream().wait_stream(stream)
    for p in module.parameters() if module is not None else ():
        p.grad = None  # the graph's backward allocates (and on each replay rewrites) the gradients
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    return graph.replay


def autotuned(*kernels) -> dict[str, dict[str, str]]:
    """The configurations Triton's autotuner chose for each of ``kernels``, by call key (for the JSON)."""
    return {k.base_fn.__name__: {str(key): str(config) for key, config in k.cache.items()} for k in kernels}
