#!/bin/bash
# A refactor's before/after, side by side in one sitting (issue 20's "no speed is lost"): the
# native read, datagen, staging copy, checkpoint write and restore, and object-store benchmarks,
# each run by BEFORE's tree (its own scripts and venv) and by AFTER's, alternating which goes first.
# Every script waits for a quiet machine first (bench/benchenv.py) and reports its own ratio against
# its baseline, measured in the same run; comparing those ratios leaves out the machine's drift.
# Usage (each tree a checkout with its venv built: make dev):
#   bench/before_after.sh BEFORE_TREE AFTER_TREE OUT_DIR [WORK_DIR]
# Output: OUT_DIR/<bench>.<before|after>.md (stderr in .err) and OUT_DIR/log.
set -u
BEFORE=$(cd "${1:?usage: bench/before_after.sh BEFORE_TREE AFTER_TREE OUT_DIR [WORK_DIR]}" && pwd)
AFTER=$(cd "${2:?}" && pwd)
OUT=$(mkdir -p "${3:?}" && cd "$3" && pwd)
WORK=${4:-$(mktemp -d -t iogen-ab-XXXXXX)}
mkdir -p "$WORK" "$WORK/staging"
for t in BEFORE AFTER; do
  tree=${!t}
  echo "$t $tree commit $(git -C "$tree" rev-parse --short HEAD)$(git -C "$tree" diff --quiet HEAD || echo ' (+ uncommitted changes)')" >> "$OUT/log"
done
one() {  # one() NAME WHICH TREE ARGS...: run bench script ARGS in TREE with TREE's venv
  name=$1; which=$2; tree=$3; shift 3
  echo "== $name $which $(date -u +%FT%TZ)" >> "$OUT/log"
  (cd "$tree" && .venv/bin/python "$@") > "$OUT/$name.$which.md" 2> "$OUT/$name.$which.err"
  echo "rc=$? $(date -u +%FT%TZ)" >> "$OUT/log"
}
n=0
pair() {  # pair NAME ARGS...: both trees, alternating which goes first
  name=$1; shift
  if (( n % 2 )); then one "$name" after "$AFTER" "$@"; one "$name" before "$BEFORE" "$@"
  else one "$name" before "$BEFORE" "$@"; one "$name" after "$AFTER" "$@"; fi
  n=$((n + 1))
}
pair native_read bench/native_vs_pread.py --reps 5 --threads 2 --prefetch 2 --files 32 --dir "$WORK/nvp"
pair datagen_npz bench/datagen_vs_dd.py --folder "$WORK/dg" --format npz --files 8 --file-mib 16 --rounds 5 --fsync --workers 2
pair staging bench/staging_vs_copy.py --files 16 --file-mib 8 --threads 2 --reps 5 --dir "$WORK/staging"
pair checkpoint bench/checkpoint_vs_dd.py --folder "$WORK/ckpt" --shard-gib 0.5 --repeat 3
pair os_reads bench/objectstore_reads.py --reps 5
pair os_checkpoint_only bench/objectstore_checkpoint_only.py --reps 3 --no-connector
pair os_staging bench/objectstore_staging.py --reps 5
echo "done $(date -u +%FT%TZ)" >> "$OUT/log"
