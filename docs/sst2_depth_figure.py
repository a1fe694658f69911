"""Redraw ``docs/sentences-depth-sst2.png`` from ``docs/sentences-depth-sst2.json``.

The SST-2 depth sweep ran in parts (3 seeds to 10 layers on an H100, whose run folders were not kept;
more seeds at 15 layers and the gate-bias-0 stack later on a CPU), so the README's figure is drawn
from the numbers kept in the JSON file rather than from one sweep folder: a point is either
``{"layers", "mean", "std", "runs"}`` (a sweep's summary) or ``{"layers", "values"}`` (single runs,
test accuracy in %). Run: ``python docs/sst2_depth_figure.py``.
"""

import json
from pathlib import Path

from highwaynet.report import plot_sentence_depth
from highwaynet.training.run_dir import mean_std

here = Path(__file__).parent
data = json.loads((here / "sentences-depth-sst2.json").read_text())
series = {label: [{"layers": p["layers"], **(mean_std(p["values"]) if "values" in p else p)} for p in points]
          for label, points in data["series"].items()}
plot_sentence_depth(series, "sst2", here / "sentences-depth-sst2.png")
for label, points in series.items():
    print(f"{label:45s}", "  ".join(f"{p['layers']}: {p['mean']:.1f} ± {p['std']:.1f}" for p in points))
