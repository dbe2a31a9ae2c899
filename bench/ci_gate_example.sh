#!/usr/bin/env bash
# How a CI job gates on iogen's performance (bench/README.md, "CI gate"). Two gates:
#   1. microbenchmarks of iogen's hot paths: pytest-benchmark, compared with the last saved run;
#   2. a whole-run gate: a small campaign (warm-up + measured runs) compared by `iogen compare`
#      with the baseline campaign's report.json, kept by CI between jobs (cache or artifact).
# Exit status: 0 both gates pass, 1 a regression, 2 bad usage or data.
#
# Environment (all optional):
#   IOGEN       the iogen command              (default: iogen)
#   GATE_DIR    where the baseline is kept     (default: ./ci-baseline; cache this folder in CI)
#   WORKLOAD    workload to campaign           (default: default)
#   RUNS WARMUP campaign size                  (default: 5 and 1, MLPerf Storage's)
#   THRESHOLD   tolerated slowdown, %          (default: 5)
#   METRIC      throughput | au | io           (default: throughput)
#   MICRO       1 to run the microbenchmarks   (default: 1)
#   MICRO_FAIL  pytest-benchmark fail rule     (default: median:10%, vs the last saved run)
#   UPDATE      1 to make this run the new baseline when it passes (e.g. on the main branch)
#   OVERRIDES   extra workload overrides, e.g. "dataset.num_files_train=64"
set -euo pipefail

IOGEN=${IOGEN:-iogen}
GATE_DIR=${GATE_DIR:-ci-baseline}
WORKLOAD=${WORKLOAD:-default}
RUNS=${RUNS:-5}
WARMUP=${WARMUP:-1}
THRESHOLD=${THRESHOLD:-5}
METRIC=${METRIC:-throughput}
MICRO=${MICRO:-1}
UPDATE=${UPDATE:-0}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$GATE_DIR"
status=0

# 1. Microbenchmarks. pytest-benchmark keeps every saved run under --benchmark-storage and
#    fails the comparison when a benchmark's median got more than 10% slower than the last one.
if [ "$MICRO" = 1 ]; then
    storage="file://$GATE_DIR/benchmarks"
    compare=()
    if compgen -G "$GATE_DIR/benchmarks/*/*.json" > /dev/null; then
        compare=(--benchmark-compare --benchmark-compare-fail="${MICRO_FAIL:-median:10%}")
    fi
    pytest bench/test_core_bench.py -q -p no:randomly --benchmark-only \
        --benchmark-storage="$storage" ${compare[@]+"${compare[@]}"} \
        $([ "$UPDATE" = 1 ] && echo --benchmark-autosave) || status=1
fi

# 2. Whole run. The campaign's own exit code is its AU validity (1 when a measured run missed
#    the AU threshold); that is a property of the system under test, reported but not the gate.
# shellcheck disable=SC2086
"$IOGEN" run "$WORKLOAD" --generate -q --runs "$RUNS" --warmup "$WARMUP" \
    dataset.data_folder="$WORK/data" output.folder="$WORK/results" ${OVERRIDES:-} > "$WORK/campaign.txt" || {
    rc=$?
    [ "$rc" -eq 1 ] || { cat "$WORK/campaign.txt"; exit "$rc"; }
    echo "note: the campaign is not valid (a measured run missed its AU threshold)"
}
campaign=$(ls -d "$WORK"/results/*-campaign | tail -n 1)
if [ -f "$GATE_DIR/report.json" ]; then
    "$IOGEN" compare "$GATE_DIR/report.json" "$campaign" --threshold "$THRESHOLD" --metric "$METRIC" \
        --json "$GATE_DIR/last-compare.json" || status=$?
else
    echo "no baseline in $GATE_DIR yet: this campaign becomes it"
    UPDATE=1
fi
if [ "$UPDATE" = 1 ] && [ "$status" = 0 ]; then
    cp "$campaign/report.json" "$GATE_DIR/report.json"
    echo "baseline updated: $GATE_DIR/report.json"
fi
exit "$status"
