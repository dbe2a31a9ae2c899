"""The step barrier at many ranks on few cores: the polled MPI barrier against the node's shared-memory one.

MLPerf Storage v3.0's retinanet on b200 (batch 24, 8 read threads, 47.55 ms of compute a step),
`--ranks` ranks under mpiexec on one node, the data in the page cache, run once per contender in
each round, the contenders alternating (a round starts with the next one):

- `mpi`: IOGEN_MPI_NODE_BARRIER=off, every step barrier is the polled MPI Ibarrier;
- `node`: the default, the node's ranks meet in a shared segment (docs/mpi.md, "The step barrier");
- `mpi+idle`, `node+idle` (with `--reader-nice idle`, or other values, comma-separated: `idle,19`):
  each barrier with the native loader's reading threads at that priority (IOGEN_READER_NICE); `mpi`
  and `node` set it to 0 (unset, it is idle where ranks outnumber CPUs, the default this bench
  measured). `--node-only` leaves the MPI barrier's contenders out.

Per contender, medians over its rounds: AU; `comm` (t_step_end - t_compute_end, the median over
steps of each rank, then the median over ranks); the leave spread (per step, the last rank's
t_step_end minus the first's: how long the ranks take to get out of a barrier, the median over
steps); and the CPU the summary reports per 1,000 samples over the metrics window. The
ratio of each contender's comm to the MPI barrier's closes the table.

    .venv/bin/python bench/step_barrier.py --data /scratch/rn --files 20000 --ranks 16 --rounds 3 --reader-nice idle

The dataset is generated under --data when it has no manifest yet (`iogen datagen retinanet`).

`--bare` measures the barrier alone, without iogen's loader: each rank only sleeps the compute
(47.55 ms, `iogen.core_switch.clock`) and meets the others in `world.barrier()`, `--steps` times;
per contender, the comm median (median over ranks of each rank's median), the CPU time of every
rank's process per step (all ranks together) and the voluntary context switches per rank-step.

    .venv/bin/python bench/step_barrier.py --bare --ranks 16 --rounds 3
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if "--rank-loop" not in sys.argv:  # a rank of --bare neither waits for a quiet machine nor reports one
    from benchenv import machine_line, print_footer  # noqa: E402


def _env(**extra) -> dict:
    prefixes = ("PMI_", "OMPI_", "PMIX_", "SLURM_", "HYDRA_", "MPI_LOCAL", "IOGEN_MPI_NODE_BARRIER",
                "IOGEN_READER_NICE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env.update(extra)
    return env


def step_figures(run_dir: str) -> tuple[float, float]:
    """(comm us: median over ranks of each rank's median, leave spread us: median over steps)."""
    import numpy as np

    from iogen.common.steplog import read_steplog

    rows = [read_steplog(p)[1] for p in sorted(glob.glob(os.path.join(run_dir, "steps", "*.steps")))]
    rows = [r[r["phase"] == r["phase"][0]] for r in rows]  # train steps
    n = min(len(r) for r in rows)
    end = np.array([r["t_step_end"][:n] for r in rows], dtype=np.int64)
    comm = [float(np.median(r["t_step_end"] - r["t_compute_end"])) for r in rows]
    spread = (end.max(0) - end.min(0))[1:]  # every barrier but the first step's
    return statistics.median(comm) / 1e3, float(np.median(spread)) / 1e3


def run_once(args, work: str, env: dict) -> dict:
    """One `iogen run retinanet` under mpiexec; its AU, CPU per 1,000 samples and step figures."""
    out = tempfile.mkdtemp(prefix="out-", dir=work)
    cmd = [args.mpiexec, "-n", str(args.ranks), sys.executable, "-m", "iogen", "run", "retinanet",
           "-a", "b200", "-q", f"dataset.data_folder={args.data}", f"dataset.num_files_train={args.files}",
           f"train.epochs={args.epochs}", "reader.data_loader=native", f"output.folder={out}", *args.extra]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if res.returncode not in (0, 1):  # 1: the AU gate
        raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout}{res.stderr}")
    run_dir = glob.glob(os.path.join(out, "retinanet-*"))[0]
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as fh:
        summary = json.load(fh)
    found = re.search(r"([0-9.]+) s per 1,000 samples over the window", res.stdout)
    cpu = found.group(1) if found else "nan"
    comm, spread = step_figures(run_dir)
    return {"au": float(summary["metric"]["train_au_mean_percentage"]), "cpu": float(cpu), "comm": comm,
            "spread": spread}


def _switches() -> int:
    """Voluntary context switches of every thread of this process so far."""
    total = 0
    for path in glob.glob("/proc/self/task/*/status"):
        with open(path) as fh:
            total += sum(int(line.split()[1]) for line in fh if line.startswith("voluntary_ctxt_switches"))
    return total


def rank_loop(steps: int, compute_s: float) -> None:
    """One rank of --bare (under mpiexec): sleep, barrier, `steps` times; rank 0 prints a JSON line."""
    import time

    import numpy as np

    from iogen.core_switch import clock
    from iogen.world.communicator import get_world

    world = get_world()
    compute_ns = int(compute_s * 1e9)
    world.barrier()
    cpu0, sw0, comm = time.process_time(), _switches(), []
    for _ in range(steps):
        clock.sleep_ns(compute_ns)
        t = time.monotonic_ns()
        world.barrier()
        comm.append(time.monotonic_ns() - t)
    mine = (float(np.median(comm)) / 1e3, time.process_time() - cpu0, _switches() - sw0)
    every = world.gather_obj(mine)
    if world.rank == 0:
        print(json.dumps({"barrier": world.step_barrier, "comm": statistics.median(r[0] for r in every),
                          "cpu_ms": sum(r[1] for r in every) / steps * 1e3,
                          "switches": sum(r[2] for r in every) / steps / len(every)}))


def bare(args, contenders: dict) -> int:
    """--bare: the barrier alone, each contender in turn, --rounds times."""
    names = list(contenders)
    got = {name: [] for name in names}
    for rnd in range(args.rounds):
        for name in names[rnd % len(names):] + names[:rnd % len(names)]:
            cmd = [args.mpiexec, "-n", str(args.ranks), sys.executable, os.path.abspath(__file__),
                   "--rank-loop", "--steps", str(args.steps), "--compute", str(args.compute)]
            res = subprocess.run(cmd, capture_output=True, text=True, env=contenders[name], timeout=600)
            if res.returncode != 0:
                raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout}{res.stderr}")
            got[name].append(json.loads(res.stdout.strip().splitlines()[-1]))
    print(f"step barrier alone: {args.ranks} ranks, {args.steps} steps of {args.compute * 1e3:g} ms compute, "
          f"medians of {args.rounds} alternating rounds")
    print()
    print("| barrier | comm us (median rank) | CPU ms per step, all ranks | voluntary switches per rank-step | comm vs mpi |")
    print("|---|---:|---:|---:|---:|")
    med = {name: {k: statistics.median(r[k] for r in got[name]) for k in ("comm", "cpu_ms", "switches")}
           for name in names}
    for name in names:
        m = med[name]
        print(f"| {name} ({got[name][0]['barrier']}) | {m['comm']:,.0f} | {m['cpu_ms']:.2f} | {m['switches']:.1f} | "
              f"{m['comm'] / med[base]['comm']:.2f}x |")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="the retinanet dataset's folder (generated there if empty)")
    ap.add_argument("--bare", action="store_true", help="the barrier alone: ranks that only sleep and meet")
    ap.add_argument("--steps", type=int, default=200, help="--bare: steps per run")
    ap.add_argument("--compute", type=float, default=0.04755, help="--bare: compute per step (s)")
    ap.add_argument("--rank-loop", action="store_true", help=argparse.SUPPRESS)  # one rank of --bare
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reader-nice", default=None,
                    help="also run each barrier with IOGEN_READER_NICE=this (several: comma-separated, e.g. idle,19)")
    ap.add_argument("--node-only", action="store_true", help="leave out the MPI barrier's contenders")
    ap.add_argument("--mpiexec", default=os.path.join(os.path.dirname(sys.executable), "mpiexec"))
    ap.add_argument("extra", nargs="*", help="more iogen overrides (key=value)")
    args = ap.parse_args(argv)
    if args.rank_loop:
        rank_loop(args.steps, args.compute)
        return 0
    before = machine_line()
    if args.bare:
        bare(args, {"mpi": _env(IOGEN_MPI_NODE_BARRIER="off"), "node": _env()})
        print()
        print_footer(before, __file__, argv)
        return 0
    if not args.data:
        ap.error("--data is required (or --bare)")
    if not glob.glob(os.path.join(args.data, "*manifest*")) and not glob.glob(os.path.join(args.data, "train")):
        subprocess.run([sys.executable, "-m", "iogen", "datagen", "retinanet", f"dataset.data_folder={args.data}",
                        f"dataset.num_files_train={args.files}", "-q"], check=True, env=_env())
    # the reading threads' priority is set for every contender: unset, it is idle where ranks outnumber CPUs
    contenders = {"mpi": _env(IOGEN_MPI_NODE_BARRIER="off", IOGEN_READER_NICE="0"), "node": _env(IOGEN_READER_NICE="0")}
    for nice in (args.reader_nice or "").split(","):
        if nice:
            contenders[f"mpi+{nice}"] = _env(IOGEN_MPI_NODE_BARRIER="off", IOGEN_READER_NICE=nice)
            contenders[f"node+{nice}"] = _env(IOGEN_READER_NICE=nice)
    if args.node_only:
        contenders = {name: env for name, env in contenders.items() if not name.startswith("mpi")}
    names = list(contenders)
    got = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="iogen-bench-barrier-") as work:
        for rnd in range(args.rounds):
            for name in names[rnd % len(names):] + names[:rnd % len(names)]:
                got[name].append(run_once(args, work, contenders[name]))
    print(f"step barrier: retinanet b200, {args.ranks} ranks, {args.files} files in the page cache, "
          f"{args.epochs} epochs, medians of {args.rounds} alternating rounds")
    print()
    base = names[0]  # mpi, or node with --node-only
    print(f"| barrier | AU % | comm us (median rank) | leave spread us | CPU s per 1,000 samples | comm vs {base} |")
    print("|---|---:|---:|---:|---:|---:|")
    med = {name: {k: statistics.median(r[k] for r in got[name]) for k in ("au", "cpu", "comm", "spread")}
           for name in names}
    for name in names:
        m = med[name]
        print(f"| {name} | {m['au']:.2f} | {m['comm']:,.0f} | {m['spread']:,.0f} | {m['cpu']:.3f} | "
              f"{m['comm'] / med[base]['comm']:.2f}x |")
    print()
    print_footer(before, __file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
