"""Per-rank traces in DFTracer's `.pfw` form, written after the run from its step logs.

DFTracer (hariharan-devarajan/dftracer) writes Chrome trace events one JSON object per line:
the file's first line is `[`, then one complete event (`"ph":"X"`) per line with no comma
between lines and no closing `]`. Perfetto's JSON reader accepts exactly this (it skips
whitespace and commas between events and does not need the closing bracket), and DFTracer's
analysers read such files line by line. `ts` and `dur` are integer microseconds on the wall
clock (Unix epoch), so traces of several ranks and hosts line up. `pid` (and `tid`) is the rank
plus one: Perfetto treats pid 0 as the kernel's idle task ("swapper"), so rank 0 must not use it;
metadata events name each process "rank N" and `args.rank` carries the rank itself.

Events per step (names as DLIO's own DFTracer annotations use them where they exist):
  fetch       t_request -> t_ready            waiting for the batch (the data stall)
  compute     t_ready -> t_compute_end        emulated training compute (train steps)
  eval        t_ready -> t_compute_end        emulated evaluation compute (eval steps)
  barrier     t_compute_end -> checkpoint start (or t_step_end)
  checkpoint  t_step_end - checkpoint_ns -> t_step_end, on steps after which one was written
Each event's args carry epoch, step, samples and bytes (of the step's batch). One `epoch`
event per rank, epoch and phase spans its steps. Metadata events name each pid "rank N".
"""
from __future__ import annotations

import json
import os

import numpy as np

from ..errors import DataError, OutputError
from ..common.steplog import PHASE_EVAL
from ..common.steplog import wall_offset_ns
from .timeseries import read_run_steps

__all__ = ["TRACE_DIR", "step_events", "trace_path", "write_rank_trace", "write_traces"]

TRACE_DIR = "traces"
_PHASE_NAMES = {0: "train", 1: "eval"}


def trace_path(out_dir, rank: int) -> str:
    """Where rank `rank`'s trace goes: <out_dir>/rank-00000.pfw."""
    return os.path.join(os.fspath(out_dir), f"rank-{rank:05d}.pfw")


def _us(ns) -> np.ndarray:
    """Wall-clock ns -> integer us; events are cut from the same rounded instants so they tile."""
    return np.asarray(ns, dtype=np.int64) // 1000


def step_events(rows, offset_ns: int, rank: int, hostname: str | None = None):
    """Yield the trace events (dicts) of one rank's step rows, in time order."""
    rows = np.asarray(rows)
    rows = rows[np.argsort(rows["t_request"], kind="stable")]
    req = _us(rows["t_request"] + offset_ns)
    ready = _us(rows["t_ready"] + offset_ns)
    comp = _us(rows["t_compute_end"] + offset_ns)
    ckpt_start = _us(rows["t_step_end"] - rows["checkpoint_ns"] + offset_ns)
    end = _us(rows["t_step_end"] + offset_ns)
    pid = tid = _pid(rank)
    # epoch spans first, so a viewer nests the steps inside them
    keys = rows["phase"].astype(np.int64) * (1 << 32) + rows["epoch"].astype(np.int64)
    for key in np.unique(keys):
        sel = np.flatnonzero(keys == key)
        phase, epoch = int(rows["phase"][sel[0]]), int(rows["epoch"][sel[0]])
        args = {"rank": rank, "epoch": epoch, "phase": _PHASE_NAMES.get(phase, str(phase)), "steps": int(len(sel)),
                "samples": int(rows["samples"][sel].sum()), "bytes": int(rows["bytes"][sel].sum())}
        if hostname:
            args["hostname"] = hostname
        yield {"name": "epoch", "cat": args["phase"], "pid": pid, "tid": tid, "ts": int(req[sel[0]]),
               "dur": int(end[sel[-1]] - req[sel[0]]), "ph": "X", "args": args}
    for i in range(len(rows)):
        phase = int(rows["phase"][i])
        cat = _PHASE_NAMES.get(phase, str(phase))
        args = {"epoch": int(rows["epoch"][i]), "step": int(rows["step"][i]),
                "samples": int(rows["samples"][i]), "bytes": int(rows["bytes"][i])}
        base = {"cat": cat, "pid": pid, "tid": tid, "ph": "X", "args": args}
        yield {"name": "fetch", **base, "ts": int(req[i]), "dur": int(ready[i] - req[i])}
        yield {"name": "eval" if phase == PHASE_EVAL else "compute", **base, "ts": int(ready[i]),
               "dur": int(comp[i] - ready[i])}
        yield {"name": "barrier", **base, "ts": int(comp[i]), "dur": int(ckpt_start[i] - comp[i])}
        if rows["checkpoint_ns"][i] > 0:
            ck = dict(args, checkpoint_ns=int(rows["checkpoint_ns"][i]))
            yield {"name": "checkpoint", **base, "args": ck, "ts": int(ckpt_start[i]), "dur": int(end[i] - ckpt_start[i])}


def _pid(rank: int) -> int:
    """The trace pid of a rank: rank + 1 (pid 0 is the kernel's idle task to Perfetto)."""
    return int(rank) + 1


def _metadata(rank: int, hostname: str | None):
    label = f"rank {rank}" + (f" ({hostname})" if hostname else "")
    pid = _pid(rank)
    yield {"name": "process_name", "ph": "M", "pid": pid, "tid": pid, "args": {"name": label}}
    yield {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": pid, "args": {"sort_index": rank}}
    yield {"name": "thread_name", "ph": "M", "pid": pid, "tid": pid, "args": {"name": "step loop"}}


def write_rank_trace(path, header, rows, hostname: str | None = None) -> int:
    """Write one rank's .pfw file (DFTracer layout); returns the number of events written."""
    rank = int(header["rank"])
    offset = wall_offset_ns(header)
    tmp = f"{path}.tmp.{os.getpid()}"
    n = 0
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)  # never through a link
    with open(fd, "w", encoding="utf-8") as fh:
        fh.write("[\n")
        for event in _metadata(rank, hostname):
            fh.write(json.dumps(event, separators=(",", ":")) + "\n")
        for event in step_events(rows, offset, rank, hostname):
            fh.write(json.dumps(event, separators=(",", ":")) + "\n")
            n += 1
    os.replace(tmp, path)
    return n


def write_traces(run_dir, out_dir=None) -> list[str]:
    """Write every rank's trace of a run folder into <out_dir or run_dir/traces>/rank-NNNNN.pfw."""
    if out_dir is None:
        out_dir = os.path.join(os.fspath(run_dir), TRACE_DIR)
        # Only inside the run folder: a `traces` that is a link (or a file) is refused, never followed.
        if os.path.islink(out_dir) or (os.path.lexists(out_dir) and not os.path.isdir(out_dir)):
            what = f"a symbolic link (to {os.readlink(out_dir)})" if os.path.islink(out_dir) else "not a folder"
            raise DataError(out_dir, f"is {what}: iogen writes a run's traces only into a real `{TRACE_DIR}` folder "
                                     "inside the run folder; remove it")
    out_dir = os.fspath(out_dir)
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        raise OutputError(out_dir, f"cannot create the traces folder: {exc.strerror}") from None
    hostname = _hostname(run_dir)
    paths = []
    for header, rows in read_run_steps(run_dir):
        path = trace_path(out_dir, int(header["rank"]))
        write_rank_trace(path, header, rows, hostname)
        paths.append(path)
    return paths


def _hostname(run_dir) -> str | None:
    """The run's host name from summary.json (single-host runs), or None."""
    try:
        with open(os.path.join(os.fspath(run_dir), "summary.json"), encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    hosts = (doc.get("iogen", {}).get("facts", {}) or {}).get("hosts") or []
    return hosts[0] if len(hosts) == 1 else None
