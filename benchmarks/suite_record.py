"""A test run's record as JSON: where it ran, at which commit, and what passed, failed and was skipped.

    python benchmarks/suite_record.py RESULTS OUT.json [--device NAME] [--command TEXT] [--note TEXT]

RESULTS is pytest's JUnit XML (``--junitxml``) or a file of its verbose lines (``pytest -v``:
``PASSED tests/...``, ``FAILED tests/...``). The record names the package version and commit
(``benchmarks/provenance.py``), the device, and the torch and Triton versions of this interpreter;
``benchmarks/gpu_suite.sh OUT tests-all`` writes one for the GPU, and the docs' performance page
shows the latest.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from provenance import stamp  # (this folder's module)


def _one_line(text: str | None) -> str:
    """The first line of a failure's message that says something, cut to 200 characters."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0][:200] if lines else ""


def outcomes_from_junit(path: Path) -> dict[str, tuple[str, str]]:
    """``{test id: (outcome, why)}`` from pytest's JUnit XML: the outcome ``"passed"``, ``"failed"``,
    ``"error"`` (in a fixture, or the module did not import) or ``"skipped"``; why, the first line of a
    failure's, error's or skip's message."""
    outcomes = {}
    for case in ElementTree.parse(path).iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        name = f"{module}.py::{case.get('name')}" if module else str(case.get("name"))
        found = {child.tag: child for child in case}
        kind = next((k for k in ("failure", "error", "skipped") if k in found), None)
        outcome = {"failure": "failed", "error": "error", "skipped": "skipped", None: "passed"}[kind]
        outcomes[name] = (outcome, "" if kind is None else _one_line(found[kind].get("message") or found[kind].text))
    return outcomes


def outcomes_from_lines(path: Path) -> dict[str, tuple[str, str]]:
    """The same from pytest's verbose lines: ``tests/x.py::test_y[a b] PASSED [ 10%]``, or under
    pytest-xdist ``[gw3] [ 10%] PASSED tests/x.py::test_y[a b]`` (an id may hold spaces), and the
    summary's ``FAILED tests/x.py::test_z - why`` (``-rfE``), which gives the why."""
    words = {"PASSED": "passed", "SKIPPED": "skipped", "FAILED": "failed", "ERROR": "error"}
    outcomes: dict[str, tuple[str, str]] = {}
    for line in path.read_text().splitlines():
        after = re.match(r"^(?:\[gw\d+\]\s*)?(?:\[\s*\d+%\]\s*)?(PASSED|FAILED|SKIPPED|ERROR)\s+(tests/.+?)"
                         r"(?:\s+-\s(.*))?\s*$", line)
        before = re.match(r"^(tests/\S.*?)\s+(PASSED|FAILED|SKIPPED|ERROR)\b.*$", line)
        if after:
            why = _one_line(after.group(3)) or outcomes.get(after.group(2), ("", ""))[1]
            outcomes[after.group(2)] = (words[after.group(1)], why)
        elif before:
            outcomes[before.group(1)] = (words[before.group(2)], outcomes.get(before.group(1), ("", ""))[1])
    return outcomes


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version(), "torch": None, "triton": None, "device": None}
    try:
        import torch

        found["torch"] = torch.__version__
        found["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    except ImportError:
        pass
    try:
        import triton

        found["triton"] = triton.__version__
    except ImportError:
        pass
    return found


def record(results: Path, command: str = "", note: str = "", title: str = "the test suite on a GPU",
           **given: str | None) -> dict:
    """The record of the run whose outcomes ``results`` holds; ``given`` (commit, date, device, torch,
    python, triton) replaces what this interpreter and checkout would say, for a run made elsewhere.
    ``failures`` and ``skips`` map each test id that failed (or errored) or skipped to its one-line why."""
    outcomes = outcomes_from_junit(results) if results.suffix == ".xml" else outcomes_from_lines(results)
    counts = {kind: sum(1 for v, _ in outcomes.values() if v == kind) for kind in ("passed", "failed", "skipped",
                                                                                   "error")}
    found = {**stamp(), **versions()}
    found.update({k: v for k, v in given.items() if v})
    return {"title": title, **found, "command": command, "passed": counts["passed"], "failed": counts["failed"],
            "skipped": counts["skipped"], "errors": counts["error"],
            "failures": {t: why for t, (v, why) in sorted(outcomes.items()) if v in ("failed", "error")},
            "skips": {t: why for t, (v, why) in sorted(outcomes.items()) if v == "skipped"}, "note": note}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="pytest's JUnit XML, or a file of its verbose lines")
    parser.add_argument("json", type=Path, help="where to write the record")
    parser.add_argument("--command", default="", help="the command that ran the tests")
    parser.add_argument("--note", default="", help="what else the reader should know about this run")
    parser.add_argument("--title", default="the test suite on a GPU", help="what the run was (default: %(default)s)")
    for name in ("commit", "date", "device", "python", "torch", "triton"):
        parser.add_argument(f"--{name}", help=f"the run's {name}, for a run made elsewhere (default: this "
                                              f"checkout's and interpreter's)")
    args = parser.parse_args()
    made = record(args.results, args.command, args.note, args.title, commit=args.commit, date=args.date,
                  device=args.device, python=args.python, torch=args.torch, triton=args.triton)
    args.json.write_text(json.dumps(made, indent=2) + "\n")
    print(f"{made['commit'][:10]} on {made['device']}: {made['passed']} passed, {made['failed']} failed, "
          f"{made['skipped']} skipped, {made['errors']} errors; wrote {args.json}")
    sys.exit(0)


if __name__ == "__main__":
    main()
