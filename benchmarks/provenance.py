"""What made a stored number: the package version, the commit and the date, for every record that
``benchmarks/`` writes (a benchmark's table, the test suite's record), so that a page drawn from the
JSON can say which version it measured.

The commit is ``git rev-parse HEAD``, marked ``+modified`` where the package's or the scripts' tracked
files differ from it (the numbers then came from code no commit holds), or ``$HIGHWAYNET_COMMIT``
where the tree is a copy without its history (a lent GPU machine's).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The files whose changes change a measurement: the package and the scripts, not the records they write
# (a run of several benchmarks rewrites the stored JSON as it goes) nor the docs.
MEASURING = ("src", "benchmarks/*.py", "benchmarks/*.sh", "pyproject.toml")


def commit() -> str:
    """The checkout's commit, ``+modified`` where the files of :data:`MEASURING` were changed since."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=ROOT).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", *MEASURING],
                                 capture_output=True, text=True, check=True, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("HIGHWAYNET_COMMIT", "unknown")
    return head + "+modified" * bool(changed)


def version() -> str:
    """The version of the highwaynet that this interpreter imports (the checkout's, run from it)."""
    try:
        import highwaynet  # (imports no torch)
    except ImportError:
        return "unknown"
    return highwaynet.__version__


def stamp() -> dict[str, str]:
    """``{"highwaynet": version, "commit": ..., "date": YYYY-MM-DD}`` for a record's top level."""
    return {"highwaynet": version(), "commit": commit(), "date": time.strftime("%Y-%m-%d")}
