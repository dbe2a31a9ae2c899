"""Batch-wait latency (docs/metrics.md section 1, `wait`): percentiles from mergeable histograms.

Latency percentiles cannot be reduced like means: each rank records its batch waits
(t_ready - t_request) into iogen.common.histogram.LatencyHistogram, per epoch, over the same metrics
window as AU (iogen.metrics.epoch.window_bounds), and ranks or runs merge by adding counts.
"""
from __future__ import annotations

import numpy as np

from ..common.histogram import LatencyHistogram
from ..common.steplog import PHASE_TRAIN
from .epoch import window_bounds

__all__ = ["reduce_histograms", "wait_histograms", "window_mask"]


def window_mask(rows, exclude_start_steps: int = 1, exclude_end_steps: int = 0) -> np.ndarray:
    """Which rows lie in their (rank, phase, epoch) metrics window, as iogen.metrics.epoch defines it.

    Window = steps [exclude_start_steps, n - exclude_end_steps) by step order; when that is
    empty every step of the epoch counts (the metrics' fallback).
    """
    rows = np.asarray(rows)
    mask = np.zeros(len(rows), dtype=bool)
    if len(rows) == 0:
        return mask
    keys = np.stack([rows["rank"].astype(np.int64), rows["phase"].astype(np.int64), rows["epoch"].astype(np.int64)])
    order = np.lexsort((rows["step"], keys[2], keys[1], keys[0]))
    k = keys[:, order]
    starts = np.flatnonzero(np.r_[True, np.any(k[:, 1:] != k[:, :-1], axis=0)])
    ends = np.r_[starts[1:], len(rows)]
    for s, e in zip(starts, ends):
        a, b, _ = window_bounds(int(e - s), exclude_start_steps, exclude_end_steps)
        mask[order[s + a:s + b]] = True
    return mask


def wait_histograms(logs, phase: int = PHASE_TRAIN, exclude_start_steps: int = 1, exclude_end_steps: int = 0):
    """(per-epoch {epoch: LatencyHistogram}, whole-run LatencyHistogram) of batch wait, merged over ranks."""
    per_epoch: dict[int, LatencyHistogram] = {}
    for _, rows in logs:
        rows = rows[rows["phase"] == phase]
        rows = rows[window_mask(rows, exclude_start_steps, exclude_end_steps)]
        wait = rows["t_ready"] - rows["t_request"]
        for epoch in np.unique(rows["epoch"]):
            h = per_epoch.setdefault(int(epoch), LatencyHistogram())
            h.record(wait[rows["epoch"] == epoch])
    per_epoch = dict(sorted(per_epoch.items()))
    return per_epoch, LatencyHistogram.merged(per_epoch.values())


def reduce_histograms(world, hists) -> list | None:
    """Histogram i of every rank merged into one, for each i, on rank 0 (None elsewhere); exact.

    A collective: every rank passes the same number of histograms. Only the span of buckets
    some rank used crosses ranks (found by one small max allreduce), with the sums, then the
    max and min: three reductions of O(histograms x span) per rank, whatever the world size.
    """
    if not hists:
        return [] if world.rank == 0 else None
    used = [np.flatnonzero(h.counts) for h in hists]
    lo = min((int(u[0]) for u in used if u.size), default=len(hists[0].counts))
    hi = max((int(u[-1]) for u in used if u.size), default=-1)
    neg_lo, hi = (int(v) for v in world.allreduce_array(np.array([-lo, hi], np.int64), "max"))
    span = slice(-neg_lo, max(hi + 1, -neg_lo))
    big = np.iinfo(np.int64).max
    sums = world.reduce_array(np.array([np.r_[h.counts[span], h.sum_ns] for h in hists], np.int64), "sum")
    # empty histograms hold max_ns = min_ns = -1: as min, stand for +inf (negated, for one max reduction)
    ext = world.reduce_array(np.array([[h.max_ns, -(big if h.min_ns < 0 else h.min_ns)] for h in hists],
                                      np.int64), "max")
    if world.rank != 0:
        return None
    out = []
    for row, (max_ns, neg_min) in zip(sums, ext):
        counts = np.zeros(len(hists[0].counts), np.int64)
        counts[span] = row[:-1]
        out.append(LatencyHistogram(counts, max_ns=int(max_ns), min_ns=-1 if -neg_min == big else int(-neg_min),
                                    sum_ns=int(row[-1])))
    return out
