"""The retinanet headline: how many emulated b200 accelerators each tool keeps at AU >= 85% here.

MLPerf Storage v3.0's retinanet (JPEG, 322,957 B a file, batch 24, 8 read threads, 47.55 ms of
compute a step on b200), one rank per accelerator under mpiexec, the data in the page cache (the
machine's own limit, not a storage system's), measured in one sitting:

- iogen: `iogen search retinanet --accelerator b200 --launcher "mpiexec -n {n}" --max MAX` over the
  generated files; its verdict line (N and the AU at N) and its table are printed as they are.
- DLIO 2.0 (`--dlio-python`): the same files, the same batch, threads, compute and epochs, through its
  PyTorch loader (it decodes each JPEG with Pillow: DLIO 2.0 cannot read bytes only), at 1, 2, ...
  ranks until its mean AU falls below 85% (at most `--dlio-max`); its own summary's AU at each count.

iogen reads each sample's bytes (MLPerf Storage v3.0's reader); DLIO 2.0 decodes them: the comparison
says so. bench/vs_dlio.py --decode compares the two with decoding on both sides.

    .venv/bin/python bench/retinanet_headline.py --files 20000 --max 32 --dlio-python /path/to/dliovenv/bin/python
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchenv import machine_line, print_footer  # noqa: E402
from vs_dlio import WORKLOAD_YAML, dlio_available, run_dlio, warm  # noqa: E402

B200_BATCH, B200_COMPUTE, THREADS, AU = 24, 0.04755, 8, 85.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--max", type=int, default=32, help="most accelerators iogen's search tries")
    ap.add_argument("--loaders", default="native",
                    help="iogen's loaders to search with, comma-separated (the v3.0 file's is pytorch: 8 DataLoader "
                         "worker processes a rank)")
    ap.add_argument("--dlio-python", default=os.environ.get("IOGEN_DLIO_PYTHON"))
    ap.add_argument("--dlio-max", type=int, default=4, help="most ranks DLIO is tried at")
    ap.add_argument("--epochs", type=int, default=None,
                    help="iogen's train.epochs for every probe (default: the workload's 8; the search raises it where a "
                         "probe would measure fewer than 50 steps a rank)")
    ap.add_argument("--dlio-epochs", type=int, default=2)
    ap.add_argument("--dir", default=None, help="work folder (default: a temporary folder)")
    args = ap.parse_args(argv)

    from iogen import core_switch as core

    before = machine_line()
    work = os.path.abspath(args.dir or tempfile.mkdtemp(prefix="iogen-headline-"))
    data = os.path.join(work, "data")
    bindir = os.path.dirname(sys.executable)
    iogen = os.path.join(bindir, "iogen")
    mpiexec = os.path.join(bindir, "mpiexec")
    mpiexec = mpiexec if os.path.exists(mpiexec) else "mpiexec"
    size = [f"dataset.data_folder={data}", f"dataset.num_files_train={args.files}"]
    epochs = [] if args.epochs is None else [f"train.epochs={args.epochs}"]
    shown_epochs = "the workload's 8" if args.epochs is None else str(args.epochs)
    gen = subprocess.run([iogen, "datagen", "retinanet", *size], capture_output=True, text=True)
    if gen.returncode != 0:
        raise SystemExit(f"datagen failed: {gen.stderr[-2000:]}")
    os.makedirs(os.path.join(data, "valid"), exist_ok=True)  # DLIO 2.0 lists valid/
    paths = sorted(glob.glob(os.path.join(data, "train", "**", "*.jpeg"), recursive=True))
    buf = core.reader.aligned_buffer(8 << 20)
    warm(paths, buf, core)
    searches = {}
    for loader in args.loaders.split(","):
        warm(paths, buf, core)
        searches[loader] = subprocess.run([iogen, "search", "retinanet", "--accelerator", "b200", "--launcher",
                                           f"{mpiexec} -n {{n}}", "--max", str(args.max), "--no-plot", "--quiet",
                                           *size, *epochs, f"reader.data_loader={loader}",
                                           f"output.folder={work}/iogen-search-{loader}"], capture_output=True, text=True)

    dlio_rows, why_not = [], dlio_available(args.dlio_python)
    if not why_not:
        os.makedirs(os.path.join(work, "cfg", "workload"), exist_ok=True)
        with open(os.path.join(work, "cfg", "workload", "iogen_vs_dlio.yaml"), "w", encoding="utf-8") as fh:
            fh.write(WORKLOAD_YAML.format(data=data, fmt="jpeg", files=args.files, record=322957, loader="pytorch",
                                          framework="pytorch", batch=B200_BATCH, threads=THREADS,
                                          epochs=args.dlio_epochs, compute=B200_COMPUTE))
        for ranks in range(1, args.dlio_max + 1):
            warm(paths, buf, core)
            m = run_dlio(args.dlio_python, work, ranks, ranks)
            dlio_rows.append((ranks, m["train_au_mean_percentage"], m["train_throughput_mean_samples_per_second"]))
            if m["train_au_mean_percentage"] < AU:
                break

    print(f"retinanet, b200 (batch {B200_BATCH}, {THREADS} read threads, compute {B200_COMPUTE * 1e3:g} ms a step), "
          f"{args.files:,} JPEG files of 322,957 B in the page cache, one rank per accelerator under mpiexec, "
          f"{shown_epochs} epochs a probe; "
          f"iogen core {core.core_description()}; iogen reads the bytes, DLIO 2.0 decodes each JPEG with Pillow\n")
    verdicts = {}
    for loader, search in searches.items():
        found = re.search(r"^N (?:>=|=) \d+:.*$", search.stdout, re.M)
        verdicts[loader] = found.group(0) if found else "see its table"
        print(f"iogen search, {loader} loader (its table and verdict as printed):\n")
        print("```")
        print(search.stdout.strip() if search.returncode in (0, 1) else f"search failed ({search.returncode}):\n"
              + search.stdout[-2000:] + search.stderr[-2000:])
        print("```\n")
    if why_not:
        print(f"DLIO 2.0 was not measured: {why_not}.")
    else:
        print(f"DLIO 2.0, the same files and settings, {args.dlio_epochs} epochs, each count once:\n")
        print("| ranks | AU % | samples/s |")
        print("|---:|---:|---:|")
        for ranks, au, sps in dlio_rows:
            print(f"| {ranks} | {au:.2f} | {sps:,.1f} |")
        passing = [r for r, au, _ in dlio_rows if au >= AU]
        print()
        print(f"DLIO 2.0 keeps {max(passing) if passing else 0} accelerator(s) at AU >= {AU:g}% here.")
    for loader, verdict in verdicts.items():
        print(f"iogen, {loader} loader: {verdict}")
    print()
    print_footer(before, __file__, argv)
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
