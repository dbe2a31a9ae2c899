"""Checkpoint drain: how much a background drain to the shared tier slows the training steps.

Runs the same training job (same data, same compute, a checkpoint every few steps written to
`checkpoint.local_folder`) with `checkpoint.drain=async`, `sync` and `off`, in one invocation
of this script, and prints from each run's summary.json: AU over the run, the mean blocking
time per checkpoint, the mean drain time, and (async) AU and data wait of the steps that ran
while a drain was copying against those that did not.

    .venv/bin/python bench/drain_interference.py --files 64 --record-mib 1 --model-mib 256 --every 4

Both tiers here are folders of the same disk, so the drain competes with the training reads
for the same device and page cache: the interference is an upper bound of what separate
devices would show. Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchenv  # noqa: E402,F401 - waits for a quiet machine first; says at exit whether the figures count


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--record-mib", type=float, default=1)
    ap.add_argument("--model-mib", type=int, default=256)
    ap.add_argument("--every", type=int, default=4, help="steps between checkpoints")
    ap.add_argument("--compute", type=float, default=0.02, help="emulated compute per step (s)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--dir", default="/var/tmp")
    args = ap.parse_args(argv)
    iogen = os.path.join(os.path.dirname(sys.executable), "iogen")
    root = tempfile.mkdtemp(prefix="iogen-drainbench-", dir=args.dir)
    base = [f"dataset.data_folder={root}/data", f"dataset.num_files_train={args.files}",
            f"dataset.record_length_bytes={int(args.record_mib * 2**20)}", "dataset.record_length_bytes_stdev=0",
            f"train.computation_time={args.compute}", f"train.epochs={args.epochs}", "reader.batch_size=2",
            "workflow.checkpoint=True", f"model.model_size_bytes={args.model_mib << 20}",
            f"checkpoint.steps_between_checkpoints={args.every}", f"checkpoint.local_folder={root}/local",
            f"checkpoint.checkpoint_folder={root}/shared", "metric.au=0", "-q"]
    rows = []
    try:
        subprocess.run([iogen, "datagen", "default", *base], check=True, capture_output=True)
        load0 = os.getloadavg()[0]
        for mode in ("off", "async", "sync"):
            out = f"{root}/out-{mode}"
            subprocess.run([iogen, "run", "default", *base, f"checkpoint.drain={mode}", f"output.folder={out}"],
                           check=True, capture_output=True)
            (path,) = glob.glob(f"{out}/*/summary.json")
            doc = json.load(open(path))
            it = doc["iogen"]
            dr = it.get("checkpoint_drain") or {}
            events = it.get("checkpoints") or []
            blocking = sum(e["elapsed_ns"] for e in events) / len(events) / 1e9 if events else float("nan")
            during = dr.get("steps_during_drain") or {}
            without = dr.get("steps_without_drain") or {}
            rows.append((mode, doc["metric"]["train_au_mean_percentage"], blocking, dr.get("drain_s_mean"),
                         during.get("au_percentage"), during.get("wait_ms_mean"), without.get("au_percentage"),
                         without.get("wait_ms_mean"), dr.get("waits_for_previous_drain")))
            shutil.rmtree(f"{root}/local", ignore_errors=True)
            shutil.rmtree(f"{root}/shared", ignore_errors=True)
        load1 = os.getloadavg()[0]
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def f(x, d=2):
        return "n/a" if x is None else f"{x:.{d}f}"

    print(f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(f"{args.files} x {args.record_mib} MiB files, batch 2, compute {args.compute} s/step, checkpoint "
          f"{args.model_mib} MiB every {args.every} steps, {args.epochs} epochs; load average {load0:.1f} / {load1:.1f}\n")
    print("| drain | AU % (run) | blocking s / ckpt | drain s / ckpt | AU % during drain | wait ms during | "
          "AU % without | wait ms without | waits for previous drain |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {f(r[1])} | {f(r[2], 3)} | {f(r[3], 3)} | {f(r[4])} | {f(r[5], 3)} | {f(r[6])} | "
              f"{f(r[7], 3)} | {r[8] if r[8] is not None else 'n/a'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
