"""``import highwaynet`` and its layers load PyTorch and nothing heavy besides: Triton, the compiler,
matplotlib, the data libraries and the C++ kernel come on first use (``benchmarks/import_time.py``
times the imports)."""

import subprocess
import sys

import pytest
from conftest import process_timeout

import highwaynet

ON_FIRST_USE = ["triton", "torch._dynamo", "torch._inductor", "matplotlib", "sklearn", "mlxtend", "markdown",
                "onnx", "onnxruntime", "tensorboard", "highwaynet.training", "highwaynet.recipes"]


def _loaded_after(code: str) -> list[str]:
    check = f"{code}\nimport sys\nprint(' '.join(m for m in {ON_FIRST_USE!r} if m in sys.modules))"
    run = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=process_timeout(120))
    assert run.returncode == 0, run.stderr
    return run.stdout.split()


def test_import_highwaynet_loads_nothing_heavy_not_even_torch():
    run = subprocess.run([sys.executable, "-c", "import sys, highwaynet; print('torch' in sys.modules)"],
                         capture_output=True, text=True, timeout=process_timeout(120))
    assert run.stdout.split() == ["False"], run.stderr


def test_the_layers_and_the_analysis_load_only_pytorch():
    assert _loaded_after("from highwaynet import *; import highwaynet.models, highwaynet.kernels.rhn_cpu") == []


def test_a_cpu_forward_and_backward_of_every_layer_loads_no_triton_nor_compiler():
    code = ("import torch\nfrom highwaynet import *\n"
            "x = torch.randn(5, 2, 8)\n"
            "for layer in (RHN(8, 8, depth=2), HighwayLSTM(8, 4), Highway(8, 2)):\n"
            "    y = layer(x)\n"
            "    (y[0] if isinstance(y, tuple) else y).sum().backward()\n"
            "HighwayConv2d(2, 3)(torch.randn(1, 2, 5, 5)).sum().backward()")
    assert _loaded_after(code) == []


def test_every_public_name_resolves_and_dir_lists_it():
    assert set(highwaynet.__all__) == set(highwaynet._WHERE)
    for name in highwaynet.__all__:
        assert getattr(highwaynet, name) is not None
    assert set(highwaynet.__all__) <= set(dir(highwaynet))
    with pytest.raises(AttributeError, match="no attribute 'Higway'"):
        highwaynet.Higway  # noqa: B018
