"""CPU time of a rank's process tree: what the tool costs per sample (docs/metrics.md, "CPU time").

A rank's CPU time is user + system time of

- its own process, every thread included (tf.data's and the native loader's threads are
  in-process): `getrusage(RUSAGE_SELF)`;
- its descendants that ended and were waited for (PyTorch DataLoader workers of an epoch that
  is over, a generator's processes): `getrusage(RUSAGE_CHILDREN)`;
- its live descendants (DataLoader workers while they read): `utime + stime` of
  `/proc/<pid>/stat`, plus their own waited-for children (`cutime + cstime`).

Nothing is counted twice: a live descendant is not in RUSAGE_CHILDREN until it is waited for,
and once waited for it is no longer live (iogen.metrics.device finds the same tree for the
bytes read). A descendant that vanishes between the listing and its reading has been waited
for, so its time moves into its parent's children figure (read at the next sample). The figures
are measured, never estimated: the kernel's per-process accounting (/proc/<pid>/stat in clock
ticks, usually 10 ms; getrusage in microseconds).
"""
from __future__ import annotations

import os
import resource
from dataclasses import dataclass

from .device import PROC_ROOT, process_tree

GIB = 2**30

# The CPU figures a report shows and `iogen compare` can gate on (lower is better): key of
# summary.json `iogen.cpu`, what it is, unit.
CPU_METRICS = (
    ("window_cpu_s_per_gib", "CPU per GiB read (window)", "CPU s/GiB"),
    ("window_cpu_s_per_1000_samples", "CPU per 1,000 samples (window)", "CPU s/1000 samples"),
    ("invocation_cpu_s", "CPU of the whole invocation", "CPU s"),
    ("invocation_cpu_s_per_1000_samples", "CPU per 1,000 samples (whole invocation)", "CPU s/1000 samples"),
)


def cpu_values(doc: dict) -> dict | None:
    """The CPU_METRICS of one summary.json (None when the run recorded no CPU figures)."""
    cpu = (doc.get("iogen") or {}).get("cpu")
    if not isinstance(cpu, dict):
        return None
    return {key: cpu.get(key) for key, _, _ in CPU_METRICS}


@dataclass(frozen=True)
class CpuTimes:
    """User and system CPU seconds (a reading or a difference of two)."""

    user_s: float = 0.0
    system_s: float = 0.0

    @property
    def total_s(self) -> float:
        """user + system seconds."""
        return self.user_s + self.system_s

    def __add__(self, other: "CpuTimes") -> "CpuTimes":
        return CpuTimes(self.user_s + other.user_s, self.system_s + other.system_s)

    def __sub__(self, other: "CpuTimes") -> "CpuTimes":
        return CpuTimes(self.user_s - other.user_s, self.system_s - other.system_s)


def stat_cpu_ticks(stat: bytes) -> tuple[int, int] | None:
    """(utime + cutime, stime + cstime) in clock ticks from one /proc/<pid>/stat text; None if malformed.

    Fields 14-17 (utime, stime, cutime, cstime); the command name (field 2) may hold spaces and
    parentheses, so the fields are counted from after its last ")".
    """
    fields = stat[stat.rfind(b")") + 2:].split()
    # after the name: field 3 (state) is fields[0], so field k is fields[k - 3]
    if len(fields) < 15:
        return None
    try:
        utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    except ValueError:
        return None
    return utime + cutime, stime + cstime


def tree_times(own: resource.struct_rusage, children: resource.struct_rusage, descendant_stats,
               clock_ticks_per_s: float) -> CpuTimes:
    """The arithmetic of `tree_cpu`: own + waited-for children + live descendants (their /proc stat texts)."""
    user = own.ru_utime + children.ru_utime
    system = own.ru_stime + children.ru_stime
    for stat in descendant_stats:
        ticks = stat_cpu_ticks(stat) if stat is not None else None
        if ticks is not None:
            user += ticks[0] / clock_ticks_per_s
            system += ticks[1] / clock_ticks_per_s
    return CpuTimes(float(user), float(system))


def _stat_of(pid: int) -> bytes | None:
    try:
        with open(f"{PROC_ROOT}/{pid}/stat", "rb") as fh:
            return fh.read()
    except OSError:
        return None


def tree_cpu() -> CpuTimes:
    """CPU seconds so far of this process (since it started), its waited-for and its live descendants."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        descendants = process_tree()[1:]
    except OSError:  # no /proc: only what getrusage says
        descendants = []
    return tree_times(own, children, (_stat_of(p) for p in descendants), float(os.sysconf("SC_CLK_TCK")))


def cpu_rates(cpu_s, samples, nbytes) -> dict:
    """CPU seconds per GiB and per 1,000 samples; None where a figure is missing or zero."""
    ok = cpu_s is not None and cpu_s == cpu_s
    return {
        "cpu_s_per_gib": (cpu_s / (nbytes / GIB)) if ok and nbytes else None,
        "cpu_s_per_1000_samples": (cpu_s / samples * 1000.0) if ok and samples else None,
    }


def cpu_block(window_user_s, window_system_s, window_samples, window_bytes,
              invocation_user_s, invocation_system_s, invocation_samples, per_epoch_window_cpu_s=()) -> dict:
    """summary.json `iogen.cpu` from sums over ranks (docs/metrics.md, "CPU time"); None where unknown."""
    def total(u, s):
        return None if u is None or s is None else u + s

    window = total(window_user_s, window_system_s)
    invocation = total(invocation_user_s, invocation_system_s)
    w = cpu_rates(window, window_samples, window_bytes)
    i = cpu_rates(invocation, invocation_samples, None)
    return {
        "window_cpu_s": window,
        "window_user_cpu_s": window_user_s,
        "window_system_cpu_s": window_system_s,
        "window_samples": window_samples,
        "window_bytes": window_bytes,
        "window_cpu_s_per_gib": w["cpu_s_per_gib"],
        "window_cpu_s_per_1000_samples": w["cpu_s_per_1000_samples"],
        "per_epoch_window_cpu_s": list(per_epoch_window_cpu_s),
        "invocation_cpu_s": invocation,
        "invocation_user_cpu_s": invocation_user_s,
        "invocation_system_cpu_s": invocation_system_s,
        "invocation_samples": invocation_samples,
        "invocation_cpu_s_per_1000_samples": i["cpu_s_per_1000_samples"],
    }
