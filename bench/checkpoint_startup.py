"""Time from launch to the first checkpoint byte: `mpiexec -n N iogen run llama3-405b` in subset mode.

Starts the job (default: 8 ranks writing their share of llama3-405b, checkpoint.mode=subset,
model.parallelism.data=2, no emulated compute before the first checkpoint), watches the
checkpoint folder, and reports the wall time from the launch to the first checkpoint file that
holds a byte. Then it stops the job with SIGTERM (iogen exits 130 and removes its temporary
files) and deletes the folder: the point is the start-up cost, not a full 80 GiB write. Every
figure comes from this run; `--repeat` launches several times and prints each.

    python bench/checkpoint_startup.py --folder /scratch/iogen-ckpt-startup --ranks 8
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import signal
import subprocess
import sys
import time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchenv  # noqa: E402,F401 - waits for a quiet machine first; says at exit whether the figures count


def launch_once(args) -> float | None:
    """Seconds from launch to the first checkpoint byte on storage, or None when none came."""
    ck = os.path.join(args.folder, "ckpt")
    shutil.rmtree(args.folder, ignore_errors=True)
    os.makedirs(args.folder)
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    iogen = os.path.join(os.path.dirname(sys.executable), "iogen")
    cmd = [mpiexec, "-n", str(args.ranks), iogen, "run", args.workload, "checkpoint.mode=subset",
           f"model.parallelism.data={args.data}", "checkpoint.num_checkpoints_write=1",
           "checkpoint.num_checkpoints_read=0", "checkpoint.time_between_checkpoints=0",
           f"checkpoint.checkpoint_folder={ck}", f"output.folder={os.path.join(args.folder, 'results')}", "-q"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    first = None
    try:
        while proc.poll() is None and time.perf_counter() - t0 < args.timeout:
            if any(os.path.getsize(p) > 0 for p in glob.glob(os.path.join(ck, "*", "*")) if os.path.isfile(p)):
                first = time.perf_counter() - t0
                break
            time.sleep(0.01)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the job's own process group (start_new_session)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        err = proc.stderr.read() if proc.stderr else ""
        shutil.rmtree(args.folder, ignore_errors=True)
    if first is None:
        print(f"no checkpoint byte within {args.timeout} s (exit {proc.returncode}): {err.strip()[-500:]}")
    return first


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", default="/tmp/iogen-ckpt-startup")
    ap.add_argument("--workload", default="llama3-405b")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--data", type=int, default=2, help="model.parallelism.data of the full job")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args()
    times = [launch_once(args) for _ in range(args.repeat)]
    shown = ", ".join("none" if t is None else f"{t:.2f}" for t in times)
    print(f"{args.workload} subset on {args.ranks} ranks: launch to first checkpoint byte {shown} s "
          f"(wall clock from mpiexec's start; includes Python start-up and imports on every rank)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
