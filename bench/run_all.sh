#!/bin/bash
# Every whole-run benchmark of docs/benchmarks.md, in sequence, each script's Markdown output
# into OUT/<name>.md (stderr into OUT/<name>.err), then the pytest-benchmark microbenchmarks.
# Sizes are kept small: these machines are shared. Usage, from the repository root:
#   bench/run_all.sh OUT_DIR [WORK_DIR]       (DLIO: set IOGEN_DLIO_PYTHON=/path/to/dliovenv/bin/python)
set -u
OUT=${1:?usage: bench/run_all.sh OUT_DIR [WORK_DIR]}
WORK=${2:-$(mktemp -d -t iogen-bench-XXXXXX)}
PY=${PY:-.venv/bin/python}
mkdir -p "$OUT" "$WORK"
run() { name=$1; shift; echo "== $name $(date -u +%T)" >> "$OUT/log"; "$@" > "$OUT/$name.md" 2> "$OUT/$name.err"; echo "rc=$? $(date -u +%T)" >> "$OUT/log"; }
run vs_dlio $PY bench/vs_dlio.py --reps 3 --epochs 3 --files 64 --dir "$WORK/vs_dlio"
run vs_dlio_tfrecord $PY bench/vs_dlio.py --format tfrecord --reps 3 --epochs 3 --files 64 --dir "$WORK/vs_dlio_tfr"
run sleep $PY bench/sleep_accuracy.py --reps 100,100,10
run au_ceiling $PY bench/au_ceiling.py --compute 0.01 --reps 3 --files 128
run au_ceiling_1ms $PY bench/au_ceiling.py --compute 0.001 --reps 3 --files 128
run nvp_t1 $PY bench/native_vs_pread.py --reps 5 --threads 1 --prefetch 0 --dir "$WORK/nvp"
run nvp_t2 $PY bench/native_vs_pread.py --reps 5 --threads 2 --prefetch 2 --dir "$WORK/nvp"
T="--format tfrecord --threads 2 --reps 3"
run tfr_small $PY bench/native_vs_pread.py $T --files 8 --samples-per-file 512 --record-mib 0.10935 --batch 400 --dir "$WORK/tfs"
run tfr_small_nov $PY bench/native_vs_pread.py $T --files 8 --samples-per-file 512 --record-mib 0.10935 --batch 400 --no-verify --dir "$WORK/tfs"
run tfr_large $PY bench/native_vs_pread.py $T --files 48 --record-mib 2.6975 --batch 4 --dir "$WORK/tfl"
run tfr_large_nov $PY bench/native_vs_pread.py $T --files 48 --record-mib 2.6975 --batch 4 --no-verify --dir "$WORK/tfl"
run tfr_cpu_small $PY bench/tfrecord_read_cpu.py --dir "$WORK/tfs"
run tfr_cpu_large $PY bench/tfrecord_read_cpu.py --dir "$WORK/tfl" --files 48 --samples-per-file 1 --record-bytes 2828533 --batch 4
for f in npz tfrecord hdf5; do
  run "dg_$f" $PY bench/datagen_vs_dd.py --folder "$WORK/dg" --format $f --files 8 --file-mib 32 --rounds 3 --fsync --workers 2
done
run loaders $PY bench/loaders_compare.py --reps 2 --epochs 2 --dir "$WORK/loaders"
run startup $PY bench/startup.py --reps 5
run scale $PY bench/plan_scale.py all --reps 3
run scale_startup $PY bench/plan_scale.py startup --files 100000 --reps 3 --tmp "$WORK"
run scale_datagen $PY bench/plan_scale.py datagen --files 10000 --threads 2 --reps 3 --tmp "$WORK"
$PY -m pytest bench/ --benchmark-only -q -p no:cacheprovider > "$OUT/micro.md" 2>&1
echo "micro rc=$? $(date -u +%T)" >> "$OUT/log"
