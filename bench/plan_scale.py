"""Scaling figures (docs/scaling.md): plan, validate, file table, result reduction, start-up, small-file datagen.

    .venv/bin/python bench/plan_scale.py plan                 # per-rank plan vs the global permutation
    .venv/bin/python bench/plan_scale.py validate             # `iogen validate` vs number of files
    .venv/bin/python bench/plan_scale.py table                # file table vs files touched
    .venv/bin/python bench/plan_scale.py reduce               # result reduction vs ranks x epochs
    .venv/bin/python bench/plan_scale.py startup --files 100000
    .venv/bin/python bench/plan_scale.py datagen --files 10000 --threads 2
    .venv/bin/python bench/plan_scale.py all --plot docs/img/scaling.png --data docs/img/scaling.json
    .venv/bin/python bench/plan_scale.py replot --data docs/img/scaling.json --plot docs/img/scaling.png

Every point runs in a fresh child process, so its peak RSS (ru_maxrss, from wait4) is its own.
Baselines do the same work in the same run: the plan before issue 13 (numpy's permutation of the
whole epoch, then the rank's slice); a plain stat/open/read loop for start-up; a plain
create+write+rename loop with the same threads for datagen. Prints Markdown tables.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchenv import command_line, machine_line, settle_after_delete, settle_note  # noqa: E402

PY = sys.executable
os.environ["PYTHONSAFEPATH"] = "1"  # the installed package, not a checkout beside cwd


def child(code: str, *args) -> tuple[dict, float]:
    """Run `code` in a fresh interpreter; (the JSON it prints last, its peak RSS in MiB)."""
    proc = subprocess.Popen([PY, "-c", code, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    out, err = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"child failed: {err[-2000:]}")
    # the child reports its own peak (ru_maxrss of RUSAGE_SELF) in its JSON
    doc = json.loads(out.strip().splitlines()[-1])
    return doc, doc.pop("maxrss_mib")


PLAN_CODE = r"""
import json, resource, sys, time
import numpy as np
n, world, rank, impl = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
batch = 400
from iogen.plan import make_plan, steps_per_epoch
t0 = time.perf_counter()
if impl == "iogen":
    p = make_plan(num_files=n, samples_per_file=1, batch_size=batch, world_size=world, rank=rank,
                  file_shuffle="seed", sample_shuffle="seed")
    ids = p.batches
else:  # the plan before issue 13: permute the whole epoch, keep the rank's slice
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([0, 1, 1])))
    files = rng.permutation(np.arange(n, dtype=np.int64))
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([0, 1, 2])))
    order = rng.permutation(files)
    steps = steps_per_epoch(n, batch, world)
    ids = order[rank * steps * batch:(rank + 1) * steps * batch].reshape(steps, batch).copy()
dt = time.perf_counter() - t0
print(json.dumps({"s": dt, "samples": int(ids.size),
                  "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

IMPORT_CODE = r"""
import json, resource
import iogen.plan, numpy
print(json.dumps({"maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def bench_plan(args) -> list[dict]:
    _, floor = child(IMPORT_CODE)
    rows = []
    for exp in args.plan_sizes:
        n = 10 ** exp
        for world in args.worlds:
            if n < 400 * world:
                continue
            row = {"samples": n, "ranks": world}
            for impl in ("iogen", "global"):
                if impl == "global" and exp > args.baseline_max:
                    continue
                times, mem = [], 0.0
                for _ in range(args.reps):
                    doc, rss = child(PLAN_CODE, n, world, 7, impl)
                    times.append(doc["s"])
                    mem = max(mem, rss - floor)
                row[impl] = (statistics.median(times), mem)
            rows.append(row)
    print(f"plan of one epoch for rank 7: file and sample shuffle, batch 400, one sample per file; "
          f"median of {args.reps}; RSS above the interpreter with iogen imported ({floor:.0f} MiB)")
    print()
    print("| samples | ranks | iogen s | iogen MiB | global permutation s | global MiB | speed-up |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        g = r.get("global")
        print(f"| {r['samples']:.0e} | {r['ranks']:,} | {r['iogen'][0]:.4f} | {r['iogen'][1]:.1f} | "
              + (f"{g[0]:.3f} | {g[1]:.0f} | {g[0] / r['iogen'][0]:.0f}x |" if g else "not run | | |"))
    print()
    return rows


VALIDATE = ["-m", "iogen", "validate", "resnet50", "-n", "4096", "dataset.num_samples_per_file=1"]


def run_timed(cmd) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of a command, from wait4."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    dt = time.perf_counter() - t0
    if status:
        raise RuntimeError(f"{cmd} failed: {proc.stderr.read()[-2000:]}")
    return dt, usage.ru_maxrss / 1024


def bench_validate(args) -> list[dict]:
    rows = []
    for exp in args.validate_sizes:
        runs = [run_timed([PY, *VALIDATE, f"dataset.num_files_train={10 ** exp}"]) for _ in range(args.reps)]
        rows.append({"files": 10 ** exp, "s": statistics.median(r[0] for r in runs),
                     "mib": max(r[1] for r in runs)})
    print(f"`iogen validate resnet50 -n 4096 dataset.num_files_train=F dataset.num_samples_per_file=1`, "
          f"median of {args.reps} (whole process: interpreter, imports, config, layout, steps)")
    print()
    print("| files | seconds | peak RSS MiB |")
    print("|---|---|---|")
    for r in rows:
        print(f"| {r['files']:.0e} | {r['s']:.2f} | {r['mib']:.0f} |")
    print()
    return rows


TABLE_CODE = r"""
import json, resource, sys, time, tracemalloc
import numpy as np
from iogen.data.layout import DatasetLayout
from iogen.loaders.filetable import FileTable
touched = int(sys.argv[1])
layout = DatasetLayout("/nonexistent", "train", 10**8, 1, 4096, 0, 1, "npz")
files = np.random.default_rng(1).choice(10**8, touched, replace=False).astype(np.int64)
def fill():
    table = FileTable(layout, None)
    t0 = time.perf_counter()
    for i in range(0, touched, 400):  # batches of 400, as the plan hands them over
        table.slots(files[i:i + 400])
    return table, time.perf_counter() - t0
table, dt = fill()
t0 = time.perf_counter()
for i in range(0, touched, 400):  # the next epoch: every file known
    table.slots(files[i:i + 400])
again = time.perf_counter() - t0
del table
tracemalloc.start()  # numpy reports its buffers to tracemalloc too
table, _ = fill()
held, _ = tracemalloc.get_traced_memory()
print(json.dumps({"s": dt, "again_s": again, "held": table.files_held, "table_mib": held / 2**20,
                  "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def bench_table(args) -> list[dict]:
    rows = []
    for exp in args.table_sizes:
        doc, _ = child(TABLE_CODE, 10 ** exp)
        rows.append({"touched": 10 ** exp, **doc})
    print("file table of a rank in a 10^8-file dataset: slots given to the files it touches "
          "(batches of 400; no opens: the table's own cost; memory from tracemalloc)")
    print()
    print("| files touched | files held | table MiB | bytes per file held | ns per file, first touch | "
          "ns per file, second pass |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['touched']:.0e} | {r['held']:,} | {r['table_mib']:.1f} | {r['table_mib'] * 2**20 / r['held']:.0f} | "
              f"{r['s'] / r['touched'] * 1e9:.0f} | {r['again_s'] / r['touched'] * 1e9:.0f} |")
    print()
    print("(a table holds at most MAX_FILES_HELD = 2^18 files, then starts over: past it, the second pass "
          "finds files forgotten and gives them slots again)")
    print()
    return rows


REDUCE_CODE = r"""
import json, resource, sys, time
import numpy as np
from iogen.metrics import EPOCH_FIELDS
from iogen.metrics.run import combine_ranks, merge_reductions, rank_reductions
ranks, epochs = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
one = rng.uniform(1, 2, (1, epochs, len(EPOCH_FIELDS)))
t0 = time.perf_counter()
mine = rank_reductions(one)  # what each rank computes and sends: O(epochs x fields)
per_rank_s = time.perf_counter() - t0
# rank 0's side of the reduction, as MPI's reduction tree does pairwise: log2(ranks) merges of that size
t0 = time.perf_counter()
acc = mine
for _ in range(max(1, int(np.ceil(np.log2(ranks))))):
    acc = merge_reductions([acc, mine])
combine_ranks(acc)
tree_s = time.perf_counter() - t0
sent = 2 * mine.sum.nbytes + mine.min.nbytes + mine.max.nbytes + mine.sleep_error_steps.nbytes + 8
print(json.dumps({"per_rank_s": per_rank_s, "tree_s": tree_s, "sent_bytes": sent,
                  "gather_bytes": ranks * epochs * len(EPOCH_FIELDS) * 8,
                  "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def bench_reduce(args) -> list[dict]:
    rows = []
    for ranks in args.reduce_ranks:
        for epochs in (10, 100):
            doc, _ = child(REDUCE_CODE, ranks, epochs)
            rows.append({"ranks": ranks, "epochs": epochs, **doc})
    print("result reduction: what each rank sends (allreduce of sum/min/max) vs what a gather to rank 0 "
          "would hold; rank 0's CPU for log2(ranks) merges (MPI's tree) and the final combine")
    print()
    print("| ranks | epochs | bytes per rank (allreduce) | rank 0 bytes with a gather | merge + combine ms |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['ranks']:,} | {r['epochs']} | {r['sent_bytes']:,} | {r['gather_bytes']:,} | "
              f"{r['tree_s'] * 1e3:.2f} |")
    print()
    return rows


STORAGE_CODE = r"""
import json, os, sys, time, resource
folder, files, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
names = sorted(os.listdir(folder))
t0 = time.perf_counter()
for n in names:  # what the run's data check and layout ask of the storage before step 1
    os.stat(os.path.join(folder, n))
stat_s = time.perf_counter() - t0
t0 = time.perf_counter()
for n in names[:batch]:  # the first batch: open, read, close
    fd = os.open(os.path.join(folder, n), os.O_RDONLY)
    os.read(fd, 1 << 20)
    os.close(fd)
print(json.dumps({"stat_s": stat_s, "first_batch_s": time.perf_counter() - t0,
                  "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def bench_startup(args) -> dict:
    from iogen.common.steplog import read_steplog

    work = tempfile.mkdtemp(prefix="iogen-scale-startup-", dir=args.tmp)
    common = ["default", f"dataset.data_folder={work}/data", f"output.folder={work}/results", "--quiet",
              f"dataset.num_files_train={args.files}", "dataset.num_samples_per_file=1",
              "dataset.record_length_bytes=4096", "dataset.record_length_bytes_stdev=0",
              "dataset.num_files_eval=0", "reader.data_loader=native", "reader.batch_size=64",
              "reader.file_shuffle=seed", "reader.sample_shuffle=seed", "train.epochs=1",
              "train.total_training_steps=20", "train.computation_time=0.001"]
    t0 = time.perf_counter()
    subprocess.run([PY, "-m", "iogen", "datagen", *common], check=True, capture_output=True)
    gen_s = time.perf_counter() - t0
    firsts = []
    try:
        for _ in range(args.reps):
            subprocess.run(["sync"], check=True)
            before = set(os.listdir(f"{work}/results")) if os.path.isdir(f"{work}/results") else set()
            t0_ns = time.time_ns()
            subprocess.run([PY, "-m", "iogen", "run", *common, "workflow.generate_data=False", "metric.au=0"],
                           check=True, capture_output=True)
            (run_dir,) = set(os.listdir(f"{work}/results")) - before
            header, rows = read_steplog(os.path.join(work, "results", run_dir, "steps", "rank-00000.steps"))
            first_ns = int(rows["t_request"][0]) - int(header["mono_start_ns"]) + int(header["wall_start_ns"])
            firsts.append((first_ns - t0_ns) / 1e9)
        storage = [child(STORAGE_CODE, f"{work}/data/train", args.files, 64)[0] for _ in range(args.reps)]
        bare = [run_timed([PY, "-c", "import iogen.cli.entry"])[0] for _ in range(args.reps)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    first = statistics.median(firsts)
    store = statistics.median(s["stat_s"] + s["first_batch_s"] for s in storage)
    imports = statistics.median(bare)
    out = {"files": args.files, "first_step_s": first, "storage_s": store, "import_s": imports, "gen_s": gen_s}
    print(f"launch to first step, native loader, one rank, {args.files:,} files x 4 KiB (generated in "
          f"{gen_s:.0f} s), page cache warm, median of {args.reps}")
    print()
    print("| part | seconds | share |")
    print("|---|---|---|")
    print(f"| launch to first step (`iogen run`) | {first:.2f} | 100% |")
    print(f"| storage: stat of every file + open/read/close of the first batch (plain loop) | {store:.2f} | "
          f"{store / first:.0%} |")
    print(f"| interpreter + `import iogen.cli.entry` | {imports:.2f} | {imports / first:.0%} |")
    rest = first - store - imports
    print(f"| iogen's own (the rest: config, layout, data check logic, plan, loader set-up) | {rest:.2f} | "
          f"{rest / first:.0%} |")
    print()
    return out


BASELINE_CODE = r"""
import json, os, sys, time, resource
from concurrent.futures import ThreadPoolExecutor
folder, files, size, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.makedirs(folder, exist_ok=True)
payload = os.urandom(size)
def one(i):
    path = f"{folder}/f_{i}.bin"
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, payload)
    finally:
        os.close(fd)
    os.replace(path + ".tmp", path)
t0 = time.perf_counter()
with ThreadPoolExecutor(threads) as pool:
    list(pool.map(one, range(files)))
print(json.dumps({"s": time.perf_counter() - t0,
                  "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _cpu_since(before) -> tuple[float, float]:
    """(user s, system s) that child processes used since the rusage `before`."""
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    return now.ru_utime - before.ru_utime, now.ru_stime - before.ru_stime


def _clear(folder) -> None:
    """Remove every file a previous run left under folder, then flush the kernel's dirty pages: the
    next contender pays neither for the other's write-back nor for deleting its files."""
    for name in os.listdir(folder):
        shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
    os.sync()


def _settle(work, args, trees) -> bool:
    """_clear(work), then drop the kernel's clean caches (benchenv.settle_after_delete: no contender pays
    ext4's scan past the inodes the previous one freed) and read back what both contenders' processes
    load (a run of each on 8 files, removed again), so neither starts from a cold page cache.
    Returns whether the caches were dropped."""
    _clear(work)
    if not settle_after_delete():
        return False
    warm = f"{work}/warm"
    os.makedirs(warm)
    child(BASELINE_CODE, f"{warm}/plain", 8, args.file_bytes, args.threads)
    for tree in trees:
        _iogen_run(warm, args, tree, files=8)
    _clear(work)
    return True


def _plain_run(work, args) -> tuple[float, tuple[float, float]]:
    """(seconds of the plain loop, (user s, system s) of its process)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    doc, _ = child(BASELINE_CODE, f"{work}/plain", args.files, args.file_bytes, args.threads)
    return doc["s"], _cpu_since(r0)


def _iogen_run(work, args, tree=None, files=None) -> tuple[float, float, tuple[float, float]]:
    """(seconds of the whole `iogen datagen` process, seconds it reports for generation, CPU);
    tree: run the iogen of that source tree (built in place) instead of the installed one.

    Bytecode caches are written and used, as an installed package has them (an environment with
    PYTHONDONTWRITEBYTECODE would otherwise compile every changed module at every start).
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if tree:
        env["PYTHONPATH"] = tree
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([PY, "-m", "iogen", "datagen", "default", f"dataset.data_folder={work}/iogen",
                           f"dataset.num_files_train={files or args.files}", "dataset.num_samples_per_file=1",
                           f"dataset.record_length_bytes={args.file_bytes}", "dataset.record_length_bytes_stdev=0",
                           "dataset.num_files_eval=0", "--workers", str(args.threads), "--quiet"],
                          check=True, capture_output=True, text=True, env=env)
    whole_s = time.perf_counter() - t0
    # its own report: "... written, ...; X GiB in S s": generation without interpreter and imports
    gen_s = float(re.search(r" in ([\d.]+) s", proc.stdout).group(1))
    return whole_s, gen_s, _cpu_since(r0)


def bench_datagen(args) -> dict:
    """Small-file generation: iogen datagen vs a plain create+write+rename loop, same threads.

    Both contenders are treated alike: before each timed run the previous run's files are removed
    and os.sync() flushes what is dirty (neither pays the other's write-back); the order
    rotates per repetition (plain first in the first, iogen in the second, ...). With --tree, that
    source tree's iogen (an earlier commit, built in place) is a third contender in the rotation.
    """
    size = args.file_bytes
    work = tempfile.mkdtemp(prefix="iogen-scale-gen-", dir=args.tmp)
    reps = []
    dropped = True
    try:
        contenders = ["plain", "iogen"] + (["tree"] if args.tree else [])
        for tree in [None] + ([args.tree] if args.tree else []):  # warm-up, untimed: bytecode caches
            _clear(work)
            _iogen_run(work, args, tree, files=8)
        for rep in range(args.reps):
            k = rep % len(contenders)
            order = contenders[k:] + contenders[:k]  # who runs first rotates
            row = {"rep": rep + 1, "first": order[0]}
            for who in order:
                dropped &= _settle(work, args, [None] + ([args.tree] if args.tree else []))
                row.setdefault("load_1min", os.getloadavg()[0])
                if who == "plain":
                    row["plain_s"], row["plain_cpu"] = _plain_run(work, args)
                elif who == "iogen":
                    row["iogen_s"], row["iogen_gen_s"], row["iogen_cpu"] = _iogen_run(work, args)
                else:
                    row["tree_s"], _, row["tree_cpu"] = _iogen_run(work, args, args.tree)
            reps.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    n = args.files
    print(f"small-file generation: {n:,} files of {size:,} B, {args.threads} threads, {args.reps} repetitions; "
          f"iogen = whole `iogen datagen` process (interpreter, imports, config, npz, content, CRCs, "
          f"manifest); before each timed run the previous files are removed and os.sync() called; "
          f"the order rotates; {settle_note(dropped)}")
    print()
    print("| rep | first | load (1 min) | plain files/s | iogen files/s, whole process | ratio | iogen files/s, "
          "generation as reported | ratio | CPU s user + system: plain / iogen |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in reps:
        pl, it, gen = n / r["plain_s"], n / r["iogen_s"], n / r["iogen_gen_s"]
        print(f"| {r['rep']} | {r['first']} | {r['load_1min']:.2f} | {pl:,.0f} | {it:,.0f} | {it / pl:.2f} | "
              f"{gen:,.0f} | {gen / pl:.2f} | {r['plain_cpu'][0]:.2f} + {r['plain_cpu'][1]:.2f} / "
              f"{r['iogen_cpu'][0]:.2f} + {r['iogen_cpu'][1]:.2f} |")
    med = {k: statistics.median(n / r[k] for r in reps) for k in ("plain_s", "iogen_s", "iogen_gen_s")}
    ratios = [r["plain_s"] / r["iogen_s"] for r in reps]
    gen_ratios = [r["plain_s"] / r["iogen_gen_s"] for r in reps]
    print(f"| median | | | {med['plain_s']:,.0f} | {med['iogen_s']:,.0f} | {statistics.median(ratios):.2f} | "
          f"{med['iogen_gen_s']:,.0f} | {statistics.median(gen_ratios):.2f} | |")
    print()
    if args.tree:
        print(f"the same repetitions, `iogen datagen` of the tree {args.tree} (whole process), in the rotation:")
        print()
        print("| rep | tree files/s | ratio to plain | CPU s user + system |")
        print("|---|---|---|---|")
        for r in reps:
            print(f"| {r['rep']} | {n / r['tree_s']:,.0f} | {r['plain_s'] / r['tree_s']:.2f} | "
                  f"{r['tree_cpu'][0]:.2f} + {r['tree_cpu'][1]:.2f} |")
        print(f"| median | {statistics.median(n / r['tree_s'] for r in reps):,.0f} | "
              f"{statistics.median(r['plain_s'] / r['tree_s'] for r in reps):.2f} | |")
        print()
    return {"plain_files_s": med["plain_s"], "iogen_files_s": med["iogen_s"],
            "iogen_generation_files_s": med["iogen_gen_s"], "ratio_median": statistics.median(ratios),
            "ratios": ratios, "generation_ratios": gen_ratios}


def plot(path, plan_rows, validate_rows, table_rows, reduce_rows) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 2, figsize=(11, 8))
    for world in sorted({r["ranks"] for r in plan_rows}):
        sel = [r for r in plan_rows if r["ranks"] == world]
        ax[0, 0].loglog([r["samples"] for r in sel], [r["iogen"][0] for r in sel], "o-", label=f"iogen, {world:,} ranks")
        g = [r for r in sel if "global" in r]
        if g:
            ax[0, 0].loglog([r["samples"] for r in g], [r["global"][0] for r in g], "x--",
                            label=f"global permutation, {world:,} ranks")
    ax[0, 0].set(xlabel="samples in the epoch", ylabel="plan time, one rank (s)", title="plan")
    ax[0, 0].legend(fontsize=7)
    if validate_rows:
        ax[0, 1].semilogx([r["files"] for r in validate_rows], [r["s"] for r in validate_rows], "o-", label="seconds")
        ax2 = ax[0, 1].twinx()
        ax2.semilogx([r["files"] for r in validate_rows], [r["mib"] for r in validate_rows], "s--", color="C1",
                     label="peak MiB")
        ax2.set(ylabel="peak RSS (MiB)", ylim=(0, 1.2 * max(r["mib"] for r in validate_rows)))
        ax[0, 1].set(xlabel="files", ylabel="wall (s)", title="iogen validate (whole process)",
                     ylim=(0, 1.2 * max(r["s"] for r in validate_rows)))
    if table_rows:
        ax[1, 0].loglog([r["touched"] for r in table_rows], [max(r["table_mib"], 0.01) for r in table_rows], "o-")
        ax[1, 0].set(xlabel="files the rank touches (of 10^8)", ylabel="table MiB", title="file table (bound: 2^18 files held)")
    for epochs in (10, 100):
        sel = [r for r in reduce_rows if r["epochs"] == epochs]
        ax[1, 1].loglog([r["ranks"] for r in sel], [r["gather_bytes"] for r in sel], "x--",
                        label=f"gather at rank 0, {epochs} epochs")
        ax[1, 1].loglog([r["ranks"] for r in sel], [r["sent_bytes"] for r in sel], "o-",
                        label=f"allreduce per rank, {epochs} epochs")
    ax[1, 1].set(xlabel="ranks", ylabel="bytes", title="result reduction")
    ax[1, 1].legend(fontsize=7)
    fig.suptitle("iogen scaling (measured on a shared 2-core machine under load)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["plan", "validate", "table", "reduce", "startup", "datagen", "all", "replot"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--plan-sizes", type=int, nargs="+", default=[6, 7, 8, 9], help="log10 of samples")
    ap.add_argument("--worlds", type=int, nargs="+", default=[1024, 65536])
    ap.add_argument("--baseline-max", type=int, default=8, help="largest log10 size for the global permutation")
    ap.add_argument("--validate-sizes", type=int, nargs="+", default=[3, 5, 6, 7, 8])
    ap.add_argument("--table-sizes", type=int, nargs="+", default=[3, 4, 5, 6])
    ap.add_argument("--reduce-ranks", type=int, nargs="+", default=[8, 1024, 65536, 1 << 20])
    ap.add_argument("--files", type=int, default=100_000, help="startup/datagen: number of files")
    ap.add_argument("--file-bytes", type=int, default=112_640, help="datagen: bytes per file (ImageNet-like)")
    ap.add_argument("--threads", type=int, default=2, help="datagen: writer threads, both writers")
    ap.add_argument("--tmp", default=None, help="folder for generated data")
    ap.add_argument("--tree", default=None, help="datagen: also time the iogen of this source tree (built in place)")
    ap.add_argument("--plot", default=None, help="write the curves to this PNG")
    ap.add_argument("--data", default=None, help="all: save the figures to this JSON; replot: read them")
    args = ap.parse_args(argv)
    print(f"before: {machine_line()}")
    print()
    plan_rows = validate_rows = table_rows = reduce_rows = []
    if args.what in ("plan", "all"):
        plan_rows = bench_plan(args)
    if args.what in ("validate", "all"):
        validate_rows = bench_validate(args)
    if args.what in ("table", "all"):
        table_rows = bench_table(args)
    if args.what in ("reduce", "all"):
        reduce_rows = bench_reduce(args)
    if args.what == "startup":
        bench_startup(args)
    if args.what == "datagen":
        bench_datagen(args)
    if args.what == "replot":
        with open(args.data) as f:
            saved = json.load(f)
        plan_rows, validate_rows, table_rows, reduce_rows = (saved[k] for k in ("plan", "validate", "table", "reduce"))
    elif args.what == "all" and args.data:
        with open(args.data, "w") as f:
            json.dump({"plan": plan_rows, "validate": validate_rows, "table": table_rows, "reduce": reduce_rows,
                       "machine": machine_line(), "command": command_line(__file__, argv)}, f, indent=1)
    if args.plot:
        plot(args.plot, plan_rows, validate_rows, table_rows, reduce_rows)
    print(f"after: {machine_line()}")
    print(f"command: {command_line(__file__, argv)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
