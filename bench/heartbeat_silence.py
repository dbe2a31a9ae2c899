"""How long a rank's heartbeat goes unheard while iogen works: evidence for IOGEN_MPI_LIVENESS_S.

A rank is declared stopped when its successor has not heard it for IOGEN_MPI_LIVENESS_S
(iogen/world/heartbeat.py). The safe lower bound of that setting is the longest silence of a rank
that is *not* stopped: GIL holds (h5py reads, a full garbage collection), a loaded machine's
scheduling, the sender's own interval. This runs `iogen ARGS...` on every rank of an `mpiexec`
launch and prints, per rank, the longest silence of its predecessor that rank's heartbeat saw
(Heartbeat.max_silence_s), then the same while a full garbage collection of `--gc-objects`
objects holds the GIL (the pause a rank with that many live Python objects would take).

    .venv/bin/mpiexec -n 4 .venv/bin/python bench/heartbeat_silence.py --gc-objects 3000000 -- \
        run default dataset.num_files_train=64 ... -q

Prints one line per rank: `rank R: run S_run s, gc S_gc s (gc took T s)`.
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
import os  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchenv  # noqa: E402,F401 - waits for a quiet machine first; says at exit whether the figures count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gc-objects", type=int, default=0, help="objects a full collection walks (0: skip)")
    ap.add_argument("iogen_args", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    from iogen.cli.entry import exit_now, run_command
    from iogen.world.communicator import get_world

    world = get_world()
    beat = getattr(world, "_heartbeat", None)
    if beat is None:
        raise SystemExit("no heartbeat: run under mpiexec with 2+ ranks and IOGEN_MPI_LIVENESS_S > 0")
    argv = [a for a in args.iogen_args if a != "--"]
    code = run_command(argv) if argv else 0
    run_silence = beat.max_silence_s
    gc_s = 0.0
    if args.gc_objects:
        world.sync()
        beat.max_silence_s = 0.0
        junk = [[i] for i in range(args.gc_objects)]  # list objects: tracked by the collector
        t0 = time.perf_counter()
        gc.collect()
        gc_s = time.perf_counter() - t0
        del junk
        time.sleep(2 * beat.interval_s)  # let the successor hear the beats that were held back
        world.sync()
    line = (f"rank {world.rank}: run {run_silence:.2f} s, gc {beat.max_silence_s:.2f} s (gc took {gc_s:.2f} s), "
            f"interval {beat.interval_s:g} s")
    for r in range(world.size):
        world.sync()
        if r == world.rank:
            print(line, flush=True)
    sys.stdout.flush()
    exit_now(code)


if __name__ == "__main__":
    main()
