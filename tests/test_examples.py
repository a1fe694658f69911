"""The scripts in ``examples/`` run as a user runs them and show what their docstrings promise."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import process_timeout

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, *args: str) -> str:
    run = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True,
                         timeout=process_timeout(120))
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def test_highway_in_your_model_trains_where_the_plain_stack_does_not():
    pytest.importorskip("sklearn", reason="the digits come with scikit-learn (the data extra)")
    out = run_example("highway_in_your_model.py", "--steps", "300", "--no-plot")
    accuracy = {name: float(acc) for name, acc in re.findall(r"(\w+) +30 layers: test accuracy ([\d.]+)%", out)}
    assert set(accuracy) == {"plain", "highway"}, out
    assert accuracy["highway"] > 85 and accuracy["plain"] < 30, accuracy  # 10 classes: chance is 10%


def test_rhn_language_model_learns_a_text(shared_data):
    out = run_example("rhn_language_model.py", str(shared_data / "text" / "tinyshakespeare.txt"),
                      "--steps", "80", "--hidden", "64")
    held_out, uniform = map(float, re.search(r"held-out: ([\d.]+) bits/char \(uniform over 65 characters: "
                                             r"([\d.]+)\)", out).groups())
    assert held_out < uniform - 1.5, out  # well under the 6.02 bits of guessing uniformly (80 steps: 3.7)
    assert out.rstrip().splitlines()[-1]  # and a sample


def test_highway_lstm_classifier_learns_questions_and_reports_its_gates(shared_data):
    out = run_example("highway_lstm_classifier.py", "--data-dir", str(shared_data / "sentence"),
                      "--depth", "2", "--epochs", "3")
    test, most_frequent = map(float, re.search(r"test accuracy ([\d.]+)% \(the most frequent class alone: "
                                               r"([\d.]+)%\)", out).groups())
    assert test > most_frequent + 40, out            # 3 epochs of 2 blocks: about 82% against 27.6%
    blocks = re.findall(r"block (\d): mean transform gate ([\d.]+); .* test accuracy ([\d.]+)%", out)
    assert [b for b, _, _ in blocks] == ["1", "2"], out
    assert all(0.0 < float(gate) < 1.0 for _, gate, _ in blocks), out
    # (How much the lesions cost varies with the seed and depth, so only that they ran is checked here;
    # tests/test_analysis.py checks what a lesion does.)
    assert re.search(r"every block carried through: test accuracy [\d.]+%", out), out


def test_your_own_block_trains_deep_behind_each_connection_and_its_gates_report():
    pytest.importorskip("sklearn", reason="the digits come with scikit-learn (the data extra)")
    out = run_example("gated_residual_block.py", "--depth", "16", "--steps", "200")
    accuracy = {name.strip(): float(acc) for name, acc in re.findall(r"^(.+?) +16 blocks: test accuracy ([\d.]+)%", out,
                                                                      re.M)}
    assert set(accuracy) == {"blocks alone", "residual", "highway", "gtrxl", "rezero"}, out
    assert accuracy["blocks alone"] < 30 and all(accuracy[k] > 80 for k in ("residual", "highway", "gtrxl", "rezero"))
    gates = [float(t) for t in re.search(r"mean T per block: ([\d. ]+)", out)[1].split()]
    assert len(gates) == 16 and all(0 < t < 1 for t in gates), out
    assert re.search(r"block \d+ \(its gate the most open\) shut: test accuracy [\d.]+%", out), out


def test_elmo_from_files_loads_a_biLM_in_the_published_layout_and_embeds():
    pytest.importorskip("h5py", reason="the elmo extra: pip install h5py")
    out = run_example("elmo_from_files.py")
    assert re.search(r"ids \(2, 9, 50\); 3 layers of \(2, 9, 32\); tokens per row \[9, 5\]", out), out
    changed, reset = map(float, re.findall(r"changed by ([\d.]+)", out))
    assert changed > 0 and reset == 0, out  # stateful, and reset_states() starts over
    assert "per-residue vectors (20, 32), per-protein (32,)" in out, out
    assert "trainable: ['mixes.0.weights', 'mixes.0.gamma', 'mixes.1.weights', 'mixes.1.gamma']" in out, out
