#!/usr/bin/env bash
# The quantization lab's ten-minute GPU recipe: the decoder, vanilla against the linear gate,
# at 6 layers / width 256 / 4 heads / T 256, as many steps as fit; then the encoder pair
# (vanilla against the MLP gate) if time allows.
#
#   OUT=/some/dir bash benchmarks/gpu_quant_10min.sh [key=value ...]
#   OUT=/some/dir BUDGET_S=570 MAX_STEPS=20000 bash benchmarks/gpu_quant_10min.sh
#
# benchmarks/quant_budget.py does the work: it prints the plan (parameters and FLOPs per
# step), times 100 training steps, sets the step count so both models train and evaluate
# within BUDGET_S (default 570 s: ten minutes less 30 s to pack), trains them one after the
# other through `grokbench quant`'s cached path and writes OUT/decoder/quant_table.{json,md}
# (and OUT/encoder/) and OUT/quant_records.tar.xz after each model. The settings and their
# reasons are in SIZE there and in docs/quant.md ("The ten-minute GPU recipe"); float32
# matmuls are pinned to full precision (tasks.quant.MATMUL_PRECISION, not TF32). The store
# is $GROKBENCH_RESULTS (default /tmp/grokbench-results). Runs on a CPU too (the tests run
# it at a tiny size); works without installing the project (PYTHONPATH).
set -uo pipefail
OUT=${OUT:?set OUT to an output directory}
BUDGET_S=${BUDGET_S:-570}
MAX_STEPS=${MAX_STEPS:-20000}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export GROKBENCH_RESULTS="${GROKBENCH_RESULTS:-/tmp/grokbench-results}"
start=$(date +%s)
mkdir -p "$OUT"
nvidia-smi -L 2>/dev/null || true
# The planner keeps its own budget; the timeout is the backstop (a model slower than timed).
timeout "$BUDGET_S" python3 benchmarks/quant_budget.py --out "$OUT" \
    --budget-s "$((BUDGET_S - ($(date +%s) - start)))" --max-steps "$MAX_STEPS" \
    --results "$GROKBENCH_RESULTS" "$@"
rc=$?
echo "== rc $rc in $(($(date +%s) - start)) s"
# Whatever finished, also after a timeout (the planner packs after each model as well).
python3 benchmarks/pack_results.py "$GROKBENCH_RESULTS" "$OUT" --quant
exit "$rc"
