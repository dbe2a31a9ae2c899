#!/bin/bash
# Re-measures docs/benchmarks.md in one go: every benchmark of its summary, in sequence, each
# script's Markdown output into OUT/<name>.md (stderr into OUT/<name>.err), the pytest-benchmark
# microbenchmarks, then OUT/summary.md (bench/summarize.py): one row per output with the commit,
# the date, the load before and after, the command and whether the figure counts.
# Every script first waits for a quiet machine (bench/benchenv.py: 1-minute load below 1.0 and
# nothing else heavy, at most 15 minutes each) and says at its end whether its figures count.
# Usage, from the repository root:
#   bench/run_all.sh OUT_DIR [WORK_DIR]
# DLIO: set IOGEN_DLIO_PYTHON=/path/to/dliovenv/bin/python. Skip the waits (figures then do not
# count on a busy machine): IOGEN_BENCH_NO_COOLDOWN=1. Object-store rows need moto installed.
set -u
OUT=${1:?usage: bench/run_all.sh OUT_DIR [WORK_DIR]}
WORK=${2:-$(mktemp -d -t iogen-bench-XXXXXX)}
PY=${PY:-.venv/bin/python}
mkdir -p "$OUT" "$WORK"
{ echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "started $(date -u +%FT%TZ)"; } > "$OUT/meta"
run() { name=$1; shift; echo "== $name $(date -u +%FT%TZ)" >> "$OUT/log"; "$@" > "$OUT/$name.md" 2> "$OUT/$name.err"; echo "rc=$? $(date -u +%FT%TZ)" >> "$OUT/log"; }
run vs_dlio $PY bench/vs_dlio.py --reps 3 --epochs 3 --files 64 --dir "$WORK/vs_dlio"
run vs_dlio_tfrecord $PY bench/vs_dlio.py --format tfrecord --reps 3 --epochs 3 --files 64 --dir "$WORK/vs_dlio_tfr"
J="--format jpeg --record-bytes 322957 --files 2000 --batch 24 --threads 8 --compute 0 --reps 3 --epochs 3"
run vs_dlio_jpeg $PY bench/vs_dlio.py $J --dir "$WORK/vs_dlio_jpeg"
run vs_dlio_jpeg_decode $PY bench/vs_dlio.py $J --decode --dir "$WORK/vs_dlio_jpeg"
run retinanet_headline $PY bench/retinanet_headline.py --files 20000 --max 32 --epochs 3 --loaders native,pytorch --dlio-max 2 --dlio-epochs 1 --dlio-python "${IOGEN_DLIO_PYTHON:-}" --dir "$WORK/headline"
run step_barrier $PY bench/step_barrier.py --data "$WORK/headline/data" --files 20000 --ranks 16 --rounds 3 --reader-nice idle
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
run small_files $PY bench/small_files.py --files 4000 --batch 24 --threads 8 --epochs 3 --reps 3 --dir "$WORK/small"
run small_files_fio $PY bench/small_files_fio.py --files 4000 --batch 24 --threads 8 --reps 3 --dir "$WORK/small_fio"
run datagen_images $PY bench/datagen_images.py --files 20000 --workers 2 --rounds 3 --folder "$WORK/dg_img"
run parquet_dlrm $PY bench/parquet_reads.py --workload dlrm --files 8 --rows 49152 --batch 4096 --reps 3 --dir "$WORK/pq_dlrm"
run parquet_dlrm_16k $PY bench/parquet_reads.py --workload dlrm --files 32 --rows 49152 --batch 16384 --reps 3 --native-only --dir "$WORK/pq_dlrm16k"
run parquet_flux $PY bench/parquet_reads.py --workload flux --files 16 --rows 32 --batch 8 --threads 4 --reps 3 --dir "$WORK/pq_flux"
run loaders $PY bench/loaders_compare.py --reps 2 --epochs 2 --dir "$WORK/loaders"
run startup $PY bench/startup.py --reps 5
run checkpoint_vs_dd $PY bench/checkpoint_vs_dd.py --folder "$WORK/ckpt" --shard-gib 2 --repeat 3
run checkpoint_vs_dd_whole $PY bench/checkpoint_vs_dd.py --folder "$WORK/ckpt" --repeat 3 --whole
run staging $PY bench/staging_vs_copy.py --dir "$WORK/staging"
run drain $PY bench/drain_interference.py --dir "$WORK/drain"
if $PY -c "import moto" 2>/dev/null; then
  run os_reads $PY bench/objectstore_reads.py
  run os_checkpoint_only $PY bench/objectstore_checkpoint_only.py
  run os_s3torch $PY bench/objectstore_s3torch.py
  run os_staging $PY bench/objectstore_staging.py
fi
if [ -x /usr/bin/radosgw ]; then
  run os_rgw $PY bench/objectstore_rgw.py
fi
run scale $PY bench/plan_scale.py all --reps 3
run scale_startup $PY bench/plan_scale.py startup --files 100000 --reps 3 --tmp "$WORK"
run scale_datagen $PY bench/plan_scale.py datagen --files 10000 --threads 2 --reps 3 --tmp "$WORK"
$PY -m pytest bench/ --benchmark-only -q -p no:cacheprovider > "$OUT/micro.md" 2>&1
echo "micro rc=$? $(date -u +%FT%TZ)" >> "$OUT/log"
$PY bench/summarize.py "$OUT" > "$OUT/summary.md"
echo "summary: $OUT/summary.md"
