"""The benchmark scripts run end to end at a tiny shape and write the table they promise (the CPU
ones as they are; the GPU rows of ``rhn_step.py`` and ``rhn.py`` under Triton's interpreter).

Not a timing test (speed is read from the scripts' own tables): this keeps the scripts from
breaking silently when the code they measure changes. The scripts that compare implementations
(the dense stack, the MLP step, the RHN) first check that their rows compute the same values, so
a run that finishes also says the compared implementations still agree.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import interpreter_runs_micro_steps, process_timeout

from highwaynet.training.trainer import _FUSED_ON_CPU

ROOT = Path(__file__).resolve().parents[1]


def run_script(script: str, args: list[str], out: Path, interpret: bool = False) -> dict[str, float]:
    """Run ``benchmarks/script`` (under Triton's interpreter if asked), check that it finished and
    said where it wrote its JSON, and return that JSON's times by row."""
    env = {**os.environ, "TRITON_INTERPRET": "1"} if interpret else None
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args, "--json", str(out)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=process_timeout(600))
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"wrote {out}" in run.stdout
    record = json.loads(out.read_text())
    assert_stamped(record)
    return record["ms"]


def assert_stamped(record: dict) -> None:
    """A stored number names the version and commit that made it (``benchmarks/provenance.py``)."""
    import highwaynet

    assert record["highwaynet"] == highwaynet.__version__, record.get("highwaynet")
    assert re.fullmatch(r"[0-9a-f]{40}(\+modified)?", record["commit"]), record["commit"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", record["date"]), record["date"]

# script, tiny arguments, rows the JSON must hold
SCRIPTS = [
    ("dense_highway.py", ["--tokens", "64", "--dim", "16", "--layers", "2", "--repeats", "1", "--no-compile",
                          "--max-autotune"],
     {"floor (projections alone)", "ours: Highway, eager", "ours: Highway(fused=False), compile max-autotune"}),
    ("mlp_step.py", ["--depth", "3", "--width", "8", "--batch", "4", "--repeats", "1"],
     {"separate H and T, eager (Chainer, Lasagne)", "ours, eager"}),
    ("rhn.py", ["--depth", "2", "--hidden", "8", "--steps", "3", "--batch", "2", "--repeats", "1"],
     {"labml as written", "floor", "ours", "ours, torch.compile"}),
    ("rhn.py", ["--depth", "2", "--hidden", "8", "--steps", "3", "--batch", "2", "--repeats", "1",
                "--dtype", "bfloat16"],
     {"labml as written", "floor", "ours", "ours, torch.compile"}),
    ("rhn_cpu_parts.py", ["--depth", "2", "--hidden", "8", "--steps", "3", "--batch", "2", "--repeats", "1"],
     {"window", "forward", "forward: products", "backward", "backward: walk products"}),
    ("elmo.py", ["--projection", "8", "--cells", "16", "--filters", "tiny", "--batch", "2", "--tokens", "5",
                 "--repeats", "1", "--whole"],
     {"floor (products alone)", "ours", "ours, PyTorch operations", "AllenNLP per-step", "biLM: ours",
      "biLM: AllenNLP per-step LSTMs"} | ({"floor, MKL packed weights"} if torch.backends.mkl.is_available()
                                          else set())),
    ("import_time.py", ["--repeats", "1"], {"import torch", "import highwaynet", "highwaynet --help"}),
    ("optimizer_step.py", ["--vocab", "50", "--repeats", "1"],
     {f"{model}: {what}, {impl}" for model in ("sentences", "depth", "lm") for what in ("update", "training step")
      for impl in ("default", "fused")}),
]


@pytest.mark.parametrize("script, args, rows", SCRIPTS,
                         ids=[s[0] + " bfloat16" * ("bfloat16" in s[1]) for s in SCRIPTS])
def test_cpu_benchmark_runs_and_writes_its_table(tmp_path, script, args, rows):
    if script == "optimizer_step.py" and not _FUSED_ON_CPU:
        pytest.skip("PyTorch's fused CPU updates need torch >= 2.4")
    times = run_script(script, args, tmp_path / "result.json")
    assert rows <= set(times), sorted(times)
    assert all(ms > 0 for ms in times.values())


@interpreter_runs_micro_steps
def test_gpu_micro_step_benchmark_runs_under_the_interpreter(tmp_path):
    """``rhn_step.py`` is for a GPU, where each run is paid for in scarce device time: run every row
    once on the CPU under Triton's interpreter at a tiny shape, so that a broken row shows here."""
    rows = run_script("rhn_step.py", ["--device", "cpu", "--batch", "3", "--hidden", "20", "--micro-steps", "2",
                                      "--depth", "3", "--repeats", "1"], tmp_path / "result.json", interpret=True)
    assert {f"{way}: one kernel, {layout}, 3 weights in turn" for way in ("forward", "backward")
            for layout in ("R and states padded", "all padded")} <= set(rows), sorted(rows)
    assert len(rows) == 19 and all(ms > 0 for ms in rows.values())


@interpreter_runs_micro_steps
def test_rhn_benchmark_times_both_one_kernel_layouts_under_the_interpreter(tmp_path):
    """On a GPU ``rhn.py`` times the one-kernel path in both layouts side by side (``RHNPath``'s two one-kernel paths)
    after checking that they compute the same: here on the CPU under Triton's interpreter, at a tiny shape."""
    rows = run_script("rhn.py", ["--device", "cpu", "--tf32", "--depth", "2", "--hidden", "20", "--steps", "3",
                                 "--batch", "3", "--repeats", "1", "--tiles", "16x16x16x4"], tmp_path / "result.json",
                      interpret=True)
    assert {"ours", "ours, halves padded", "ours, one kernel a micro-step", "ours, persistent kernel",
            "ours, persistent kernel, tiles 16x16x16x4"} <= set(rows), sorted(rows)


@interpreter_runs_micro_steps
def test_elmo_benchmark_times_the_persistent_kernel_under_the_interpreter(tmp_path):
    """``elmo.py``'s persistent-kernel rows (default tiles and others, the path forced through ELMo's
    layer), checked against AllenNLP's per-step algorithm before they are timed: on the CPU under
    Triton's interpreter, at a tiny shape."""
    rows = run_script("elmo.py", ["--device", "cpu", "--tf32", "--projection", "16", "--cells", "20", "--filters",
                                  "tiny", "--batch", "3", "--tokens", "3", "--repeats", "1", "--no-warmup",
                                  "--tiles", "16x16x16x4"], tmp_path / "result.json", interpret=True)
    assert {"ours, persistent kernel", "ours, persistent kernel, tiles 16x16x16x4", "ours, PyTorch operations",
            "AllenNLP per-step"} <= set(rows), sorted(rows)


def test_rhn_benchmark_switches_reach_what_the_layer_reads(monkeypatch):
    """The rows "ours, halves padded", "ours, one kernel a micro-step", "ours, persistent kernel" and
    "ours, PyTorch operations" time another way only if their switches change what the layer reads
    (the first once set an attribute of the function ``kernels.rhn_recurrence`` instead of its
    module's, and timed the default layout twice): the padded layout and one kernel replace the
    layer's own choice of one kernel or the persistent kernel, the persistent kernel any Triton
    path, and nothing else."""
    import importlib

    import torch

    import highwaynet.nn.rhn as layer
    from highwaynet.kernels import rhn_cpu
    from highwaynet.kernels.dispatch import Choice
    from highwaynet.kernels.rhn_recurrence import RHNPath

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    bench = importlib.import_module("rhn")
    original = layer.choose_path
    x = torch.zeros(2, 3, 8)
    switches = {bench.with_halves_padded: {RHNPath.ONE_KERNEL: RHNPath.ONE_KERNEL_PADDED_HALVES,
                                           RHNPath.PERSISTENT: RHNPath.ONE_KERNEL_PADDED_HALVES},
                bench.with_one_kernel: {RHNPath.PERSISTENT: RHNPath.ONE_KERNEL},
                bench.with_persistent_kernel: {p: RHNPath.PERSISTENT for p in (
                    RHNPath.GATE_KERNEL, RHNPath.ONE_KERNEL, RHNPath.PERSISTENT)}}
    for switch, replaced in switches.items():
        for chosen in (*replaced, RHNPath.CPP, RHNPath.LOOP):
            monkeypatch.setattr(bench, "choose_path", lambda *a, _path=chosen, **k: Choice(_path, "test"))
            assert switch(lambda: layer.choose_path(x, x[0], None, ()).path)() is replaced.get(chosen, chosen)
            assert layer.choose_path is original
    assert bench.without_cpp_loops(lambda: rhn_cpu.enabled)() is False
    assert rhn_cpu.enabled is True


def test_gpu_suite_names_scripts_and_options_that_exist(tmp_path):
    """``gpu_suite.sh`` is run only on a GPU, where a misspelt option would cost a device call: with
    ``python3`` replaced by a stand-in that records its arguments, every part must call existing
    scripts with options their parsers know, and an unknown part must be refused."""
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "calls"}\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"}
    suite = ["bash", str(ROOT / "benchmarks" / "gpu_suite.sh"), str(tmp_path / "out")]
    refused = subprocess.run([*suite, "benches"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert refused.returncode == 2 and "unknown part 'benches'" in refused.stderr
    for part in ("bench-rhn", "bench-dense", "bench-rest", "bench-persistent"):
        assert subprocess.run([*suite, part], cwd=ROOT, env=env, capture_output=True).returncode == 0
    calls = [line.split() for line in (tmp_path / "calls").read_text().splitlines()
             if line.startswith("benchmarks/")]
    assert len(calls) == 12, calls  # 3 RHN, 2 dense, 3 rest, 4 persistent
    assert sum("[" in line and " s] benchmarks/" in line
               for line in (tmp_path / "out" / "bench.log").read_text().splitlines()) == 12
    options: dict[str, set[str]] = {}  # each script's options, as its --help lists them
    for script, *args in calls:
        if script not in options:
            help_text = subprocess.run([sys.executable, str(ROOT / script), "--help"], cwd=ROOT,
                                       capture_output=True, text=True, check=True).stdout
            options[script] = set(re.findall(r"(?<![\w-])--[\w-]+", help_text))
        unknown = [a for a in args if a.startswith("--") and a not in options[script]]
        assert not unknown, f"{script}: {unknown}"


def test_gpu_suite_runs_the_whole_suite_and_keeps_its_record(tmp_path):
    """``gpu_suite.sh OUT tests-all``: pytest over every test but the site's, the browser's and the wheel's,
    then ``suite_record.py`` (with options it knows) on its results."""
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\nprintf '%s\\037' \"$@\" >> {tmp_path / 'calls'}\necho >> {tmp_path / 'calls'}\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "SUITE_LIMIT": "60"}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_suite.sh"), str(tmp_path / "out"), "tests-all"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    calls = [line.split("\x1f")[:-1] for line in (tmp_path / "calls").read_text().splitlines()]
    (pytest_call,) = [c for c in calls if c[:2] == ["-m", "pytest"]]
    for ignored in ("tests/test_docs.py", "tests/test_site_browser.py", "tests/test_wheel.py"):
        assert pytest_call[pytest_call.index(ignored) - 1] == "--ignore", ignored
    assert {"--junitxml", "-n"} <= set(pytest_call) and pytest_call[-1] == "tests"
    (record_call,) = [c for c in calls if c[0] == "benchmarks/suite_record.py"]
    help_text = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "suite_record.py"), "--help"],
                               capture_output=True, text=True, check=True).stdout
    flags = [a for a in record_call if a.startswith("--")]
    assert flags and all(re.search(rf"(?<![\w-]){a}\b", help_text) for a in flags), record_call


def test_suite_record_counts_what_pytest_said(tmp_path):
    """From pytest's JUnit XML, and from its verbose lines (what is left of a run cut at its limit)."""
    tests = tmp_path / "tests" / "test_three.py"
    tests.parent.mkdir()
    tests.write_text("import pytest\n\ndef test_passes():\n    pass\n\n"
                     "def test_fails():\n    assert 1 == 2, 'not 2'\n\n"
                     "@pytest.mark.parametrize('x', ['a b'])\ndef test_skips(x):\n    pytest.skip('no')\n\n"
                     "@pytest.fixture\ndef broken():\n    raise OSError('disk')\n\n"
                     "def test_errors(broken):\n    pass\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-v", "-rfE", "-p", "no:cacheprovider", "--junitxml",
                          str(tmp_path / "suite.xml"), "tests/test_three.py"], cwd=tmp_path, capture_output=True,
                         text=True)
    (tmp_path / "suite.txt").write_text(run.stdout)
    for results in ("suite.xml", "suite.txt"):
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "suite_record.py"), str(tmp_path / results),
                               str(tmp_path / "record.json"), "--device", "a GPU", "--command", "pytest"],
                              capture_output=True, text=True, timeout=process_timeout(60))
        assert done.returncode == 0, done.stderr
        record = json.loads((tmp_path / "record.json").read_text())
        assert (record["passed"], record["failed"], record["skipped"], record["errors"]) == (1, 1, 1, 1), results
        assert list(record["failures"]) == ["tests/test_three.py::test_errors", "tests/test_three.py::test_fails"]
        assert "not 2" in record["failures"]["tests/test_three.py::test_fails"] and record["device"] == "a GPU"
        assert "OSError: disk" in record["failures"]["tests/test_three.py::test_errors"], record["failures"]
        assert list(record["skips"]) == ["tests/test_three.py::test_skips[a b]"]
        assert record["command"] == "pytest"
        assert_stamped(record)


def test_provenance_says_which_commit_and_whether_the_code_was_changed(tmp_path, monkeypatch):
    """A number measured on code that no commit holds says so (``+modified``); a tree without its
    history (a lent GPU machine's copy) names ``$HIGHWAYNET_COMMIT``."""
    import importlib

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    provenance = importlib.import_module("provenance")
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "benchmarks").mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    (repo / "src" / "code.py").write_text("a = 1\n")
    (repo / "benchmarks" / "speed.json").write_text("{}\n")
    (repo / "benchmarks" / "speed.py").write_text("b = 1\n")
    for step in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "one"]):
        subprocess.run([*git, *step], cwd=repo, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    monkeypatch.setattr(provenance, "ROOT", repo)
    assert provenance.commit() == head
    (repo / "src" / "notes.txt").write_text("untracked files do not count\n")
    (repo / "benchmarks" / "speed.json").write_text('{"ms": {}}\n')  # (nor the records a run rewrites)
    assert provenance.commit() == head
    (repo / "benchmarks" / "speed.py").write_text("b = 2\n")
    assert provenance.commit() == head + "+modified"
    subprocess.run(["git", "checkout", "-q", "--", "benchmarks/speed.py"], cwd=repo, check=True)
    (repo / "src" / "code.py").write_text("a = 2\n")
    assert provenance.commit() == head + "+modified"
    copy = tmp_path / "copy"
    copy.mkdir()
    monkeypatch.setattr(provenance, "ROOT", copy)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.setenv("HIGHWAYNET_COMMIT", "abc123")
    assert provenance.commit() == "abc123"


def test_performance_page_names_the_version_that_measured_each_table(monkeypatch):
    """Each table on the performance page says which highwaynet measured it, or that its record is
    older than the stamp."""
    import importlib

    monkeypatch.syspath_prepend(str(ROOT / "docs" / "_ext"))
    results = importlib.import_module("results")
    record = {"title": "t", "ms": {"a": 1.0, "b": 2.0}, "ratio_to_a": {"a": 1.0, "b": 2.0}, "torch": "2.13.0",
              "device": "a CPU"}
    old = results._table(record, "rhn_cpu", "rhn")
    assert "Made before 0.4 (its version not recorded)" in old
    stamped = results._table(record | {"highwaynet": "0.4.0", "commit": "0123456789abcdef+modified",
                                       "date": "2026-11-28"}, "rhn_cpu", "rhn")
    assert "highwaynet 0.4.0 (commit 0123456789+modified, 2026-11-28), torch 2.13.0" in stamped


def test_performance_page_tells_apart_two_tables_of_one_machine_and_precision(tmp_path, monkeypatch):
    """Two records of one section, machine and precision (the RHN on the CPU with and without
    ``--compile-loop``) get headings that differ: the file's name is added to both; a table alone
    under its heading keeps the heading short."""
    import importlib

    monkeypatch.syspath_prepend(str(ROOT / "docs" / "_ext"))
    results = importlib.import_module("results")
    record = {"title": "t", "ms": {"a": 1.0}, "torch": "2.13.0", "device": "a CPU", "settings": {}}
    for name, device in (("rhn_cpu", "a CPU"), ("rhn_cpu_loop", "a CPU"), ("rhn_gpu", "a GPU")):
        (tmp_path / f"{name}.json").write_text(json.dumps(record | {"device": device}))
    monkeypatch.setattr(results, "BENCHMARKS", tmp_path)
    monkeypatch.setattr(results, "GENERATED", tmp_path / "generated")
    headings = [line for line in results.performance().read_text().splitlines() if line.startswith("### ")]
    assert headings == ["### a CPU, float32 (`rhn_cpu.json`)", "### a CPU, float32 (`rhn_cpu_loop.json`)",
                        "### a GPU, float32"], headings


def test_every_stored_benchmark_gets_a_sentence_of_its_own(monkeypatch):
    """Each stored table on the performance page is read by a sentence written for its benchmark, drawn
    from its rows; the generic "fastest row" sentence (what a renamed row falls back to) is for
    benchmarks without one."""
    import importlib

    monkeypatch.syspath_prepend(str(ROOT / "docs" / "_ext"))
    results = importlib.import_module("results")
    sections = [prefix for prefix, _ in results.BENCHMARK_SECTIONS]
    stored = [p for p in sorted((ROOT / "benchmarks").glob("*.json")) if "ms" in json.loads(p.read_text())]
    assert stored
    for path in stored:
        section = max((s for s in sections if path.stem.startswith(s)), key=len, default=None)
        assert section, f"{path.name} has no section on the performance page (results.BENCHMARK_SECTIONS)"
        sentence = results._interpretation(section, json.loads(path.read_text()))
        assert not sentence.startswith("The fastest row is"), (path.name, sentence)
