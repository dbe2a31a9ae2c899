"""What every benchmark prints beside its figures: the machine, how loaded it was, the command.

These benchmarks run on shared machines; a figure without the load it was taken under cannot be
judged. Each script prints `machine_line()` before and after measuring and `command_line()`.
"""
from __future__ import annotations

import os
import platform
import shlex
import sys


def load_line() -> str:
    """1/5/15-minute load averages against the CPUs this process may use."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} on {cpus} CPUs"


def machine_line() -> str:
    """Host, CPUs, Python, and the load right now."""
    return (f"host {platform.node()}, {platform.machine()}, Linux {platform.release()}, "
            f"python {platform.python_version()}; {load_line()}")


def command_line(script: str, argv=None) -> str:
    """The command that reproduces this run, as docs/benchmarks.md shows it."""
    args = sys.argv[1:] if argv is None else list(argv)
    return " ".join([".venv/bin/python", f"bench/{os.path.basename(script)}"] + [shlex.quote(a) for a in args])


def print_footer(before: str, script: str, argv=None) -> None:
    """The lines that close every benchmark's output: the machine before and after, the command."""
    print(f"before: {before}")
    print(f"after: {machine_line()}")
    print(f"command: {command_line(script, argv)}")
