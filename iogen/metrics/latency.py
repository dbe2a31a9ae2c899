"""Batch-wait latency (docs/metrics.md section 1, `wait`): percentiles from mergeable histograms.

Latency percentiles cannot be reduced like means: each rank records its batch waits
(t_ready - t_request) into iogen.histogram.LatencyHistogram, per epoch, over the same metrics
window as AU (iogen.metrics.epoch.window_bounds), and ranks or runs merge by adding counts.
"""
from __future__ import annotations

import numpy as np

from ..histogram import LatencyHistogram
from ..steplog import PHASE_TRAIN
from .epoch import window_bounds

__all__ = ["wait_histograms", "window_mask"]


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
