"""iogen against DLIO, side by side on the same files, in the same run.

iogen generates one dataset (NPZ, TFRecord with --format tfrecord, or JPEG with --format jpeg: MLPerf
Storage v3.0's retinanet files, one image a file); then, alternating in each repetition, each contender after its own
cool-down (benchenv.contender_run: its own quiet start and its own load at its end judged) and with the page cache
warmed before it, DLIO (`dlio_benchmark`, run from its own Python: --dlio-python or
$IOGEN_DLIO_PYTHON) and iogen read it with the same loader, read threads, batch size, compute
time and epochs. Every figure is what each tool reports in its own summary.json, under DLIO's
keys: AU %, samples/s, and DLIO's "MB/s" (which DLIO 2.0 computes as samples/s x record length
/ 2^20: MiB/s). No DLIO figure is typed in: when dlio_benchmark cannot be imported by the given
Python, the script says DLIO was not measured and prints iogen's figures alone.

The two tools do not define their figures identically (docs/metrics.md): DLIO 2.0's throughput
counts every step of an epoch over the whole epoch's time, its first step (worker start-up)
included, while its AU leaves the first step's time and compute out (statscounter.py:
compute_metrics_train); iogen leaves the first step out of both (metric.exclude_start_steps=1).
DLIO sleeps with time.sleep, iogen with its calibrated sleep. The table shows both as published.
DLIO 2.0 decodes every JPEG with Pillow; iogen reads a JPEG sample's bytes (MLPerf Storage v3.0's
reader) unless --decode turns on its decode mode (reader.decode_images: Pillow too, same threads):
the like-for-like comparison. The table's title says which.

    .venv/bin/python bench/vs_dlio.py --format jpeg --record-bytes 322957 --files 2000 --batch 24 --threads 8 \
        --compute 0 --dlio-python /tmp/dliovenv/bin/python --reps 3 [--decode]

CPU per sample, the figure that sizes a client fleet, comes from one measurement applied to
both tools: each contender runs as its own process (the `iogen run` command, DLIO's
`dlio_benchmark` script) and its whole process tree's user + system CPU seconds are the
difference of this script's getrusage(RUSAGE_CHILDREN) around it (benchenv.run_measured),
DataLoader workers and start-up included. It is divided by the samples both tools read (files x
samples per file x epochs, the same for both). iogen's own steady figure (CPU s per 1,000
samples over its metrics window, summary.json iogen.cpu) is printed beside it.

    .venv/bin/python bench/vs_dlio.py --dlio-python /tmp/dliovenv/bin/python --reps 3

DLIO 2.0.0 in its own venv: python3 -m venv /tmp/dliovenv && /tmp/dliovenv/bin/pip install
--no-deps dlio-benchmark==2.0.0, then torch, tensorflow-cpu, hydra-core, omegaconf, pandas,
psutil, pydftracer==1.0.2, h5py, Pillow, mpi4py, mpich. DLIO 2.0 also needs a valid/ folder in
the data folder (iogen datagen makes one).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchenv import contender_run, machine_line, print_footer, run_measured, runs_table  # noqa: E402

WORKLOAD_YAML = """\
model: iogen_vs_dlio
framework: {framework}
workflow:
  generate_data: False
  train: True
  evaluation: False
  checkpoint: False
dataset:
  data_folder: {data}
  format: {fmt}
  num_files_train: {files}
  num_samples_per_file: 1
  record_length: {record}
reader:
  data_loader: {loader}
  batch_size: {batch}
  read_threads: {threads}
train:
  epochs: {epochs}
  computation_time: {compute}
metric:
  au: 0.90
"""


def dlio_available(python: str | None) -> str | None:
    """None when `python` can import dlio_benchmark; else why DLIO cannot be measured."""
    if not python:
        return "no DLIO Python given (--dlio-python or $IOGEN_DLIO_PYTHON)"
    if not os.path.exists(python):
        return f"{python} does not exist"
    res = subprocess.run([python, "-c", "import dlio_benchmark"], capture_output=True, text=True)
    if res.returncode != 0:
        return f"{python} cannot import dlio_benchmark: {res.stderr.strip().splitlines()[-1:]}"
    return None


def warm(paths, buf, core) -> None:
    """Read every file once so every contender starts from a warm page cache."""
    for p in paths:
        core.probes.pread_loop_baseline(p, 1 << 20, buf)


def launcher(ranks: int, bindir: str) -> list:
    """The mpiexec prefix that starts `ranks` ranks (none for one rank): the mpiexec beside `bindir`'s
    Python, else the one on PATH."""
    if ranks == 1:
        return []
    mpiexec = os.path.join(bindir, "mpiexec")
    return [mpiexec if os.path.exists(mpiexec) else "mpiexec", "-n", str(ranks)]


def run_dlio(python: str, work: str, rep: int, ranks: int = 1) -> dict:
    """One DLIO run: DLIO's own summary.json metric block, and its process tree's CPU (`cpu_s`)."""
    out = os.path.join(work, f"dlio-out-{rep}")
    script = os.path.join(os.path.dirname(python), "dlio_benchmark")
    cmd = [*launcher(ranks, os.path.dirname(python)), script, "--config-dir", os.path.join(work, "cfg"), "workload=iogen_vs_dlio",
           f"++workload.output.folder={out}", f"hydra.run.dir={out}/hydra"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    res, user, system = run_measured(cmd, capture_output=True, text=True, cwd=work, env=env, timeout=1800)
    path = os.path.join(out, "summary.json")
    if res.returncode != 0 or not os.path.exists(path):
        raise SystemExit(f"DLIO failed ({res.returncode}): {' '.join(cmd)}\n{res.stdout[-3000:]}{res.stderr[-3000:]}")
    with open(path, encoding="utf-8") as fh:
        return dict(json.load(fh)["metric"], cpu_s=user + system, window_cpu_s_per_1000_samples=None)


def run_iogen(base: list, loader: str, ranks: int = 1) -> dict:
    """One `iogen run` as its own process (under mpiexec for several ranks): its summary's DLIO-key
    metric block, its process tree's CPU (`cpu_s`, measured as DLIO's is) and iogen's own window figure."""
    iogen = os.path.join(os.path.dirname(sys.executable), "iogen")
    cmd = [*launcher(ranks, os.path.dirname(sys.executable)), iogen, "run", "default", *base, f"reader.data_loader={loader}", "--quiet"]
    res, user, system = run_measured(cmd, capture_output=True, text=True, timeout=1800)
    found = re.search(r"^results: (.+)$", res.stdout, re.M)
    if res.returncode not in (0, 1) or not found:  # 1: the AU gate, which this comparison does not judge
        raise SystemExit(f"iogen failed ({res.returncode}): {' '.join(cmd)}\n{res.stdout[-3000:]}{res.stderr[-3000:]}")
    with open(os.path.join(found.group(1), "summary.json"), encoding="utf-8") as fh:
        doc = json.load(fh)
    return dict(doc["metric"], cpu_s=user + system,
                window_cpu_s_per_1000_samples=(doc["iogen"].get("cpu") or {}).get("window_cpu_s_per_1000_samples"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dlio-python", default=os.environ.get("IOGEN_DLIO_PYTHON"),
                    help="the Python of a venv with dlio_benchmark 2.0 (default: $IOGEN_DLIO_PYTHON)")
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--record-bytes", type=int, default=1 << 20)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2, help="read_threads for both tools")
    ap.add_argument("--compute", type=float, default=0.01, help="computation_time per step, seconds (both tools)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--loader", default=None, choices=["pytorch", "tensorflow"],
                    help="DLIO's data_loader (default: pytorch for npz, tensorflow for tfrecord); iogen uses the "
                         "same loader, and its native one beside it")
    ap.add_argument("--format", default="npz", choices=["npz", "tfrecord", "jpeg"],
                    help="the dataset's format (TFRecord records carry the `image` and `size` features both read; "
                         "JPEG: one image a file)")
    ap.add_argument("--decode", action="store_true",
                    help="jpeg: iogen decodes every image with Pillow (reader.decode_images), as DLIO 2.0 does")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=1,
                    help="ranks (emulated accelerators) for both tools, each under mpiexec -n RANKS when above 1; "
                         "the files are shared out among them by each tool")
    ap.add_argument("--dir", default=None, help="work folder (default: a temporary folder)")
    args = ap.parse_args(argv)
    args.loader = args.loader or ("tensorflow" if args.format == "tfrecord" else "pytorch")
    if args.decode and args.format != "jpeg":
        ap.error("--decode applies to --format jpeg")
    if args.ranks < 1:
        ap.error("--ranks must be at least 1")

    from iogen import core_switch as core

    before = machine_line()
    work = os.path.abspath(args.dir or tempfile.mkdtemp(prefix="iogen-vs-dlio-"))
    data = os.path.join(work, "data")
    base = [f"dataset.data_folder={data}", f"output.folder={work}/iogen-results", f"dataset.format={args.format}",
            f"dataset.num_files_train={args.files}", "dataset.num_samples_per_file=1",
            f"dataset.record_length_bytes={args.record_bytes}", "dataset.record_length_bytes_stdev=0",
            f"reader.batch_size={args.batch}", f"reader.read_threads={args.threads}",
            f"train.computation_time={args.compute}", f"train.epochs={args.epochs}", "metric.au=0.9",
            "workflow.evaluation=False", "workflow.checkpoint=False"]
    run_iogen(base + ["workflow.generate_data=True", "train.epochs=1"], "native")  # generate once
    base.append("workflow.generate_data=False")
    if args.decode:
        base.append("reader.decode_images=True")
    os.makedirs(os.path.join(data, "valid"), exist_ok=True)  # DLIO 2.0 lists valid/ even without eval files
    paths = sorted(glob.glob(os.path.join(data, "train", "**", f"*.{args.format}"), recursive=True))
    os.makedirs(os.path.join(work, "cfg", "workload"), exist_ok=True)
    with open(os.path.join(work, "cfg", "workload", "iogen_vs_dlio.yaml"), "w", encoding="utf-8") as fh:
        fh.write(WORKLOAD_YAML.format(data=data, fmt=args.format, files=args.files, record=args.record_bytes,
                                      loader=args.loader, framework=args.loader,
                                      batch=args.batch, threads=args.threads, epochs=args.epochs,
                                      compute=args.compute))
    why_not = dlio_available(args.dlio_python)
    buf = core.reader.aligned_buffer(8 << 20)
    contenders = ([] if why_not else ["DLIO 2.0"]) + [f"iogen {args.loader}", "iogen native"]
    results = {c: [] for c in contenders}
    for rep in range(args.reps):
        for c in contenders:
            with contender_run(f"{c}, repetition {rep + 1}"):  # each from a quiet machine, judged on its own
                warm(paths, buf, core)
                if c == "DLIO 2.0":
                    results[c].append(run_dlio(args.dlio_python, work, rep, args.ranks))
                else:
                    results[c].append(run_iogen(base, c.split()[1], args.ranks))
        print(f"repetition {rep + 1} done", file=sys.stderr, flush=True)

    keys = (("train_au_mean_percentage", "AU %", ".2f"),
            ("train_throughput_mean_samples_per_second", "samples/s", ",.1f"),
            ("train_io_mean_MB_per_second", "MiB/s (DLIO's MB key)", ",.1f"))
    print(f"iogen vs DLIO: {args.files} {args.format} files x {args.record_bytes:,} B, {args.loader} loader, batch {args.batch}, read_threads "
          f"{args.threads} for both, {args.ranks} rank{'s' if args.ranks > 1 else ''}, compute {args.compute * 1e3:g} ms/step, {args.epochs} epochs, page cache warm, "
          f"{args.reps} repetitions alternating (medians, min-max); iogen core {core.core_description()}"
          + ("; jpeg: iogen decodes with Pillow, as DLIO does" if args.decode else
             "; jpeg: iogen reads the bytes, DLIO 2.0 decodes with Pillow" if args.format == "jpeg" else ""))
    print()
    print("| contender | " + " | ".join(name for _, name, _ in keys) + " | samples/s vs DLIO |")
    print("|---|" + "---:|" * (len(keys) + 1))
    for c in contenders:
        cells = []
        for key, _, spec in keys:
            vals = [r[key] for r in results[c]]
            cells.append(f"{format(statistics.median(vals), spec)} ({format(min(vals), spec)}-{format(max(vals), spec)})")
        if why_not:
            ratio = "DLIO not measured"
        else:
            rs = [a["train_throughput_mean_samples_per_second"] / b["train_throughput_mean_samples_per_second"]
                  for a, b in zip(results[c], results["DLIO 2.0"])]
            ratio = f"{statistics.median(rs):.2f}x ({min(rs):.2f}-{max(rs):.2f})"
        print(f"| {c} | " + " | ".join(cells) + f" | {ratio} |")
    print()
    samples = args.files * args.epochs  # num_samples_per_file is 1 for both tools
    print(f"CPU per 1,000 samples (user + system s of each tool's whole process tree, start-up and loader workers "
          f"included; {samples:,} samples read per run):")
    print()
    print("| contender | CPU s per run | CPU s / 1,000 samples | vs DLIO | iogen's window figure (s / 1,000 samples) |")
    print("|---|---:|---:|---:|---:|")
    def per_k(c):
        return [r["cpu_s"] / samples * 1000.0 for r in results[c]]

    for c in contenders:
        mine = per_k(c)
        window = [r["window_cpu_s_per_1000_samples"] for r in results[c] if r["window_cpu_s_per_1000_samples"]]
        ratio = "DLIO not measured" if why_not else f"{statistics.median(mine) / statistics.median(per_k('DLIO 2.0')):.3f}x"
        print(f"| {c} | {statistics.median(r['cpu_s'] for r in results[c]):.2f} | "
              f"{statistics.median(mine):.3f} ({min(mine):.3f}-{max(mine):.3f}) | {ratio} | "
              f"{format(statistics.median(window), '.3f') if window else 'n/a (DLIO does not measure it)'} |")
    print()
    if why_not:
        print(f"DLIO was not measured: {why_not}.")
    print("Each contender's run waited for its own cool-down (1-minute load below 1); the load at its end is "
          "its own (shown, not judged):")
    print()
    print(runs_table())
    print()
    print("DLIO 2.0 counts each epoch's first step (loader start-up) in its throughput but leaves it out of its AU; "
          "iogen leaves it out of both (metric.exclude_start_steps=1).")
    print_footer(before, __file__, argv)
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
