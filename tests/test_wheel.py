"""The package as ``pip install highwaynet`` gets it: the wheel holds the CPU kernel's source and the
type marker, its metadata passes ``twine check`` (the README renders on PyPI), and the installed
copy imports, answers ``--help`` and finds its kernel source, away from the checkout."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import process_timeout, settle_once, shared_folder

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dist(request) -> Path:
    """``python -m build``: the sdist, then the wheel built from it (so the sdist must hold everything).
    Built once for the run's workers (:func:`conftest.settle_once`): under -n this module's tests may go
    to two workers, and two builds at once in the checkout stage the sdist in one folder there, each
    removing it under the other (``No such file or directory: 'highwaynet-0.4.0/tests/...'``)."""
    pytest.importorskip("build", reason="the dev extra: pip install -e '.[dev]'")
    folder = shared_folder(request.config, "dist")
    out = folder / "out"

    def build() -> str | None:
        built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
                               capture_output=True, text=True, timeout=process_timeout(600))
        return None if built.returncode == 0 else built.stdout + built.stderr

    problem = settle_once(folder, build)
    if problem is not None and "Could not find a version that satisfies" in problem:
        pytest.skip("build could not fetch its backend (setuptools>=77): no package index reachable")
    assert problem is None, problem[-3000:]
    return out


@pytest.fixture(scope="module")
def wheel(dist) -> Path:
    (path,) = dist.glob("highwaynet-*.whl")
    return path


def test_wheel_holds_the_package_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("highwaynet/py.typed", "highwaynet/kernels/rhn_cpu.cpp", "highwaynet/config/__init__.py"):
        assert needed in names, f"{needed} is not in {wheel.name}"
    assert not [n for n in names if n.startswith(("tests/", "docs/", "benchmarks/"))]


def test_metadata_passes_twine_check(dist):
    pytest.importorskip("twine", reason="the dev extra: pip install -e '.[dev]'")
    check = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, dist.iterdir())],
                           capture_output=True, text=True, timeout=process_timeout(60))
    assert check.returncode == 0, check.stdout + check.stderr


def test_wheel_in_a_fresh_venv_answers_help_and_imports_every_layer(wheel, tmp_path):
    """A new venv holding only the wheel (its dependencies, torch first, are this environment's, seen
    through a .pth line, so that nothing is downloaded): the console script runs, and every layer
    imports from the installed copy, not from the checkout."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=process_timeout(120))
    python = venv / "bin" / "python"
    # Without the caller's PYTHONPATH: a checkout's src/ on it (its highwaynet.egg-info) reads to pip as
    # highwaynet already installed, and pip then installs nothing, console script included.
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                              str(wheel)], capture_output=True, text=True, env=clean, timeout=process_timeout(120))
    assert install.returncode == 0, install.stderr[-3000:]
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = [p for p in sys.path if p.endswith("site-packages")]
    (Path(site) / "dependencies.pth").write_text("\n".join(ours) + "\n")
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    help_ = subprocess.run([str(venv / "bin" / "highwaynet"), "--help"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=process_timeout(60))
    assert help_.returncode == 0 and "reproduce" in help_.stdout, help_.stderr[-3000:]
    probe = ("import importlib.resources, pathlib, highwaynet\n"
             f"assert pathlib.Path(highwaynet.__file__).is_relative_to({site!r}), highwaynet.__file__\n"
             "assert importlib.resources.files('highwaynet.kernels').joinpath('rhn_cpu.cpp').is_file()\n"
             "for name in highwaynet.__all__:\n"
             "    getattr(highwaynet, name)\n"
             "print('ok', len(highwaynet.__all__))\n")
    run = subprocess.run([str(python), "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=process_timeout(120))
    assert run.returncode == 0 and run.stdout.startswith("ok"), run.stderr[-3000:]
