"""How long ``import highwaynet`` and the command's help take, beside ``import torch``, in one run.

Each row is a fresh interpreter (``python -c ...`` or the ``highwaynet`` command) timed from start to
exit, the median of ``--repeats`` runs taken in turn, so that every row samples the same stretches
of the machine. ``import highwaynet`` alone imports no PyTorch (its names load on first use); the
layers' row is what a user's ``from highwaynet import RHN`` costs.

    python benchmarks/import_time.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

from provenance import stamp  # (this folder's module)

ROWS = {
    "python alone": [sys.executable, "-c", "pass"],
    "import torch": [sys.executable, "-c", "import torch"],
    "import highwaynet": [sys.executable, "-c", "import highwaynet"],
    "from highwaynet import * (the layers)": [sys.executable, "-c", "from highwaynet import *"],
    "highwaynet --help": ["highwaynet", "--help"],
    "highwaynet train mlp --help": ["highwaynet", "train", "mlp", "--help"],
    "highwaynet reproduce sentences --help": ["highwaynet", "reproduce", "sentences", "--help"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", default="benchmarks/import_time.json")
    args = parser.parse_args()
    # The console script where it is installed, else the module (the package run from a checkout)
    command = shutil.which("highwaynet", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    cli = [command] if command else [sys.executable, "-m", "highwaynet"]
    rows = {name: [*cli, *argv[1:]] if argv[0] == "highwaynet" else argv for name, argv in ROWS.items()}
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(args.repeats + 1):  # (the first round, untimed, warms the file cache)
        for name, argv in rows.items():
            start = time.perf_counter()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
            times[name].append(time.perf_counter() - start)
    seconds = {name: statistics.median(t[1:]) for name, t in times.items()}
    torch_s = seconds["import torch"]
    from highwaynet.training.run_dir import cpu_model  # (after the timings: it imports torch)

    device = f"{cpu_model()}, {os.cpu_count()} CPUs"
    print(f"Import and help times, median of {args.repeats} fresh processes each\n{device}, "
          f"Python {platform.python_version()}")
    width = max(map(len, seconds)) + 2
    print(f"{'':{width}}{'s':>8}{'- import torch (s)':>20}")
    for name, value in seconds.items():
        print(f"{name:{width}}{value:8.3f}{value - torch_s:20.3f}")
    import torch

    record = {"title": "import and help times", "command": "python benchmarks/import_time.py " + " ".join(sys.argv[1:]),
              "settings": vars(args), **stamp(), "torch": torch.__version__,
              "python": platform.python_version(), "device": device, "ms": {k: 1e3 * v for k, v in seconds.items()},
              "minus_import_torch_ms": {k: 1e3 * (v - torch_s) for k, v in seconds.items()}}
    with open(args.json, "w") as f:
        json.dump(record, f, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
