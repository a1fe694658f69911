#!/usr/bin/env bash
# Everything that needs a GPU: the GPU tests, then the benchmarks' GPU tables (logs and JSON land
# in OUT_DIR; each script's wall time goes to OUT_DIR/bench.log).
#   benchmarks/gpu_suite.sh OUT_DIR [PART]
# PART, each sized to fit one 10-minute call on a fresh machine:
#   tests-layers   the Trainer, the layers, graphed training   } on a fresh machine the tests take
#   tests-kernels  the Triton kernels                          } over 5 minutes: Triton compiles
#   tests          both                                           each tile its autotuner tries
#   bench-rhn      the RHN's open questions: TF32 micro-steps with the weights in turn, both
#                  one-kernel layouts in the layer (TF32), and the layer in bfloat16
#   bench-dense    the dense layer in TF32 and bfloat16, with torch.compile(mode="max-autotune")
#                  (minutes of tuning)
#   bench-rest     the paper MLP's step, and the float32 RHN tables
#   bench-persistent
#                  the persistent recurrence kernel's first timings (docs/notes/persistent-kernel.md): the
#                  RHN at the PTB shape against cuDNN's LSTM and the one-kernel path, and ELMo's LSTM
#                  (benchmarks/elmo.py: the per-step algorithm, cuDNN's projected LSTM; the whole biLM in
#                  bfloat16), bfloat16 then TF32, each with two other tiles (its tests: tests-kernels)
#   bench          the three bench parts; all (the default): tests and bench
#   tests-all      the whole suite but for the docs toolchain, the browser and the wheel build, on the
#                  GPU (the default device), side by side (pytest-xdist where installed); writes
#                  OUT_DIR/gpu_suite.json (commit, device, versions, passed / failed / skipped, the
#                  failed tests), which benchmarks/gpu_suite_<device>.json keeps for the docs
# Every record names the highwaynet version and commit (benchmarks/provenance.py); a lent machine's copy of
# the tree has no git history, so name the commit there: HIGHWAYNET_COMMIT=<sha> benchmarks/gpu_suite.sh ...
set -uo pipefail
parts="tests|tests-layers|tests-kernels|tests-all|bench|bench-rhn|bench-dense|bench-rest|bench-persistent|all"
out=${1:?usage: benchmarks/gpu_suite.sh OUT_DIR [$parts]}; what=${2:-all}
[[ "|$parts|" == *"|$what|"* ]] || { echo "unknown part '$what': one of $parts" >&2; exit 2; }
mkdir -p "$out"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
git rev-parse HEAD > /dev/null 2>&1 || [[ -n ${HIGHWAYNET_COMMIT:-} ]] || \
  echo "no git history here and no HIGHWAYNET_COMMIT: the records will name the commit 'unknown'" >&2
if [[ $what == tests-all ]]; then
  # One thread per worker (the workers are the parallelism) and per compile; a limit per test that
  # stops a hang, not a slow test; the whole run kept inside the call's 10 minutes, its record
  # written from the lines printed so far if it is cut.
  export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TORCHINDUCTOR_COMPILE_THREADS=1
  options=(-v -p no:cacheprovider -rfE --junitxml "$out/suite.xml"
           --ignore tests/test_docs.py --ignore tests/test_site_browser.py --ignore tests/test_wheel.py)
  python3 -c "import xdist" 2>/dev/null && options+=(-n "$(python3 -c 'import os; print(max(1, (os.cpu_count() or 2) - 2))')")
  python3 -c "import pytest_timeout" 2>/dev/null && options+=(--timeout 400)
  python3 -c "import pytest_benchmark" 2>/dev/null && options+=(-p no:benchmark)
  start=$SECONDS
  timeout "${SUITE_LIMIT:-540}" python3 -m pytest "${options[@]}" tests > "$out/suite.txt" 2>&1
  code=$?
  tail -n 30 "$out/suite.txt"
  results="$out/suite.xml"; note=""
  if [[ ! -s $results ]]; then results="$out/suite.txt"; note="cut at its time limit (${SUITE_LIMIT:-540} s): tests not yet run are missing"; fi
  python3 benchmarks/suite_record.py "$results" "$out/gpu_suite.json" \
    --command "benchmarks/gpu_suite.sh OUT tests-all (pytest ${options[*]} tests; $(( SECONDS - start )) s, exit $code)" \
    --note "$note"
  exit 0
fi
files=()
[[ $what == tests || $what == all || $what == tests-layers ]] && \
  files+=(tests/test_training.py tests/test_nn_highway.py tests/test_nn_rhn.py tests/test_recipe_lm.py)
[[ $what == tests || $what == all || $what == tests-kernels ]] && files+=(tests/test_kernels.py tests/test_persistent.py)
if (( ${#files[@]} )); then
  python3 -m pytest -v -rs "${files[@]}" -k "cuda or triton or gpu or fused or micro_step or padded" \
    2>&1 | tee "$out/gpu_tests.log" | grep -E "FAILED|ERROR|passed|failed|SKIPPED"
fi
timed() {  # one benchmark script, its output and wall time appended to bench.log
  local start=$SECONDS
  python3 "$@" 2>&1 | tee -a "$out/bench.log"
  echo "[$(( SECONDS - start )) s] $*" | tee -a "$out/bench.log"
}
if [[ $what == bench-rhn || $what == bench || $what == all ]]; then
  timed benchmarks/rhn_step.py --tf32 --json "$out/rhn_step_h100_tf32.json"
  timed benchmarks/rhn.py --device cuda --tf32 --json "$out/rhn_h100_tf32.json"
  timed benchmarks/rhn.py --device cuda --dtype bfloat16 --json "$out/rhn_h100_bfloat16.json"
fi
if [[ $what == bench-dense || $what == bench || $what == all ]]; then
  for dtype in tf32 bfloat16; do
    timed benchmarks/dense_highway.py --device cuda --tokens 16384 --dim 1024 --dtype $dtype --repeats 30 \
      --max-autotune --json "$out/dense_highway_h100_$dtype.json"
  done
fi
if [[ $what == bench-rest || $what == bench || $what == all ]]; then
  timed benchmarks/mlp_step.py --device cuda --repeats 100 --json "$out/mlp_step_h100.json"
  timed benchmarks/rhn.py --device cuda --json "$out/rhn_h100.json"
  timed benchmarks/rhn_step.py --json "$out/rhn_step_h100.json"
fi
if [[ $what == bench-persistent ]]; then
  # most wanted first, so that a call cut short keeps the headline: the RHN against cuDNN in bfloat16
  tiles=(--tiles 32x32x64x4 32x16x128x8)
  timed benchmarks/rhn.py --device cuda --dtype bfloat16 --no-compile "${tiles[@]}" --json "$out/rhn_h100_bfloat16_persistent.json"
  timed benchmarks/elmo.py --device cuda --dtype bfloat16 --whole --repeats 20 "${tiles[@]}" --json "$out/elmo_h100_bfloat16.json"
  timed benchmarks/rhn.py --device cuda --tf32 --no-compile "${tiles[@]}" --json "$out/rhn_h100_tf32_persistent.json"
  timed benchmarks/elmo.py --device cuda --tf32 --repeats 20 "${tiles[@]}" --json "$out/elmo_h100_tf32.json"
fi
