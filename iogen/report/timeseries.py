"""Post-hoc views of a run's step logs: per-interval series (percentiles: iogen.metrics.latency).

Everything here reads `steps/rank-*.steps` after the run; nothing is added to the engine's
step loop. Definitions (docs/reports.md):

- per-interval series, per rank, on one wall-clock axis (each log's header maps its monotonic
  times to wall time): samples/s and MiB/s are time-weighted, each step's samples and bytes
  spread evenly over the step [t_request, t_step_end), so an interval holding 4.5 steps counts
  4.5 steps' worth (not 4 or 5 whole batches); AU % and wait % are the shares of the interval
  spent in emulated compute [t_ready, t_compute_end) and in waiting [t_request, t_ready).
  Everything is split exactly at interval edges; the last interval is divided by its actual
  (possibly shorter) length.
"""
from __future__ import annotations

import glob
import os

import numpy as np

from ..metrics.epoch import MIB
from ..common.steplog import PHASE_TRAIN, read_steplog, wall_offset_ns

__all__ = [
    "auto_interval_s",
    "busy_ns_per_bin",
    "spread_per_bin",
    "interval_series",
    "read_run_steps",
    "run_timeseries",
]


def read_run_steps(run_dir) -> list:
    """Every rank's (header, rows) of a run folder, in rank order; where a process stepped several emulated
    accelerators (train.accelerators_per_process), each accelerator's rows apart, its header's `rank` its id."""
    paths = sorted(glob.glob(os.path.join(os.fspath(run_dir), "steps", "rank-*.steps")))
    logs = []
    for header, rows in map(read_steplog, paths):
        ids = np.unique(rows["rank"]) if len(rows) else ()
        if len(ids) <= 1:
            logs.append((header, rows))
        else:
            logs += [(dict(header, rank=int(a)), rows[rows["rank"] == a]) for a in ids]
    return sorted(logs, key=lambda hr: hr[0]["rank"])


def busy_ns_per_bin(starts_ns, ends_ns, edges_ns) -> np.ndarray:
    """Time (ns) that disjoint intervals [start, end) spend inside each bin [edges[j], edges[j+1]).

    Exact split at bin edges: with the cumulative busy time F(t) = sum_i clip(t - start_i, 0,
    end_i - start_i), bin j holds F(edges[j+1]) - F(edges[j]). The intervals must not overlap
    (one rank's steps run one after another).
    """
    a = np.asarray(starts_ns, dtype=np.int64)
    b = np.asarray(ends_ns, dtype=np.int64)
    edges = np.asarray(edges_ns, dtype=np.int64)
    if len(a) == 0:
        return np.zeros(max(len(edges) - 1, 0), dtype=np.float64)
    order = np.argsort(a, kind="stable")
    a, d = a[order], np.maximum(b[order] - a[order], 0)
    before = np.concatenate(([0], np.cumsum(d)[:-1]))
    j = np.searchsorted(a, edges, side="right") - 1
    jj = np.maximum(j, 0)
    f = np.where(j >= 0, before[jj] + np.minimum(edges - a[jj], d[jj]), 0)
    return np.diff(f).astype(np.float64)


def spread_per_bin(starts_ns, ends_ns, amounts, edges_ns) -> np.ndarray:
    """Amounts spread evenly over disjoint intervals [start, end), summed per bin [edges[j], edges[j+1]).

    The time-weighted count: with G(t) = sum_i amount_i x clip(t - start_i, 0, d_i) / d_i, bin j
    holds G(edges[j+1]) - G(edges[j]). An interval of zero length puts its amount at its start.
    """
    a = np.asarray(starts_ns, dtype=np.int64)
    b = np.asarray(ends_ns, dtype=np.int64)
    w = np.asarray(amounts, dtype=np.float64)
    edges = np.asarray(edges_ns, dtype=np.int64)
    if len(a) == 0:
        return np.zeros(max(len(edges) - 1, 0), dtype=np.float64)
    order = np.argsort(a, kind="stable")
    a, d, w = a[order], np.maximum(b[order] - a[order], 0), w[order]
    before = np.concatenate(([0.0], np.cumsum(w)[:-1]))
    j = np.searchsorted(a, edges, side="right") - 1
    jj = np.maximum(j, 0)
    into = (edges - a[jj]).astype(np.float64)
    share = np.where(d[jj] > 0, np.clip(into / np.maximum(d[jj], 1), 0.0, 1.0), 1.0)
    g = np.where(j >= 0, before[jj] + w[jj] * share, 0.0)
    return np.diff(g)


def interval_series(rows, *, interval_ns: int, origin_ns: int, end_ns: int | None = None) -> dict:
    """One rank's rows (times already on the common axis, ns) -> per-interval rates from origin_ns.

    Returns t_s (interval starts, s from origin), samples_s, mib_s, au_percentage, wait_percentage.
    """
    rows = np.asarray(rows)
    if interval_ns <= 0:
        raise ValueError(f"interval must be > 0 ns, got {interval_ns}")
    if end_ns is None:
        end_ns = int(rows["t_step_end"].max()) if len(rows) else origin_ns
    nbins = max(int(-(-(end_ns - origin_ns) // interval_ns)), 0)
    edges = origin_ns + interval_ns * np.arange(nbins + 1, dtype=np.int64)
    if nbins:
        edges[-1] = max(end_ns, edges[-2] + 1)  # the last interval stops at the run's end
    length_s = np.diff(edges).astype(np.float64) / 1e9
    if len(rows) and nbins:
        samples = spread_per_bin(rows["t_request"], rows["t_step_end"], rows["samples"], edges)
        nbytes = spread_per_bin(rows["t_request"], rows["t_step_end"], rows["bytes"], edges)
        compute = busy_ns_per_bin(rows["t_ready"], rows["t_compute_end"], edges)
        wait = busy_ns_per_bin(rows["t_request"], rows["t_ready"], edges)
    else:
        samples = nbytes = compute = wait = np.zeros(nbins)
    return {
        "t_s": ((edges[:-1] - origin_ns) / 1e9).tolist(),
        "samples_s": (samples / length_s).tolist(),
        "mib_s": (nbytes / MIB / length_s).tolist(),
        "au_percentage": (compute / 1e9 / length_s * 100.0).tolist(),
        "wait_percentage": (wait / 1e9 / length_s * 100.0).tolist(),
    }


_TIME_FIELDS = ("t_request", "t_ready", "t_compute_end", "t_step_end")


def _to_wall(rows, offset_ns: int):
    out = rows.copy()
    for name in _TIME_FIELDS:
        out[name] = out[name] + offset_ns
    return out


def auto_interval_s(span_s: float, step_s: float = 0.0) -> float:
    """1 s; for runs shorter than 30 s a finer 1-2-5 interval giving ~30 intervals, but never
    shorter than 4 typical steps (`step_s`), so an interval is not just "a batch or none"."""
    if span_s >= 30.0 or span_s <= 0:
        return 1.0
    target = max(span_s / 30.0, 4.0 * step_s)
    steps = [m * 10.0**e for e in range(-3, 1) for m in (1, 2, 5)] + [1.0]  # 1 ms, 2 ms, 5 ms ... 1 s
    return min([s for s in steps if s >= target], default=1.0)


def run_timeseries(logs, interval_s: float | None = 1.0, phase: int | None = PHASE_TRAIN) -> dict:
    """Per-rank interval series of a run (phase None: every step), on one wall-clock axis.

    interval_s None picks auto_interval_s(run span, median step): 1 s, finer for runs under 30 s.
    """
    walls = []
    for header, rows in logs:
        if phase is not None:
            rows = rows[rows["phase"] == phase]
        walls.append((int(header["rank"]), _to_wall(rows, wall_offset_ns(header))))
    nonempty = [r for _, r in walls if len(r)]
    if not nonempty:
        return {"interval_s": interval_s, "origin_wall_ns": None, "ranks": []}
    origin = min(int(r["t_request"].min()) for r in nonempty)
    end = max(int(r["t_step_end"].max()) for r in nonempty)
    if interval_s is None:
        step_ns = float(np.median(np.concatenate([r["t_step_end"] - r["t_request"] for r in nonempty])))
        interval_s = auto_interval_s((end - origin) / 1e9, step_ns / 1e9)
    interval_ns = int(round(interval_s * 1e9))
    ranks = []
    for rank, rows in walls:
        series = interval_series(rows, interval_ns=interval_ns, origin_ns=origin, end_ns=end)
        ranks.append({"rank": rank, **series})
    return {"interval_s": interval_s, "origin_wall_ns": origin, "ranks": ranks}
