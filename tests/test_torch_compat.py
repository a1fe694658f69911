"""``benchmarks/torch_compat.py``, without installing anything: its arguments, what it would run, the
venvs it refuses, and the record of a tiny run in a stand-in venv (this interpreter behind a script)."""

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import process_timeout

import highwaynet

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "torch_compat.py"


def compat(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "HIGHWAYNET_TEST_TIMEOUT_SCALE"} | env
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=environment, capture_output=True,
                          text=True, timeout=process_timeout(120))


@pytest.fixture
def torch_compat(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    yield importlib.import_module("torch_compat")
    sys.modules.pop("torch_compat", None)


@pytest.fixture
def stand_in_venv(tmp_path) -> Path:
    """A folder whose ``bin/python`` is this interpreter (its torch, this checkout's highwaynet)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (venv / "bin" / "python").chmod(0o755)
    return venv


@pytest.mark.parametrize("version", ["2.3", "latest", "2.3.1; rm -rf /", "v2.3.1", ""])
def test_a_torch_that_is_not_a_release_number_is_refused(version):
    done = compat(version, "--dry-run")
    assert done.returncode == 2 and "is not a release number such as 2.3.1" in done.stderr, done.stderr


def test_dry_run_says_the_venv_the_tests_and_the_record(tmp_path):
    done = compat("2.3.1", "--dry-run", "--venv", str(tmp_path / "v"))
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert lines["venv"] == f"{tmp_path / 'v'} (made)"
    assert lines["record"] == str(ROOT / "benchmarks" / "torch_compat_2.3.1.json")
    tests = lines["tests"].split()
    assert tests[-1] == "tests" and "--junitxml" in tests  # the suite, as CI runs it, but for these three:
    assert {t for t in tests if t.startswith("--ignore=")} == {"--ignore=tests/test_docs.py",
                                                              "--ignore=tests/test_site_browser.py",
                                                              "--ignore=tests/test_wheel.py"}
    every = compat("2.3.1", "--dry-run", "--all").stdout
    assert "--ignore" not in every and f"{ROOT / '.venv-compat' / 'torch-2.3.1-py'}" in every
    # some tests only: their record stays beside the venv, the stored one untouched
    some = compat("2.3.1", "--dry-run", "--venv", str(tmp_path / "v"), "--", "tests/test_compile.py", "-k", "RHN")
    lines = dict(line.split(": ", 1) for line in some.stdout.splitlines())
    assert lines["tests"].endswith(" tests/test_compile.py -k RHN") and "--ignore" not in lines["tests"]
    assert lines["record"] == str(tmp_path / "v" / "logs" / "record.json")


def test_a_venv_is_reused_only_when_asked_and_only_with_the_torch_asked(stand_in_venv):
    done = compat(torch.__version__.split("+")[0], "--venv", str(stand_in_venv))
    assert done.returncode != 0 and "exists: pass --reuse" in done.stderr
    done = compat("1.13.1", "--venv", str(stand_in_venv), "--reuse")
    assert done.returncode != 0 and f"has torch {torch.__version__}, not 1.13.1" in done.stderr
    assert [p.name for p in stand_in_venv.iterdir()] == ["bin"]  # nothing installed, nothing removed


def test_dev_requirements_spell_out_the_extras_and_leave_triton_to_a_torch_that_brings_one(torch_compat):
    kept = torch_compat.dev_requirements(torch_brings_triton=False)
    assert not any(r.startswith("highwaynet") for r in kept)
    assert {"sphinx>=7.2", "pytest>=7", "onnxruntime>=1.18"} <= set(kept)  # docs' and dev's own
    assert len(kept) == len(set(kept)) and any(r.startswith("triton") for r in kept)
    assert torch_compat.dev_requirements(torch_brings_triton=True) == [r for r in kept if not r.startswith("triton")]


def test_a_tiny_run_writes_its_record(stand_in_venv, tmp_path):
    tests = tmp_path / "test_four.py"
    tests.write_text("import pytest\n\n@pytest.fixture\ndef broken():\n    raise OSError('no disk')\n\n"
                     "def test_passes():\n    pass\n\ndef test_fails():\n    assert 1 == 2, 'one is not two'\n\n"
                     "def test_skips():\n    pytest.skip('needs torch >= 9.1')\n\ndef test_errors(broken):\n    pass\n")
    out = tmp_path / "record.json"
    done = compat(torch.__version__.split("+")[0], "--venv", str(stand_in_venv), "--reuse", "--json", str(out),
                  "--note", "a tiny run", "--", str(tests), "--rootdir", str(tmp_path),
                  HIGHWAYNET_TEST_TIMEOUT_SCALE="3")  # (ids relative to tmp_path wherever the checkout is: pytest
    # takes the common ancestor of the checkout, its working folder, and the tests as the root otherwise)
    assert done.returncode == 1, done.stderr  # a failure: not a passing run
    record = json.loads(out.read_text())
    assert (record["passed"], record["failed"], record["skipped"], record["errors"]) == (1, 1, 1, 1)
    assert record["failures"] == {"test_four.py::test_errors": "failed on setup with \"OSError: no disk\"",
                                  "test_four.py::test_fails": "AssertionError: one is not two"}
    assert record["skips"] == {"test_four.py::test_skips": "needs torch >= 9.1"}
    assert record["torch"] == torch.__version__ and record["highwaynet"] == highwaynet.__version__
    assert record["python"] == ".".join(map(str, sys.version_info[:3])) and record["platform"]
    assert record["install_seconds"] is None and record["seconds"] > 0 and record["note"] == "a tiny run"
    assert record["title"] == f"the test suite on torch {torch.__version__.split('+')[0]}"
    # (the commit, "+modified" where the checkout's code differs from it, as it does while one works)
    assert re.fullmatch(r"[0-9a-f]{40}(\+modified)?", record["commit"])
    assert record["date"] and record["pytest_exit"] == 1
    assert record["command"] == (f"HIGHWAYNET_TEST_TIMEOUT_SCALE=3 python benchmarks/torch_compat.py "
                                 f"{torch.__version__.split('+')[0]} -- {tests} --rootdir {tmp_path}")  # what reruns it
    assert (stand_in_venv / "logs" / "suite.txt").is_file() and (stand_in_venv / "constraints.txt").read_text() == \
        f"torch=={torch.__version__.split('+')[0]}\n"


def test_the_testing_page_lists_the_records_oldest_torch_first_with_failures_and_skips(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "docs" / "_ext"))
    results = importlib.import_module("results")
    monkeypatch.setattr(results, "BENCHMARKS", tmp_path)
    monkeypatch.setattr(results, "GENERATED", tmp_path / "generated")
    assert "No run on another torch" in results.torch_compat().read_text()
    base = {"python": "3.11.7", "platform": "Linux-x86_64", "date": "2026-11-27", "commit": "0123456789abcdef",
            "highwaynet": "0.4.0", "packages": {"onnx": "1.17.0", "triton": None}, "command": "python benchmarks/...",
            "note": "", "passed": 9, "skipped": 2, "seconds": 600.0}
    for version, failures, install in (("2.15.0", {}, None),
                                       ("2.3.1", {"tests/test_a.py::test_b": "needs more torch"},
                                        {"venv and torch": 200.0, "package and test tools": 100.0})):
        (tmp_path / f"torch_compat_{version}.json").write_text(json.dumps(base | {
            "torch": f"{version}+cu121", "failed": len(failures), "errors": 0, "failures": failures,
            "install_seconds": install, "venv_gb": 4.91,
            "skips": {"tests/test_a.py::test_c": "why one", "tests/test_a.py::test_d": "why one"}}))
    page = results.torch_compat().read_text()
    sys.modules.pop("results", None)
    assert page.index("| **2.3.1+cu121** |") < page.index("| **2.15.0+cu121** |")  # by release, not as text
    assert page.count("`benchmarks/torch_compat_") == 2 and "| 10.0 min | 5.0 min, 4.9 GB |" in page
    assert "| 10.0 min | (a venv made before) |" in page
    assert "- `tests/test_a.py::test_b`: needs more torch" in page and "- why one (2)" in page
    assert "onnx 1.17.0" in page and "triton" not in page


def test_a_reused_venv_gets_only_the_test_tools_it_lacks(torch_compat):
    # (a venv made before a requirement was added gets it; nothing it has is installed again)
    wanted = ["pytest>=7", "h5py>=3.8", "no-such-distribution-of-highwaynets>=1.0"]
    assert torch_compat.lacking(Path(sys.executable), wanted) == ["no-such-distribution-of-highwaynets>=1.0"]
