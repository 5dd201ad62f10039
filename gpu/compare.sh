#!/usr/bin/env bash
# The H100-beside-H200 command (issue 61; docs/development.md, "H100 beside H200"): one lent-GPU call of at most
# 10 minutes. Installs the carried wheels (gpu/site.sh), runs `bench acceptance` with the comparison sweep
# (params/gpu-compare.yaml: the kept H200 rows' configurations, two repeats; the selftest left out: it passed on
# the H200 and its three minutes go to the sweep), then the harness's batch-1 check (benchmarks/harness_overhead.py:
# a bare loop against bench run, in this process and as a process, and the notebook, on one machine).
#   bash gpu/compare.sh OUT [SECONDS]          # default /tmp/compare, 540 s for all of it
# Environment: SWEEP (default params/gpu-compare.yaml), SKIP (acceptance's steps left out, default selftest),
# HARNESS_S (seconds kept for the harness, default 110), HARNESS_ARGS (its arguments; default resnet18 inference,
# amp-bf16, batch 1, 224 px on cuda), and gpu/site.sh's.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/compare}
TOTAL_S=${2:-540}
SWEEP=${SWEEP:-params/gpu-compare.yaml}
SKIP=${SKIP-selftest}  # (set and empty: nothing left out)
HARNESS_S=${HARNESS_S:-110}
HARNESS_ARGS=${HARNESS_ARGS:---device cuda --batch-size 1 --size 224 --precision amp-bf16 --min-seconds 1 --rounds 3 --arms bare,bare-marks,run,run-quiet,run-process,notebook}
started=$SECONDS
source gpu/site.sh || exit 3
mkdir -p "$OUT"

left=$(( TOTAL_S - (SECONDS - started) - HARNESS_S ))
"$PY" -m bench_core acceptance --out "$OUT" --budget-s "$left" --sweep "$SWEEP" --skip "$SKIP"
status=$?

left=$(( TOTAL_S - (SECONDS - started) ))
if [ "$left" -gt 20 ]; then
    echo "== harness (at most $left s): benchmarks/harness_overhead.py $HARNESS_ARGS"
    # shellcheck disable=SC2086 - the arguments are words
    timeout "$left" "$PY" benchmarks/harness_overhead.py $HARNESS_ARGS 2>&1 | tee "$OUT/harness.txt"
    harness=${PIPESTATUS[0]}
    [ "$harness" = 0 ] || echo "== harness: did not finish (exit $harness); what it printed is in $OUT/harness.txt"
else
    echo "== harness: skipped, $left s left"
fi
exit $status
