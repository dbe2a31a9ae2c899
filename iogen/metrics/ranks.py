"""Across ranks: each rank's step rows -> what rank 0 reports for the whole world.

Every rank calls `reduce_ranks` with its own rows (the collectives need all of them). The
run's figures come from element-wise reductions (sum, min, max over ranks: O(epochs x fields)
per rank, whatever the world size); the per-rank rows of epochs.json are gathered to rank 0
only up to GATHER_MAX_RANKS ranks, so what rank 0 holds stays bounded (docs/scaling.md).
Everything crosses ranks as numpy buffers through the world's collectives (iogen.world.communicator), never
as pickled objects. An interrupted run reports the epochs every rank reached.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..common.histogram import LatencyHistogram
from ..common.steplog import PHASE_EVAL, PHASE_TRAIN
from .epoch import rank_epochs_array
from .latency import reduce_histograms, wait_histograms
from .run import RankReductions, allreduce_reductions, rank_reductions

# Above this many ranks, epochs.json carries the reductions over ranks, not one row per rank:
# 1024 ranks x 100 epochs x 27 fields x 8 bytes is 21 MiB on rank 0; 65,536 ranks would be 1.3 GiB.
GATHER_MAX_RANKS = 1024


@dataclass(frozen=True)
class RankReduction:
    """The world's figures: gathered per-rank epoch arrays (rank 0) and sums over ranks (every rank)."""

    train: np.ndarray | None  # [ranks, epochs, EPOCH_FIELDS] on rank 0 up to GATHER_MAX_RANKS, else None
    evals: np.ndarray | None  # the same for eval epochs; None when there were none
    train_reduced: RankReductions | None  # over all ranks, on every rank; None without train epochs
    evals_reduced: RankReductions | None  # the same for eval epochs
    train_epochs: np.ndarray  # the train epochs reported (reached by every rank)
    device_read_bytes: list  # per train epoch, summed over ranks; None where a rank could not tell
    wait_epochs: list | None  # per train epoch, LatencyHistogram of the batch wait, merged over ranks (rank 0)
    wait_run: LatencyHistogram | None  # the same over the whole run (rank 0)
    # CPU seconds (iogen.metrics.cpu), summed over ranks: per train epoch's metrics window, user
    # and system (None where a rank did not finish that window); and the whole invocation so far
    cpu_window_user_s: list = ()
    cpu_window_system_s: list = ()
    cpu_invocation: tuple = (None, None)  # (user s, system s)


def reduce_ranks(world, header, rows, *, exclude_start_steps: int, exclude_end_steps: int,
                 clock_offset_ns: int = 0, device_read_bytes=(), cpu_window=(),
                 cpu_invocation=None, accelerators=None) -> RankReduction:
    """Reduce this rank's rows with every other rank's (a collective: every rank calls it).

    `accelerators` (iogen.world.accelerators.Accelerators): where a process steps several emulated
    accelerators, its rows hold each one's (their `rank` is the accelerator's id), and every figure is
    over accelerators, as it is over ranks with one rank per accelerator."""
    window = dict(exclude_start_steps=exclude_start_steps, exclude_end_steps=exclude_end_steps)
    train_epochs = epochs_reached(world, rows, PHASE_TRAIN)
    eval_epochs = epochs_reached(world, rows, PHASE_EVAL)
    grouped = accelerators is not None and accelerators.grouped
    gather = (accelerators.total if grouped else world.size) <= GATHER_MAX_RANKS

    def per_accelerator(phase, epochs):
        if not grouped:
            return _phase_array(rows, phase, epochs, clock_offset_ns, window)[None]
        return np.stack([_phase_array(rows[rows["rank"] == a], phase, epochs, clock_offset_ns, window)
                         for a in accelerators.ids])

    def gathered(mine):
        if not gather:
            return None
        if not grouped:
            return world.gather_array(mine[0])
        # K rows a process (NaN where the last holds fewer), accelerator a at [a // K, a % K]
        padded = np.full((accelerators.per_process,) + mine.shape[1:], np.nan)
        padded[:mine.shape[0]] = mine
        out = world.gather_array(padded)
        return None if out is None else out.reshape((-1,) + mine.shape[1:])[:accelerators.total]

    train = evals = train_reduced = evals_reduced = None
    if train_epochs.size:
        mine = per_accelerator(PHASE_TRAIN, train_epochs)
        train_reduced = allreduce_reductions(world, rank_reductions(mine))
        train = gathered(mine)
    elif gather:
        train = world.gather_array(np.zeros((0, 0)))
    if eval_epochs.size:
        mine = per_accelerator(PHASE_EVAL, eval_epochs)
        evals_reduced = allreduce_reductions(world, rank_reductions(mine))
        evals = gathered(mine)
    wait_epochs, wait_run = wait_latency(world, header, rows, train_epochs, **window)
    cpu_user, cpu_system, cpu_inv = summed_cpu(world, cpu_window, train_epochs, cpu_invocation)
    return RankReduction(train=train, evals=evals, train_reduced=train_reduced, evals_reduced=evals_reduced,
                         train_epochs=train_epochs,
                         device_read_bytes=summed_device_bytes(world, device_read_bytes, train_epochs.size),
                         wait_epochs=wait_epochs, wait_run=wait_run, cpu_window_user_s=cpu_user,
                         cpu_window_system_s=cpu_system, cpu_invocation=cpu_inv)


def epochs_reached(world, rows, phase) -> np.ndarray:
    """Epochs of `phase` that every rank reached (all of them in a complete run), the same on every rank."""
    sel = np.unique(rows["epoch"][rows["phase"] == phase]).astype(np.int64)
    last = int(sel.max()) if sel.size else 0
    # an interrupted run reports the epochs every rank measured
    last = int(world.allreduce_array(np.array([last], np.int64), "min")[0])
    return sel[sel <= last]


def _phase_array(rows, phase, epochs, clock_offset_ns, window):
    if epochs.size == 0:
        return np.zeros((0, 0))
    return rank_epochs_array(rows, phase, epochs, clock_offset_ns=clock_offset_ns, **window)


def summed_device_bytes(world, per_epoch, epochs: int) -> list:
    """Per train epoch, the storage bytes all ranks fetched (None where any rank could not tell)."""
    mine = np.full(epochs, np.nan)
    for i, v in enumerate(list(per_epoch)[:epochs]):
        mine[i] = np.nan if v is None else float(v)
    total = world.allreduce_array(mine, "sum")
    return [None if not math.isfinite(v) else int(v) for v in total]


def summed_cpu(world, cpu_window, epochs, invocation) -> tuple[list, list, tuple]:
    """CPU seconds over ranks in one allreduce: (window user per epoch, window system per epoch,
    (invocation user, invocation system)); None where any rank lacks the figure.

    `cpu_window`: this rank's (epoch, user s, system s) per train epoch (iogen.run.engine);
    `invocation`: this rank's iogen.metrics.cpu.CpuTimes of the whole invocation, or None.
    """
    n = len(epochs)
    index = {int(e): i for i, e in enumerate(epochs)}
    mine = np.full(2 * n + 2, np.nan)
    for epoch, user, system in cpu_window or ():
        i = index.get(int(epoch))
        if i is not None:
            mine[i], mine[n + i] = user, system
    if invocation is not None:
        mine[2 * n], mine[2 * n + 1] = invocation.user_s, invocation.system_s
    total = world.allreduce_array(mine, "sum")  # NaN anywhere stays NaN: unknown, not too low

    def clean(v):
        return float(v) if math.isfinite(v) else None

    return ([clean(v) for v in total[:n]], [clean(v) for v in total[n:2 * n]],
            (clean(total[2 * n]), clean(total[2 * n + 1])))


def wait_latency(world, header, rows, epochs, *, exclude_start_steps: int, exclude_end_steps: int):
    """Per-epoch and whole-run wait histograms of the train window, merged over ranks, on rank 0.

    (None, None) on the other ranks: a reduction over the buckets any rank used
    (iogen.metrics.latency.reduce_histograms), not an allreduce of every bucket.
    """
    per_epoch, _ = wait_histograms([(header, rows)], PHASE_TRAIN, exclude_start_steps, exclude_end_steps)
    merged = reduce_histograms(world, [per_epoch.get(int(e), LatencyHistogram()) for e in epochs])
    if merged is None:
        return None, None
    return merged, LatencyHistogram.merged(merged)
