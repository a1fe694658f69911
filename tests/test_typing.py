"""The package's type hints (it ships ``py.typed``) against code a strict user writes, and the
public names a user imports from the packages rather than from their modules."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import process_timeout

from highwaynet._versions import release

TYPING = Path(__file__).resolve().parent / "typecheck"


def test_public_api_type_checks_strictly(tmp_path):
    pytest.importorskip("mypy", reason="mypy is in the dev extra")
    run = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path),
                          str(TYPING / "api_usage.py")], capture_output=True, text=True, timeout=process_timeout(600))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]


# torch 2.3's own hints lack names the package uses behind checks of the release (torch.library.custom_op,
# torch.get_autocast_dtype) and some it has (SGD's fused, AveragedModel's multi_avg_fn): checked against 2.4's on.
@pytest.mark.skipif(release(torch.__version__) < (2, 4), reason="needs torch >= 2.4: 2.3's type hints lack names "
                    "the package uses (custom_op, get_autocast_dtype, SGD(fused=...))")
def test_package_type_checks(tmp_path):
    # The package's own code, as pyproject.toml's [tool.mypy] sets it up: its hints hold inside too.
    pytest.importorskip("mypy", reason="mypy is in the dev extra")
    root = Path(__file__).resolve().parents[1]
    if not (root / "src" / "highwaynet").is_dir():
        pytest.skip("needs the source tree")
    run = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path)], cwd=root,
                         capture_output=True, text=True, timeout=process_timeout(600))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]


def test_typed_usage_runs_as_annotated():
    # The file's annotations are what the calls return at run time too (its layer code, run).
    sys.path.insert(0, str(TYPING))
    try:
        usage = importlib.import_module("api_usage")
    finally:
        sys.path.remove(str(TYPING))
    torch.manual_seed(0)
    x, lengths = torch.randn(3, 5, 8), torch.tensor([5, 2, 4])
    assert usage.layers(x).isfinite()
    assert usage.recurrent(x, lengths).isfinite()
    assert usage.analysis(usage.Highway(8, num_layers=2)).shape == (2,)


def test_every_loader_is_importable_from_highwaynet_data():
    import highwaynet.data

    for module in ("augment", "corpora", "images", "sentences"):
        names = importlib.import_module(f"highwaynet.data.{module}").__all__
        missing = sorted(set(names) - set(highwaynet.data.__all__))
        assert not missing, f"highwaynet.data.{module}: missing from highwaynet.data.__all__: {missing}"
