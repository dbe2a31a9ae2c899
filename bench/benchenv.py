"""What every benchmark prints beside its figures: the machine, how loaded it was, the command;
and the cool-down every bench script waits for before it measures (below).

These benchmarks run on shared machines; a figure without the load it was taken under cannot be
judged. Each script prints `machine_line()` before and after measuring and `command_line()`,
and importing this module makes it wait for a quiet machine first and say at exit whether its
figures count toward a target (`cool-down:` line; docs/benchmarks.md).
"""
from __future__ import annotations

import atexit
import contextlib
import os
import platform
import resource
import shlex
import subprocess
import sys
import threading
import time


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


def run_measured(cmd, **kwargs):
    """subprocess.run(cmd) and the CPU its whole process tree spent: (CompletedProcess, user s, system s).

    The difference of getrusage(RUSAGE_CHILDREN) around the run: the child and every descendant
    that was waited for (a descendant's waited-for children roll up into its own figure), the
    same measurement whichever tool runs. A descendant left running, or reparented before it was
    waited for, is not counted; run one command at a time from this process.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run(cmd, **kwargs)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return res, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime


DROP_CACHES = "/proc/sys/vm/drop_caches"


def settle_after_delete() -> bool:
    """After a benchmark removed many files: os.sync(), then drop the kernel's clean caches (root only).

    Why: ext4 without a journal (this project's machines) never reuses an inode freed less than a
    minute ago whose inode-table block is still cached, and each new file's inode search walks past
    every such inode from the start of the group, under the folder's lock (ext4 recently_deleted()).
    A writer that starts right after 10^4 deletes then pays 300-500 us of system time a file
    instead of 40-80 us, more or less depending on where its folder lands: the figure measures the
    previous contender's deletes, not the writer. With the cached inode-table blocks dropped, no
    freed inode counts as recent. Returns whether the caches were dropped (False: not root; the
    caller says so beside its figures)."""
    os.sync()
    try:
        with open(DROP_CACHES, "w") as f:
            f.write("3\n")
    except OSError:
        return False
    return True


def settle_note(dropped: bool) -> str:
    """The line a file-writing benchmark prints about settle_after_delete()."""
    if dropped:
        return ("after each removal of a run's files: sync, then the kernel's clean caches dropped "
                "(no contender pays ext4's scan past inodes another one freed)")
    return ("after each removal of a run's files: sync only (not root: caches not dropped); on ext4 "
            "without a journal a writer after a big delete pays an inode scan, so system time may be the "
            "previous contender's")


def print_footer(before: str, script: str, argv=None) -> None:
    """The lines that close every benchmark's output: the machine before and after, the command."""
    print(f"before: {before}")
    print(f"after: {machine_line()}")
    print(f"command: {command_line(script, argv)}")


# ---------------------------------------------------------------------------------------------
# Cool-down: a figure counts toward a target (docs/benchmarks.md) only when it was taken on a
# quiet machine. Every bench script imports this module before it measures; the import waits
# until the 1-minute load is below COOLDOWN_LOAD and no other process uses HEAVY_CPU_SHARE of a
# CPU or more, for at most --cooldown-max seconds (default DEFAULT_MAX_WAIT_S), and at exit
# prints one `cool-down:` line: the load before and after, what else ran, and whether the
# figure counts. The rule: the start must be quiet, and no process outside the benchmark's own
# process tree may be heavy at the start, at any look while the benchmark runs (Watch, every
# WATCH_S) or at the end. The load the benchmark's own ranks, workers and threads cause is part of
# what it measures: the load after is printed as information, never as a verdict (a 16-rank run
# on 2 cores leaves a 1-minute load of 6-9 however quiet the machine was). --no-cooldown (or
# IOGEN_BENCH_NO_COOLDOWN=1) skips the waits; the figure is then judged the same way. A script that
# alternates contenders which each load the machine (decoding workers, many ranks) runs each in
# contender_run: its own wait first, so each contender starts quiet; the load one contender leaves
# is never the next one's start.

COOLDOWN_LOAD = 1.0  # 1-minute load average a quiet start needs
HEAVY_CPU_SHARE = 0.25  # another process using this share of one CPU or more is other work
DEFAULT_MAX_WAIT_S = 900.0
SAMPLE_S = 2.0  # how long one look at the other processes lasts
POLL_S = 15.0
WATCH_S = 5.0  # while the benchmark runs, the other processes are looked at this often


def _proc_ticks() -> dict:
    """{pid: (utime + stime ticks, name, parent pid)} of every process /proc shows."""
    out = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        comm = stat[stat.find(b"(") + 1:stat.rfind(b")")].decode(errors="replace")
        fields = stat[stat.rfind(b")") + 2:].split()
        try:
            out[int(name)] = (int(fields[11]) + int(fields[12]), comm, int(fields[1]))
        except (IndexError, ValueError):
            continue
    return out


def heavy_processes(before: dict, after: dict, interval_s: float, ticks_per_s: float, exclude=(),
                    share: float = HEAVY_CPU_SHARE) -> list:
    """[(pid, name, share of one CPU)] of the processes in both readings that used >= `share` of a
    CPU between them, heaviest first; `exclude`: pids that are this benchmark (itself, its tree)."""
    heavy = []
    for pid, (t1, name, _) in after.items():
        if pid in exclude or pid not in before:
            continue
        used = (t1 - before[pid][0]) / ticks_per_s / interval_s
        if used >= share:
            heavy.append((pid, name, used))
    return sorted(heavy, key=lambda h: -h[2])


def _ours(procs: dict) -> set:
    """This process, its descendants, and its ancestors (the shell or run_all.sh that started it;
    not their other children: another engineer's work may share an ancestor with this one)."""
    me = os.getpid()
    mine = {me}
    grew = True
    while grew:
        kids = {p for p, (_, _, ppid) in procs.items() if ppid in mine and p not in mine}
        grew = bool(kids)
        mine |= kids
    pid = me
    while pid in procs and procs[pid][2] not in (0, pid):
        pid = procs[pid][2]
        mine.add(pid)
    return mine


def other_work(sample_s: float = SAMPLE_S) -> list:
    """Other processes heavy over the next `sample_s` seconds (the benchmark's own tree left out)."""
    before = _proc_ticks()
    time.sleep(sample_s)
    after = _proc_ticks()
    return heavy_processes(before, after, sample_s, float(os.sysconf("SC_CLK_TCK")), _ours(after))


def judge(load_start: float, heavy_start: list, heavy_end: list, timed_out: bool,
          threshold: float = COOLDOWN_LOAD, heavy_during: list = (), runs: list = ()) -> tuple[bool, str]:
    """(counts, why): a figure counts toward a target only from a quiet start (1-minute load below
    `threshold`) with no other process heavy beside it: not at the start, not at any look while it ran
    (`heavy_during`, Watch), not at the end. The load the benchmark itself raised (its ranks, workers,
    threads) never disqualifies it. `runs` (contender_run's records): each contender's run must start
    quiet too, after its own cool-down, with nothing else heavy at its start."""
    why = []
    for run in runs:
        if run["before"] >= threshold:
            why.append(f"{run['label']} started at 1-minute load {run['before']:.2f} >= {threshold:g}"
                       + (" (its cool-down wait ran out)" if run.get("timed_out") else ""))
        if run.get("heavy"):
            pid, name, used = run["heavy"][0]
            why.append(f"other work running at the start of {run['label']}: {name} (pid {pid}, {used:.0%} of a CPU)")
    if load_start >= threshold:
        why.append(f"1-minute load {load_start:.2f} >= {threshold:g} at the start"
                   + (" (the cool-down wait ran out)" if timed_out else " (no cool-down wait)"))
    for when, heavy in (("at the start", heavy_start), ("while it ran", heavy_during), ("at the end", heavy_end)):
        if heavy:
            shown = ", ".join(f"{name} (pid {pid}, {used:.0%} of a CPU)" for pid, name, used in heavy[:3])
            why.append(f"other work running {when}: {shown}" + (f" and {len(heavy) - 3} more" if len(heavy) > 3 else ""))
    if timed_out and not why:
        why.append("the cool-down wait ran out before the machine was quiet")
    if why:
        return False, "; ".join(why)
    shown = f"{load_start:.2f}" if round(load_start, 2) < threshold else f"{load_start:.4f}"  # 0.995 is not "1.00"
    each = (f"; each of its {len(runs)} contender runs started below {threshold:g} after its own cool-down "
            f"(loads {min(r['before'] for r in runs):.2f}-{max(r['before'] for r in runs):.2f} before, "
            f"{min(r['after'] for r in runs):.2f}-{max(r['after'] for r in runs):.2f} after, its own)") if runs else ""
    return True, f"quiet start (1-minute load {shown} < {threshold:g}) and nothing else heavy ran{each}"


def _pop_flags(argv: list) -> tuple[bool, float]:
    """Remove --no-cooldown and --cooldown-max S (or =S) from argv; (skip the wait, max wait s)."""
    skip = os.environ.get("IOGEN_BENCH_NO_COOLDOWN", "") not in ("", "0")
    max_wait = float(os.environ.get("IOGEN_BENCH_COOLDOWN_MAX", DEFAULT_MAX_WAIT_S))
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a == "--no-cooldown":
            skip = True
        elif a == "--cooldown-max" and i + 1 < len(argv):
            max_wait = float(argv[i + 1])
            i += 1
        elif a.startswith("--cooldown-max="):
            max_wait = float(a.split("=", 1)[1])
        else:
            out.append(a)
        i += 1
    argv[:] = out
    return skip, max_wait


_INSIDE = "IOGEN_BENCH_COOLDOWN_DONE"  # set for the children of a bench script that waited
COOLDOWN: dict = {}  # what the wait found; the `cool-down:` line at exit reports it


def cool_down(skip: bool, max_wait_s: float, poll_s: float = POLL_S, sample_s: float = SAMPLE_S,
              load_below: float = COOLDOWN_LOAD) -> dict:
    """Wait for a quiet machine (unless `skip`), at most `max_wait_s`; what was found at the start."""
    t0 = time.monotonic()
    while True:
        load = os.getloadavg()
        heavy = other_work(sample_s)
        waited = time.monotonic() - t0
        quiet = load[0] < load_below and not heavy
        if quiet or skip or waited >= max_wait_s:
            return {"load_before": load, "heavy_start": heavy, "waited_s": waited, "skipped": skip,
                    "timed_out": not quiet and not skip}
        print(f"cool-down: waiting for a quiet machine (1-minute load {load[0]:.2f}, {len(heavy)} other busy "
              f"process(es)), {waited:.0f} of at most {max_wait_s:.0f} s", file=sys.stderr, flush=True)
        time.sleep(max(0.0, min(poll_s, max_wait_s - waited)))


RUNS: list = []  # each contender's own run (contender_run): label, loads before and after, its wait


@contextlib.contextmanager
def contender_run(label: str, runs: list = RUNS, wait=None):
    """One contender's run held to the cool-down rule on its own: before it, a wait for a quiet machine
    (the script's --cooldown-max and --no-cooldown apply); its 1-minute loads before and after are kept
    in `runs` (the load after is the contender's own, shown, not judged), and the script's figure counts
    only if every run started quiet. For benchmarks that alternate contenders which each load the machine
    themselves (decoding workers, many ranks): the load one contender leaves is not the next one's start. `wait`: the cool-down to call (default: cool_down with the script's settings;
    none when this module was imported by a test or a tool)."""
    if wait is None:
        wait = ((lambda: cool_down(False, COOLDOWN["max_wait_s"])) if COOLDOWN and not COOLDOWN["skipped"]
                else (lambda: {"load_before": os.getloadavg(), "heavy_start": [], "timed_out": False}))
    state = wait()
    before = os.getloadavg()
    try:
        yield
    finally:
        runs.append({"label": label, "before": before[0], "after": os.getloadavg()[0],
                     "waited_s": state.get("waited_s", 0.0), "timed_out": state["timed_out"],
                     "heavy": state["heavy_start"]})


def runs_table(runs: list = RUNS) -> str:
    """The contender runs' own loads as a Markdown table (printed by the script beside its figures)."""
    lines = ["| run | waited s | 1-minute load before | after |", "|---|---:|---:|---:|"]
    lines += [f"| {r['label']} | {r['waited_s']:.0f} | {r['before']:.2f} | {r['after']:.2f} |" for r in runs]
    return "\n".join(lines)


class Watch:
    """Looks at the other processes every `every_s` seconds while the benchmark runs (a daemon thread,
    a /proc read per look): `heavy()` is every other process that used HEAVY_CPU_SHARE of a CPU or more
    between two looks, at its heaviest. The benchmark's own tree (mpiexec's ranks, DataLoader workers)
    is left out, so a benchmark that loads the machine itself is judged by what ran beside it."""

    def __init__(self, every_s: float = WATCH_S, read=_proc_ticks, clock=time.monotonic, ours=_ours):
        self.every_s = every_s
        self._read, self._clock, self._ours = read, clock, ours
        self._ticks = float(os.sysconf("SC_CLK_TCK"))
        self._seen: dict = {}
        self._last = (read(), clock())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-watch", daemon=True)

    def start(self) -> "Watch":
        self._thread.start()
        return self

    def look(self) -> None:
        """One look: who used a heavy share of a CPU since the last one."""
        (before, t0), after, t1 = self._last, self._read(), self._clock()
        for pid, name, used in heavy_processes(before, after, max(t1 - t0, 1e-3), self._ticks, self._ours(after)):
            if used > self._seen.get((pid, name), 0.0):
                self._seen[(pid, name)] = used
        self._last = (after, t1)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.look()

    def heavy(self) -> list:
        """[(pid, name, share of one CPU at its heaviest)] of the other heavy processes seen so far."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.every_s + 5)
        return sorted(((pid, name, used) for (pid, name), used in self._seen.items()), key=lambda h: -h[2])


def cooldown_line(state: dict, load_after, heavy_end: list) -> str:
    """The `cool-down:` line: load before and after (the after its own, information), the wait, and
    whether the figure counts."""
    watch = state.get("watch")
    counts, why = judge(state["load_before"][0], state["heavy_start"], heavy_end, state["timed_out"],
                        heavy_during=watch.heavy() if watch is not None else (), runs=state.get("runs", ()))
    b, a = state["load_before"], load_after
    wait = "wait skipped" if state["skipped"] else f"waited {state['waited_s']:.0f} s"
    return (f"cool-down: {wait}; load before {b[0]:.2f} / {b[1]:.2f} / {b[2]:.2f}, after {a[0]:.2f} / {a[1]:.2f} / "
            f"{a[2]:.2f}; "
            f"{'COUNTS toward a target' if counts else 'does NOT count toward a target'}: {why}")


def _report_at_exit() -> None:
    if not COOLDOWN:
        return
    print(cooldown_line(COOLDOWN, os.getloadavg(), other_work(1.0)), flush=True)


def _start() -> None:
    """At import by a bench script run as a program: wait, then report at exit (not under pytest or --help)."""
    main = sys.modules.get("__main__")
    script = os.path.abspath(getattr(main, "__file__", "") or "")
    if os.path.dirname(script) != os.path.dirname(os.path.abspath(__file__)) or script == os.path.abspath(__file__):
        return  # imported by a test or a tool, not by a bench script run as a program
    skip, max_wait = _pop_flags(sys.argv)
    if any(a in ("-h", "--help") for a in sys.argv[1:]) or os.environ.get(_INSIDE):
        return  # --help; or a helper process a bench script started (its parent waited and reports)
    os.environ[_INSIDE] = "1"
    COOLDOWN.update(cool_down(skip, max_wait), max_wait_s=max_wait, runs=RUNS)
    COOLDOWN["watch"] = Watch().start()
    atexit.register(_report_at_exit)


_start()
