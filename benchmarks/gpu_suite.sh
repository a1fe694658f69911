#!/usr/bin/env bash
# Everything that needs a GPU, in one go: the GPU tests, then the benchmarks' GPU tables.
# Usage: benchmarks/gpu_suite.sh OUT_DIR [tests|tests-layers|tests-kernels|bench|bench-rhn|all]
# (logs and JSON land in OUT_DIR). On a fresh machine the tests take over 5 minutes (Triton compiles
# each tile its autotuner tries): tests-layers (the Trainer, the layers, graphed training) and
# tests-kernels split them in two. bench-rhn: the RHN's open questions alone (TF32 micro-steps with
# the weights in turn, the layer in TF32 and in bfloat16). bench tunes the dense layer under
# torch.compile(mode="max-autotune") too: allow minutes for its tuning.
set -uo pipefail
out=${1:?usage: benchmarks/gpu_suite.sh OUT_DIR [tests|tests-layers|tests-kernels|bench|bench-rhn|all]}; what=${2:-all}
mkdir -p "$out"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
files=()
[[ $what == tests || $what == all || $what == tests-layers ]] && \
  files+=(tests/test_training.py tests/test_nn_highway.py tests/test_nn_rhn.py tests/test_recipe_lm.py)
[[ $what == tests || $what == all || $what == tests-kernels ]] && files+=(tests/test_kernels.py)
if (( ${#files[@]} )); then
  python3 -m pytest -v -rs "${files[@]}" -k "cuda or triton or gpu or fused or micro_step or padded" \
    2>&1 | tee "$out/gpu_tests.log" | grep -E "FAILED|ERROR|passed|failed|SKIPPED"
fi
bench_rhn() {  # the RHN's open measurements: bench-rhn alone, and part of bench
  python3 benchmarks/rhn_step.py --tf32 --json "$out/rhn_step_h100_tf32.json" 2>&1 | tee -a "$out/bench.log"
  python3 benchmarks/rhn.py --device cuda --tf32 --json "$out/rhn_h100_tf32.json" 2>&1 | tee -a "$out/bench.log"
  python3 benchmarks/rhn.py --device cuda --dtype bfloat16 --json "$out/rhn_h100_bfloat16.json" 2>&1 | tee -a "$out/bench.log"
}
[[ $what == bench-rhn ]] && bench_rhn
if [[ $what == bench || $what == all ]]; then
  for dtype in tf32 bfloat16; do
    python3 benchmarks/dense_highway.py --device cuda --tokens 16384 --dim 1024 --dtype $dtype --repeats 30 \
      --max-autotune --json "$out/dense_highway_h100_$dtype.json" 2>&1 | tee -a "$out/bench.log"
  done
  python3 benchmarks/mlp_step.py --device cuda --repeats 100 --json "$out/mlp_step_h100.json" 2>&1 | tee -a "$out/bench.log"
  python3 benchmarks/rhn.py --device cuda --json "$out/rhn_h100.json" 2>&1 | tee -a "$out/bench.log"
  python3 benchmarks/rhn_step.py --json "$out/rhn_step_h100.json" 2>&1 | tee -a "$out/bench.log"
  bench_rhn
fi
