"""How long a failure takes to end an MPI job, and what iogen's process exit saves (issue 11.9).

Failure paths: 2 ranks under `mpiexec` run the tiny default workload through the MPI test driver
(tests/mpi/drivers/run.py), which injects the failure on rank 1; the figure is the time from the
failure's first line on stderr to mpiexec's exit (median of --repeat). Process exit: a Python
that imported torch, ended the ordinary way (the baseline) and the way the `iogen` command ends
(iogen.cli.entry.exit_now: exit handlers, flush, os._exit), timed from its last output line to its exit;
and the same under `mpiexec -n 4` with iogen's MPI world started (exit_now: MPI_Finalize, then C
exit()), timed from the last rank's last line to mpiexec's exit.

    .venv/bin/python bench/failure_paths.py --repeat 3
    .venv/bin/python bench/failure_paths.py --repeat 10 --only-mpi-exit

Prints two Markdown tables.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchenv  # noqa: E402,F401 - waits for a quiet machine first; says at exit whether the figures count

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(HERE, "..", "tests", "mpi", "drivers", "run.py")
MARKS = ("failed:", "kills itself", "stops itself")
SCENARIOS = [
    ("exception on rank 1, native loader", "1:step:3", ["reader.data_loader=native"], {}),
    ("exception on rank 1, PyTorch loader, 2 workers", "1:step:3",
     ["reader.data_loader=pytorch", "reader.read_threads=2"], {}),
    ("rank 1 killed (SIGKILL), PyTorch loader, 2 workers", "1:kill:3",
     ["reader.data_loader=pytorch", "reader.read_threads=2"], {}),
    ("rank 1 stopped (SIGSTOP), IOGEN_MPI_LIVENESS_S=3", "1:stop:3", [], {"IOGEN_MPI_LIVENESS_S": "3"}),
]


def _env(**extra) -> dict:
    prefixes = ("PMI_", "OMPI_", "PMIX_", "SLURM_", "HYDRA_", "MPI_LOCAL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env["PYTHONSAFEPATH"] = "1"
    env.update(extra)
    return env


def _after_mark(cmd, env) -> float:
    """Seconds from the first failure line on stdout/stderr to the command's exit."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    mark = None
    for line in proc.stdout:
        if mark is None and any(m in line for m in MARKS):
            mark = time.monotonic()
    proc.wait()
    if mark is None:
        raise SystemExit(f"no failure line from {' '.join(cmd)}")
    return time.monotonic() - mark


def failure_paths(repeat: int, work: str) -> list[str]:
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    data = [f"dataset.data_folder={work}/data", f"output.folder={work}/results", "dataset.num_files_train=8",
            "dataset.record_length_bytes=65536", "dataset.record_length_bytes_stdev=0", "reader.batch_size=1",
            "train.epochs=2", "train.computation_time=0.01", "dataset.format=npz"]
    subprocess.run([sys.executable, "-m", "iogen", "datagen", "default", "-q", *data], check=True, env=_env(),
                   stdout=subprocess.DEVNULL)
    rows = ["| failure | seconds to the job's end (median, min-max) |", "|---|---:|"]
    for name, fail, over, extra in SCENARIOS:
        cmd = [mpiexec, "-n", "2", sys.executable, DRIVER, "run", "default", "-q", *data, *over,
               "workflow.generate_data=False"]
        times = [_after_mark(cmd, _env(IOGEN_TEST_FAIL=fail, **extra)) for _ in range(repeat)]
        rows.append(f"| {name} | {statistics.median(times):.2f} ({min(times):.2f}-{max(times):.2f}) |")
    return rows


def process_exit(repeat: int) -> list[str]:
    code = {"ordinary exit (baseline)": "",
            "iogen.cli.entry.exit_now": "from iogen.cli.entry import exit_now; exit_now(0)"}
    rows = ["| a Python with torch imported | seconds from its last line to its exit (median, min-max) |", "|---|---:|"]
    for name, tail in code.items():
        times = []
        for _ in range(repeat):
            proc = subprocess.Popen([sys.executable, "-c", "import torch\nprint('ready', flush=True)\n" + tail],
                                    stdout=subprocess.PIPE, text=True, env=_env())
            proc.stdout.readline()
            t0 = time.monotonic()
            proc.wait()
            times.append(time.monotonic() - t0)
        rows.append(f"| {name} | {statistics.median(times):.2f} ({min(times):.2f}-{max(times):.2f}) |")
    return rows


def mpi_exit(repeat: int, ranks: int = 4) -> list[str]:
    """`mpiexec -n ranks` of a Python with torch imported and iogen's MPI world started, ended the
    ordinary way (the baseline: iogen's exit under MPI before exit_now finalised MPI itself) and by
    iogen.cli.entry.exit_now; seconds from the last rank's last line to mpiexec's exit, and any rank
    the launcher killed (a rank that did not report exit code 0)."""
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    head = ("import torch\nfrom iogen.world.communicator import get_world\nw = get_world()\nw.sync()\n"
            "print('ready', flush=True)\n")
    code = {"ordinary exit, MPI finalised at teardown (baseline)": "import sys; sys.exit(0)",
            "iogen.cli.entry.exit_now (MPI_Finalize, C exit())": "from iogen.cli.entry import exit_now; exit_now(0)"}
    rows = [f"| {ranks} ranks, torch imported | seconds from the last rank's last line to mpiexec's exit "
            "(median, min-max) | launches with a rank killed |", "|---|---:|---:|"]
    for name, tail in code.items():
        times, killed = [], 0
        for _ in range(repeat):
            proc = subprocess.Popen([mpiexec, "-n", str(ranks), sys.executable, "-c", head + tail],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
            seen = 0
            t0 = None
            for line in proc.stdout:
                seen += line.count("ready")  # ranks share the pipe: two lines may arrive as one
                if seen == ranks and t0 is None:
                    t0 = time.monotonic()
            proc.wait()
            if t0 is None:
                raise SystemExit(f"mpiexec ended (exit {proc.returncode}) before every rank said ready")
            times.append(time.monotonic() - t0)
            killed += proc.returncode != 0
        rows.append(f"| {name} | {statistics.median(times):.2f} ({min(times):.2f}-{max(times):.2f}) | "
                    f"{killed} of {repeat} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only-mpi-exit", action="store_true", help="only the MPI process-exit table")
    args = ap.parse_args()
    if args.only_mpi_exit:
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, median of {args.repeat}\n")
        print("\n".join(mpi_exit(args.repeat)))
        return
    work = tempfile.mkdtemp(prefix="iogen-failure-bench-")
    try:
        load = os.getloadavg()[0]
        print(f"failure paths, 2 ranks, {os.cpu_count()} CPUs, load average {load:.1f}, median of {args.repeat}\n")
        print("\n".join(failure_paths(args.repeat, work)))
        print()
        print("\n".join(process_exit(args.repeat)))
        print()
        print("\n".join(mpi_exit(args.repeat)))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
