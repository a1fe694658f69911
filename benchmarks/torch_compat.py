"""The test suite on another PyTorch: a venv with that torch, the package and its test tools, then
pytest, then a JSON record of the run.

    python benchmarks/torch_compat.py 2.3.1                 # makes .venv-compat/torch-2.3.1-py3.11
    python benchmarks/torch_compat.py 2.3.1 --reuse         # again, in the venv it made
    python benchmarks/torch_compat.py 2.4.1 --python python3.10 --venv /scratch/t241 --reuse

The record (``benchmarks/torch_compat_<version>.json`` unless ``--json`` says otherwise, or tests are
named after ``--``) holds the torch, Python and platform, the date, commit and package version, the
counts passed / failed / skipped / errors, each failure's and skip's test id with its one-line why,
and the times to install and to test. ``benchmarks/suite_record.py`` writes it from pytest's JUnit
XML, as for ``gpu_suite.sh``'s run of the suite on a GPU; the docs' Testing page shows the stored
records of both from this folder. The logs stay beside the venv (``VENV/logs``).

What runs is what CI runs (``python -m pytest``, every test under ``tests/``), without the
documentation site, its browser checks and the wheel build (``--all`` keeps them): these build the
site and the wheel from the checkout, and the gallery's examples they run are run by
``tests/test_examples.py`` too.

The venv gets ``torch==VERSION`` from the package index (PyPI's default wheels: CUDA builds, a few GB
with their NVIDIA libraries, that run on a CPU too), then the package (editable) with its ``dev``
extra. Where torch's wheel brings its own Triton (its CUDA builds), the ``dev`` extra's Triton
requirement is left out: an old torch pins a Triton older than 3, and a user of that torch has that
Triton (the Triton kernels' tests then skip, saying why). A pip constraint file of the venv's own
(``PIP_CONSTRAINT``) pins torch to VERSION for every install, and stands in for any constraint the
machine's pip configuration sets. An existing venv is used only with ``--reuse``, and only if its
torch is VERSION; this script deletes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite_record import record  # noqa: E402 (this folder's module)

#: The tests left out unless --all: the site, its browser checks, the wheel build.
NOT_TORCH_TESTS = ("tests/test_docs.py", "tests/test_site_browser.py", "tests/test_wheel.py")
#: What the record names of the venv's packages, besides torch.
PACKAGES = ("triton", "numpy", "onnx", "onnxscript", "onnxruntime")
_VERSION = re.compile(r"\d+\.\d+\.\d+")

# Run in the venv's interpreter: what it has, as JSON.
_PROBE = """
import importlib.metadata as metadata, json, platform, sys
found = {"python": platform.python_version(), "platform": platform.platform()}
try:
    import torch
    found["torch"] = torch.__version__
    found["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
except ImportError:
    found["torch"] = None
try:
    import highwaynet
    found["highwaynet"], found["highwaynet_file"] = highwaynet.__version__, highwaynet.__file__
except ImportError:
    found["highwaynet"] = found["highwaynet_file"] = None
for name in sys.argv[1:]:
    try:
        found[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        found[name] = None
print(json.dumps(found))
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], usage="%(prog)s VERSION [options] "
                                     "[-- PYTEST_ARGS: what pytest runs instead of the suite]",
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:6]))
    parser.add_argument("torch", help="the torch version to test, as pip names it: 2.3.1")
    parser.add_argument("--python", default="python3", help="the interpreter the venv is made from (default: "
                                                             "%(default)s)")
    parser.add_argument("--venv", type=Path, help="the venv's folder (default: .venv-compat/torch-VERSION-pyX.Y "
                                                  "in the checkout)")
    parser.add_argument("--reuse", action="store_true", help="use the venv if it is there (its torch must be "
                                                             "VERSION); without it an existing venv is refused")
    parser.add_argument("--json", type=Path, help="where to write the record (default: "
                                                  "benchmarks/torch_compat_VERSION.json)")
    parser.add_argument("--all", action="store_true", help="the docs, browser and wheel tests too")
    parser.add_argument("--note", default="", help="what else the reader should know about this run")
    parser.add_argument("--dry-run", action="store_true", help="say what would be done, do nothing")
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    args.pytest_args = argv[cut + 1:]  # what pytest runs instead of the suite: -- tests/test_compile.py -k RHN
    if not _VERSION.fullmatch(args.torch):
        parser.error(f"torch: {args.torch!r} is not a release number such as 2.3.1")
    if shutil.which(args.python) is None:
        parser.error(f"--python: {args.python!r} is not an interpreter on PATH")
    return args


def python_tag(python: str) -> str:
    """``py3.11`` for the interpreter ``python``."""
    return subprocess.run([python, "-c", "import sys; print('py%d.%d' % sys.version_info[:2])"], capture_output=True,
                          text=True, check=True).stdout.strip()


def default_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    """The venv's folder and the record's file, as given or by default (a run of some tests only, in
    ``VENV/logs``: it does not replace the stored record of the suite)."""
    venv = (args.venv or ROOT / ".venv-compat" / f"torch-{args.torch}-{python_tag(args.python)}").absolute()
    stored = ROOT / "benchmarks" / f"torch_compat_{args.torch}.json"
    return venv, (args.json or (venv / "logs" / "record.json" if args.pytest_args else stored)).absolute()


def dev_requirements(torch_brings_triton: bool) -> list[str]:
    """The ``dev`` extra's requirements, with the extras of this package it names spelt out, and without
    Triton where torch's wheel brings its own."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def expand(name: str) -> list[str]:
        found = []
        for requirement in extras[name]:
            inner = re.fullmatch(r"highwaynet\[([\w,-]+)\]", requirement.replace(" ", ""))
            found += [r for extra in inner.group(1).split(",") for r in expand(extra)] if inner else [requirement]
        return found

    return [r for r in dict.fromkeys(expand("dev"))
            if not (torch_brings_triton and re.match(r"triton\b", r))]


def probe(python: Path) -> dict:
    """What the venv's interpreter has: Python, platform, torch, highwaynet and :data:`PACKAGES`."""
    done = subprocess.run([str(python), "-c", _PROBE, *PACKAGES], capture_output=True, text=True, cwd="/")
    if done.returncode:
        raise SystemExit(f"{python} does not run: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout)


def lacking(python: Path, requirements: list[str]) -> list[str]:
    """The ``requirements`` whose distribution the venv's interpreter does not have (their versions are
    not compared: a reused venv keeps what it was made with)."""
    names = [re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0] for r in requirements]
    code = ("import importlib.metadata as m, json, sys\nfound = []\nfor n in sys.argv[1:]:\n    try:\n"
            "        m.version(n)\n    except m.PackageNotFoundError:\n        found.append(n)\n"
            "print(json.dumps(found))")
    done = subprocess.run([str(python), "-c", code, *names], capture_output=True, text=True, cwd="/", check=True)
    absent = set(json.loads(done.stdout))
    return [r for r, n in zip(requirements, names, strict=True) if n in absent]


def run(command: list[str], env: dict[str, str], log: Path) -> None:
    """Run ``command``, its output appended to ``log``; stop, showing the log's end, if it fails."""
    print("$", " ".join(command), flush=True)
    with log.open("a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        code = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    if code:
        raise SystemExit(f"failed (exit {code}): {' '.join(command)}\n"
                         + "\n".join(log.read_text().splitlines()[-30:]) + f"\n(all of it in {log})")


def venv_env(venv: Path) -> dict[str, str]:
    """The environment of a shell with the venv activated, and pip held to the venv's constraint file."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONPATH")}
    return {**env, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            "PIP_CONSTRAINT": str(venv / "constraints.txt")}


def install(args: argparse.Namespace, venv: Path) -> dict[str, float] | None:
    """Make the venv (or check the one there) and install into it, logging to ``VENV/logs/install.log``;
    the seconds each install took (download included), None if the venv was there."""
    python, log, env = venv / "bin" / "python", venv / "logs" / "install.log", venv_env(venv)
    if venv.exists():
        if not args.reuse:
            raise SystemExit(f"{venv} exists: pass --reuse to test in it, or --venv another folder")
        found = probe(python)
        if found["torch"] is None or found["torch"].split("+")[0] != args.torch:
            raise SystemExit(f"{venv} has torch {found['torch']}, not {args.torch}: pass --venv another folder")
        log.parent.mkdir(exist_ok=True)
        if not (venv / "constraints.txt").exists():  # a venv made otherwise
            (venv / "constraints.txt").write_text(f"torch=={args.torch}\n")
        if found["highwaynet_file"] is None or not Path(found["highwaynet_file"]).is_relative_to(ROOT / "src"):
            # another checkout's editable install (or none): this one's instead, the rest as it is
            run([str(python), "-m", "pip", "install", "-q", "--no-deps", "-e", str(ROOT)], env, log)
        missing = lacking(python, dev_requirements(found["triton"] is not None))
        if missing:  # (a test tool required since the venv was made)
            run([str(python), "-m", "pip", "install", "-q", *missing], env, log)
        return None
    start = time.perf_counter()
    subprocess.run([args.python, "-m", "venv", str(venv)], check=True)
    log.parent.mkdir()
    (venv / "constraints.txt").write_text(f"torch=={args.torch}\n")
    run([str(python), "-m", "pip", "install", "-q", f"torch=={args.torch}"], env, log)
    seconds = {"venv and torch": round(time.perf_counter() - start, 1)}
    brings_triton = probe(python)["triton"] is not None
    run([str(python), "-m", "pip", "install", "-q", "-e", str(ROOT), *dev_requirements(brings_triton)], env, log)
    return seconds | {"package and test tools": round(time.perf_counter() - start - seconds["venv and torch"], 1)}


def size(folder: Path) -> int:
    """Bytes in the files under ``folder`` (links not followed)."""
    return sum(path.lstat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


def pytest_command(args: argparse.Namespace, junit: Path) -> list[str]:
    """pytest's arguments: the suite as CI runs it (or what follows ``--``), its JUnit XML to ``junit``,
    and each test's line as it ends (``-v``: the record of a run cut short, and a log to watch)."""
    options = ["-m", "pytest", "-v", "-p", "no:cacheprovider", "-rfE", "--junitxml", str(junit)]
    if args.pytest_args:
        return options + args.pytest_args
    return options + [f"--ignore={name}" for name in NOT_TORCH_TESTS if not args.all] + ["tests"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    venv, out = default_paths(args)
    logs = venv / "logs"
    junit = logs / "suite.xml"
    pytest = pytest_command(args, junit)
    if args.dry_run:
        print(f"venv: {venv} ({'reused' if args.reuse and venv.exists() else 'made'})\n"
              f"tests: python {' '.join(pytest)}\nrecord: {out}")
        return 0
    install_seconds = install(args, venv)
    found = probe(venv / "bin" / "python")
    print(f"torch {found['torch']}, Python {found['python']}, highwaynet {found['highwaynet']} in {venv}", flush=True)
    junit.unlink(missing_ok=True)
    start = time.perf_counter()
    with (logs / "suite.txt").open("w") as text:
        code = subprocess.run([str(venv / "bin" / "python"), *pytest], env=venv_env(venv), stdout=text,
                              stderr=subprocess.STDOUT, cwd=ROOT).returncode
    seconds = time.perf_counter() - start
    print("\n".join((logs / "suite.txt").read_text().splitlines()[-15:]))
    results, note = junit, args.note
    if not junit.exists():  # cut short: what its lines say (pytest -v names each test as it finishes)
        results, note = logs / "suite.txt", "; ".join(filter(None, [note, f"pytest stopped (exit {code}) before "
                                                                         "its end: tests not yet run are missing"]))
    scale = os.environ.get("HIGHWAYNET_TEST_TIMEOUT_SCALE")  # (tests/conftest.py: the subprocesses' time limits)
    command = " ".join([*([f"HIGHWAYNET_TEST_TIMEOUT_SCALE={scale}"] if scale else []),
                        "python benchmarks/torch_compat.py", args.torch,
                        *(["--python", args.python] if args.python != "python3" else []),
                        *(["--all"] if args.all else []),
                        *(["--", *args.pytest_args] if args.pytest_args else [])])
    result = record(results, command, note, f"the test suite on torch {args.torch}", torch=found["torch"],
                    python=found["python"], triton=found["triton"], device=found["device"])
    result |= {"platform": found["platform"], "highwaynet": found["highwaynet"],
               "packages": {name: found[name] for name in PACKAGES}, "pytest": f"python {' '.join(pytest)}",
               "pytest_exit": code, "seconds": round(seconds, 1),
               "install_seconds": install_seconds, "venv_gb": round(size(venv) / 1e9, 2)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"torch {found['torch']}: {result['passed']} passed, {result['failed']} failed, {result['skipped']} "
          f"skipped, {result['errors']} errors in {seconds / 60:.1f} min; wrote {out}")
    return 0 if result["failed"] + result["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
