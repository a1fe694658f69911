import json

import pytest
import torch

from highwaynet.analysis import gate_modules
from highwaynet.cli import main
from highwaynet.data.augment import RandomCropFlip
from highwaynet.models import HighwayCNN
from highwaynet.nn import HighwayConv2d


def test_highway_and_plain_cnn_same_depth_and_width():
    highway = HighwayCNN(1, 10, channels=(8, 16), layers_per_stage=2)
    plain = HighwayCNN(1, 10, channels=(8, 16), layers_per_stage=2, plain=True)
    x = torch.randn(3, 1, 28, 28)
    assert highway(x).shape == plain(x).shape == (3, 10)
    assert len(gate_modules(highway)) == 4 and gate_modules(plain) == []
    widths = [m.out_channels for m in plain.modules() if isinstance(m, torch.nn.Conv2d)]
    highway_widths = [m.conv.out_channels // 2 if isinstance(m, HighwayConv2d) else m.out_channels
                      for m in highway.features if isinstance(m, (torch.nn.Conv2d, HighwayConv2d))]
    assert widths == highway_widths == [8, 8, 8, 16, 16, 16]
    with pytest.raises(ValueError, match=r"\(N, C, H, W\), got \(1, 28, 28\)"):
        highway(torch.randn(1, 28, 28))


def test_random_crop_flip():
    torch.manual_seed(0)
    x = torch.arange(2 * 1 * 5 * 5, dtype=torch.float32).view(2, 1, 5, 5)
    assert torch.equal(RandomCropFlip(padding=0, flip=1.0)(x), x.flip(-1))
    assert torch.equal(RandomCropFlip(padding=0, flip=0.0)(x), x)
    cropped = RandomCropFlip(padding=1, flip=0.0)(x.repeat(64, 1, 1, 1))
    assert cropped.shape == (128, 1, 5, 5)
    # Every crop is a shifted window of the padded image: its interior values are consecutive rows of x.
    shifts = {(int(c[0, 2, 2]) - int(x[0, 0, 2, 2])) % 25 for c in cropped[::2]}
    assert len(shifts) > 1 and all(s in {0, 1, 4, 5, 6, 19, 20, 21, 24} for s in shifts)



def test_random_crop_flip_moves_pixels_and_never_changes_them():
    """It padded by shifting the batch to its minimum and back ((x - low) padded with zeros, + low), which
    rounded every pixel: 0.1 beside a pixel of -1000 came back 0.099976."""
    torch.manual_seed(0)
    x = torch.full((8, 1, 3, 3), 0.1)
    x[:, :, 0, 0] = -1000.0
    x[:, :, 1, 1] = torch.randn(8, 1)
    out = RandomCropFlip(padding=1, flip=0.5)(x)
    padded = torch.nn.functional.pad(x, (1, 1, 1, 1), value=-1000.0)
    for image, window in zip(out, padded, strict=True):  # each output: one window of its padded image, exactly
        windows = [window[:, i:i + 3, j:j + 3] for i in range(3) for j in range(3)]
        assert any(torch.equal(image, w) or torch.equal(image, w.flip(-1)) for w in windows)

def test_cli_train_cnn(tmp_path, capsys):
    out = tmp_path / "cnn"
    assert main(["train", "cnn", "--data", "digits", "--channels", "8,16", "--layers-per-stage", "1",
                 "--epochs", "2", "--batch-size", "64", "--lr", "0.05", "--device", "cpu", "--out", str(out)]) == 0
    assert "4-layer highway CNN" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert results["model"] == "highway-cnn" and results["test"]["acc"] > 0.3
    assert json.loads((out / "config.json").read_text())["recipe"] == "cnn"
