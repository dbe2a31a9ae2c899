"""iogen's command line. Imports stay inside the commands so `iogen --help` is instant.

Exit codes (defined in iogen/errors.py): 0 success, 1 the run completed but failed its gate,
2 bad usage, config or data, 3 the run failed (a rank died, an MPI wait timed out, an internal
error), 130 interrupted.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings

# numpy's OpenBLAS starts a pool of spinning threads per process for matrix maths iogen never does:
# with one rank per emulated accelerator, that is a pool per rank on the host it shares. One thread,
# unless the user asked for more (set before numpy is imported: no command imports it before this).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from ..errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED, EXIT_USAGE


class _Parser(argparse.ArgumentParser):
    """argparse, except that the optional KEY=VALUE overrides are never listed as required."""

    def error(self, message):
        if "arguments are required" in message:  # argparse lists a nargs="*" positional too
            message = message.replace(", KEY=VALUE", "").replace("KEY=VALUE, ", "")
        super().error(message)


_QUIET = {"run": "no live progress; one line per epoch at most",
          "datagen": "no live progress",
          "search": "no probe progress lines (the table and the result are still printed)"}


def _workload_args(p: argparse.ArgumentParser, command: str = "") -> None:
    p.add_argument("workload", metavar="WORKLOAD", help="bundled workload name (see `iogen workloads`) or a YAML file")
    p.add_argument(
        "overrides", metavar="KEY=VALUE", nargs="*",
        help="config overrides: section.key=value or DLIO's ++workload.section.key=value",
    )
    p.add_argument("--accelerator", "-a", metavar="NAME", help="pick the compute time of this accelerator (e.g. h100)")
    p.add_argument("--quiet", "-q", action="store_true",
                   help=_QUIET.get(command, "accepted for scripts; this command prints no progress"))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = _Parser(
        prog="iogen",
        description="Deep-learning I/O load generator: emulates training jobs without a model and "
        "measures how busy storage keeps the accelerators (AU), samples/s and MiB/s.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and the core implementation in use")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    sub.add_parser("workloads", help="list bundled workloads and their key numbers")

    p = sub.add_parser("validate", help="print the resolved config, dataset size and steps; no I/O")
    _workload_args(p, "validate")
    p.add_argument("--world-size", "-n", type=int, default=None, help="plan for this many ranks (default: launcher's or 1)")
    p.add_argument("--json", action="store_true", help="print the resolved config and the figures as JSON")

    p = sub.add_parser("datagen", help="generate the dataset (parallel, resumable, with a manifest)")
    _workload_args(p, "datagen")
    p.add_argument("--workers", "-j", type=int, default=None, help="parallel writers per rank (default: CPU count)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace data iogen did not write with these settings (a foreign file with a dataset "
                        "file's name, a dataset generated with other settings); other files are never touched")

    p = sub.add_parser("datasize", help="MLPerf Storage's minimum dataset for N accelerators and the client memory")
    _workload_args(p, "datasize")
    p.add_argument("--accelerators", "-N", type=int, required=True, metavar="N",
                   help="emulated accelerators (ranks) across all hosts")
    p.add_argument("--hosts", type=int, default=1, metavar="H", help="client hosts (default 1)")
    p.add_argument("--host-memory", type=float, default=None, metavar="GIB",
                   help="memory of each client host in GiB (default: this host's MemTotal)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")

    p = sub.add_parser("search", help="find the most accelerators that keep AU at the threshold (real runs)")
    _workload_args(p, "search")
    p.add_argument("--launcher", required=True, metavar="TEMPLATE",
                   help='how to start n ranks, with {n}: "mpiexec -n {n}", "srun -n {n} --kill-on-bad-exit=1"')
    p.add_argument("--max", type=int, required=True, metavar="N", help="most accelerators to try")
    p.add_argument("--runs", type=int, default=1, metavar="R", help="measured runs per probe (default 1)")
    p.add_argument("--noise", type=float, default=2.0, metavar="PP",
                   help="a count whose mean AU is within PP percentage points of the threshold is probed again "
                        "(default 2)")
    p.add_argument("--repeats", type=int, default=1, metavar="K",
                   help="extra probes at most for a count near the threshold (default 1)")
    p.add_argument("--min-steps", type=int, default=50, metavar="S",
                   help="measured steps per rank every probe needs, over its epochs and runs: train.epochs is "
                        "raised for a probe that would measure fewer (default 50)")
    p.add_argument("--output", "-o", metavar="DIR", help="where the search folder goes (default: output.folder)")
    p.add_argument("--no-plot", action="store_true", help="no search.png (matplotlib not needed)")

    p = sub.add_parser("verify", help="check the dataset against its manifest and its format")
    _workload_args(p, "verify")

    p = sub.add_parser("run", help="emulate training and write a run folder")
    _workload_args(p, "run")
    p.add_argument("--output", "-o", metavar="DIR", help="results folder (same as output.folder=DIR)")
    p.add_argument("--generate", action="store_true", help="generate missing data first (same as workflow.generate_data=True)")
    p.add_argument("--runs", type=int, default=1, metavar="N",
                   help="measured runs; with N > 1 or --warmup, a campaign: all runs in one campaign folder, "
                        "then its report (default 1)")
    p.add_argument("--warmup", type=int, default=0, metavar="W",
                   help="warm-up runs before the measured ones: labelled, left out of the statistics (default 0)")

    p = sub.add_parser("report", help="aggregate run folders: text, JSON and an HTML report")
    p.add_argument("runs", metavar="RUN_DIR", nargs="+",
                   help="run folders, campaign folders, or folders holding run folders")
    p.add_argument("--output", "-o", metavar="DIR",
                   help="where report.json and report.html go (default: the run or campaign folder when given "
                        "one, else ./report-<UTC timestamp>)")
    p.add_argument("--reduction", choices=("mean", "olympic", "median", "min"), default="mean",
                   help="rule of the campaign headline (default: mean, MLPerf Storage's)")
    p.add_argument("--interval", type=float, default=None, metavar="S",
                   help="time-series interval in seconds (default 1 s; finer for runs shorter than 30 s)")
    p.add_argument("--trace", action="store_true",
                   help="also write per-rank DFTracer .pfw traces into each run folder's traces/")
    p.add_argument("--no-html", action="store_true", help="write report.json only")
    p.add_argument("--requests", action="store_true",
                   help="print one run folder's request log (output.request_log) as CSV, one row per request, "
                        "and write nothing")

    p = sub.add_parser("compare", help="regression gate for CI: exit 1 on a significant slowdown")
    p.add_argument("baseline", metavar="BASELINE", help="run folder, campaign folder or report.json")
    p.add_argument("candidate", metavar="CANDIDATE", help="run folder, campaign folder or report.json")
    p.add_argument("--threshold", type=float, default=5.0, metavar="PCT",
                   help="tolerated slowdown in %% of the baseline mean (default 5)")
    p.add_argument("--metric", choices=("throughput", "au", "io", "ckpt-write", "ckpt-read", "ckpt-write-s",
                                        "ckpt-read-s", "cpu-gib", "cpu-samples", "cpu-invocation",
                                        "cpu-invocation-samples"), default=None,
                   help="gate metric: samples/s, AU %% or MiB/s; for checkpoint-only runs checkpoint write or "
                        "read GiB/s, or their duration (-s); CPU seconds of the process trees (lower is better) "
                        "per GiB read or per 1,000 samples over the window (cpu-gib, cpu-samples), of the whole "
                        "invocation (cpu-invocation) or per 1,000 samples of it (cpu-invocation-samples) "
                        "(default throughput; for checkpoint-only runs ckpt-write, or ckpt-read when nothing was "
                        "written)")
    p.add_argument("--json", metavar="FILE", help="also write the comparison as JSON")
    p.add_argument("--force", action="store_true",
                   help="compare runs of different configurations (format, loader, dataset, ranks, compute)")
    return parser


def _version() -> str:
    from .. import __version__

    try:
        from ..core_switch import core_description

        core = core_description()
    except ImportError as exc:  # CoreMissingError: say so, do not hide it
        core = f"MISSING ({exc})"
    return f"iogen {__version__}, core: {core}"


def main(argv=None) -> int:
    """Entry point of the `iogen` command; as the program itself (argv None) it exits when done.

    Exiting skips the interpreter's teardown: with torch or tensorflow imported, freeing every
    module takes 0.5-2.4 s on the loaded 2-core development VM (bench/failure_paths.py), which
    every run would wait for. Exit handlers still run (DataLoader worker shutdown), output is
    flushed, files are closed; under MPI, MPI is finalised first (exit_now).
    """
    if argv is not None:
        return run_command(argv)
    try:
        code = run_command(argv)
    except SystemExit:
        raise  # argparse's usage errors and --help
    except BaseException as exc:  # a bug: one line saying where its traceback is, exit 3
        report_internal_error(exc)
        code = EXIT_RUN_FAILED
    exit_now(code)


def report_internal_error(exc: BaseException, stream=None) -> None:
    """One line for an error iogen did not raise on purpose (a bug): what, and where the traceback is.

    A run writes the traceback into its log (iogen.common.runlog.close_log); elsewhere it is printed only
    with IOGEN_TRACEBACK=1, for a bug report.
    """
    import os
    import traceback

    stream = stream or sys.stderr
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    log = getattr(exc, "iogen_log", None)
    where = (f"the traceback is in {log}" if log else
             "run again with IOGEN_TRACEBACK=1 to print the traceback")
    if os.environ.get("IOGEN_TRACEBACK") == "1":
        traceback.print_exception(exc, file=stream)
    print(f"iogen: error: the run failed on an internal error (a bug, exit 3): {' '.join(what.split())}; "
          f"{where}", file=stream)


def exit_now(code: int) -> None:
    """Run the exit handlers, flush the standard streams and end the process with `code`.

    Under MPI, after the exit handlers (iogen.world.communicator's: the failure epilogue's exit barrier, the
    heartbeat's goodbye), MPI is finalised and the process ends through the C library's exit():
    MPICH registers exit handlers of its own, and ranks that skip them by os._exit are, now and
    then, killed by its launcher (Hydra) before they report their status (docs/mpi.md, "Exit").
    """
    import atexit
    import os
    import threading

    mpi = sys.modules.get("mpi4py.MPI")
    try:
        # What interpreter shutdown does first, in its order: wait for non-daemon threads (and
        # the executors' exit hooks), then the exit handlers; only the module teardown is skipped.
        threading._shutdown()  # noqa: SLF001
        atexit._run_exitfuncs()  # noqa: SLF001
    finally:
        _flush_std()
        if mpi is not None:
            _leave_mpi(mpi, code)
        os._exit(code)


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _leave_mpi(MPI, code: int) -> None:
    """Finalise MPI (every rank meets there), then the C library's exit(code); does not return."""
    import ctypes

    try:
        if MPI.Is_initialized() and not MPI.Is_finalized():
            MPI.Finalize()
    finally:
        _flush_std()
        # PyDLL keeps the GIL through the call: no Python thread runs while C exit handlers do.
        ctypes.PyDLL(None).exit(int(code))


def run_command(argv=None) -> int:
    """Parse argv (default: sys.argv[1:]), run the command, return its exit code."""
    parser = build_parser()
    # Overrides may come before or after options (`run default --generate a.b=1`): argparse
    # leaves the late ones unparsed, so gather them here instead of rejecting them.
    args, extra = parser.parse_known_args(argv)
    late = [a for a in extra if "=" in a and not a.startswith("-")]
    unknown = [a for a in extra if a not in late]
    if unknown or (late and not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(unknown or late)}")
    if late:
        args.overrides = list(args.overrides) + late
    from ..errors import IogenError

    if args.version:
        try:
            print(_version())
        except IogenError as exc:  # IOGEN_CORE names no implementation
            _print_error(exc)
            return exc.exit_code
        return EXIT_OK
    if not args.command:
        parser.print_help()
        return EXIT_USAGE

    warnings.showwarning = _show_warning
    from ..common.signals import describe_interrupt, install

    install()  # SIGTERM and SIGHUP end a command as Ctrl-C does (exit 130, summary kept)
    try:
        from . import commands

        return getattr(commands, f"cmd_{args.command}")(args)
    except KeyboardInterrupt as exc:
        print(f"iogen: {describe_interrupt(exc)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except IogenError as exc:
        _print_error(exc)
        return exc.exit_code
    except ModuleNotFoundError as exc:  # an optional package the up-front checks did not foresee
        from .deps import missing_module_message

        message = missing_module_message(exc)
        if message is None:
            raise
        print(f"iogen: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `iogen validate ... | head`: the reader has what it wanted
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return EXIT_OK
    except OSError as exc:
        from ..errors import os_error_text

        print(f"iogen: error: {os_error_text(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except MemoryError:
        # iogen.config.limits refuses what cannot fit before anything is written; this is the
        # net under that estimate (it is a lower bound), so the user still gets one line.
        print("iogen: error: out of memory: the workload needs more memory than this host has for "
              "it (see docs/configuration.md, 'Limits')", file=sys.stderr)
        return EXIT_USAGE


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings read as the tool's own messages, not as Python source locations."""
    print(f"iogen: warning: {message}", file=sys.stderr)


def _print_error(exc) -> None:
    if getattr(exc, "quiet", False):  # every rank raised the same error and rank 0 says it
        return
    problems = getattr(exc, "problems", None)
    if problems and len(problems) > 1:
        print(f"iogen: error: {len(problems)} problems:", file=sys.stderr)
        for line in problems:
            print(f"  - {line}", file=sys.stderr)
    else:
        print(f"iogen: error: {exc}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
