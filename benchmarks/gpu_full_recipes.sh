#!/usr/bin/env bash
# Full-scale recipes on one GPU, within a time budget, in priority order.
#
#   OUT=/some/dir BUDGET_S=480 bash benchmarks/gpu_full_recipes.sh
#
# Trains the papers' full-scale grokking recipes through `grokbench run` (the same cached
# path as on a CPU; the store is $GROKBENCH_RESULTS, default /tmp/grokbench-results),
# prints each recipe's summary table and wall time, and packs the store into size-capped
# archives in $OUT (benchmarks/pack_results.py) so the runs can be copied back and read
# from the cache. A recipe that
# would pass the budget is cut off by `timeout`; the groups it finished are kept.
# Works without installing the project (PYTHONPATH), for a machine whose image already
# has jax, optax, numpy, ml_dtypes, mpmath, matplotlib and tqdm.
set -uo pipefail
OUT=${OUT:?set OUT to an output directory}
BUDGET_S=${BUDGET_S:-480}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export GROKBENCH_RESULTS="${GROKBENCH_RESULTS:-/tmp/grokbench-results}"
start=$(date +%s)
left() { echo $((BUDGET_S - ($(date +%s) - start))); }

python3 -c 'import jax, optax; print("jax", jax.__version__, "optax", optax.__version__, jax.devices())'
nvidia-smi -L 2>/dev/null || true

run() {  # run RECIPE [overrides...]: one recipe within what is left of the budget
    local t; t=$(left)
    if ((t < 20)); then echo "== skip $*: budget spent"; return; fi
    echo "== grokbench run $* (at most ${t}s)"
    local t0; t0=$(date +%s)
    timeout "$t" python3 -m grokbench.cli run "$@" --no-progress
    local rc=$?
    echo "== $1: rc $rc in $(($(date +%s) - t0)) s"
    return $rc
}

# Smoke first: a broken environment costs seconds, not the budget.
run fig2-top steps=100 seeds=1 || exit 1
for recipe in ${RECIPES:-fig2-top table1 fig4 fig2-bottom fig6-mod31 fig6-sq fig6-cube fig6-mod113}; do
    run "$recipe" || true
done
if [[ -n "${EXTRA:-}" ]]; then run $EXTRA || true; fi

echo "== packing results ($(du -sh "$GROKBENCH_RESULTS" | cut -f1))"
python3 benchmarks/pack_results.py "$GROKBENCH_RESULTS" "$OUT"
