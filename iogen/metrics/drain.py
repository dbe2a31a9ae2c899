"""Checkpoint drain figures (iogen/checkpoint/drain.py): per checkpoint, and the drain's effect on training.

Per checkpoint: `blocking_s` (the checkpoint's time in the step loop: the local write, plus the
wait for the previous drain when it had not ended, plus the copy itself with drain `sync`),
`drain_s` (start to end of the copy to the shared folder), `drain_gib_s` (its bytes / drain_s).

Interference: the writer rank's train steps in the metrics window (its step log; each epoch's
first `exclude_start_steps` and last `exclude_end_steps` left out by the same rule as the AU,
so the loader's start-up never counts; checkpoint steps left out) are split into those whose span [t_request, t_step_end] overlaps a drain and those that do not; each group
gets its AU (requested compute / summed step time, MLPerf's AU over those steps) and its mean
data wait (t_ready - t_request). A drain that slows the training reads shows as a higher wait
and a lower AU in the `during_drain` group.
"""
from __future__ import annotations

import numpy as np

from ..common.steplog import PHASE_TRAIN
from .epoch import window_bounds

GIB = 1 << 30


def _group(rows) -> dict:
    span = (rows["t_step_end"] - rows["t_request"]).astype(np.float64)
    total = float(span.sum())
    return {
        "steps": int(rows.size),
        "au_percentage": float(rows["requested_compute_ns"].sum()) / total * 100.0 if total > 0 else None,
        "wait_ms_mean": float((rows["t_ready"] - rows["t_request"]).mean()) / 1e6 if rows.size else None,
    }


def window_rows(rows, exclude_start_steps: int = 1, exclude_end_steps: int = 0):
    """The train rows of the metrics window: per epoch, by step, [start, n - end) (iogen.metrics.epoch)."""
    train = rows[rows["phase"] == PHASE_TRAIN]
    keep = []
    for epoch in np.unique(train["epoch"]):
        one = train[train["epoch"] == epoch]
        one = one[np.argsort(one["step"], kind="stable")]
        start, stop, _ = window_bounds(len(one), exclude_start_steps, exclude_end_steps)
        keep.append(one[start:stop])
    return np.concatenate(keep) if keep else train


def drain_block(drain: dict, rows, exclude_start_steps: int = 1, exclude_end_steps: int = 0) -> dict:
    """The summary's `checkpoint_drain` block from the drainer's record and the writer's step rows
    (the AU's window: `metric.exclude_start_steps` / `exclude_end_steps` of each epoch left out)."""
    events = []
    windows = []
    for ev in drain.get("events", []):
        start, end = ev.get("drain_start_ns"), ev.get("drain_end_ns")
        drain_s = (end - start) / 1e9 if start is not None and end is not None else None
        nbytes = int(ev.get("drain_bytes") or 0)
        events.append({
            "epoch": ev.get("epoch"), "step": ev.get("step"),
            "blocking_s": ev["elapsed_ns"] / 1e9 if ev.get("elapsed_ns") is not None else None,
            "local_write_s": (ev.get("local_write_ns") or 0) / 1e9,
            "waited_for_previous_drain_s": (ev.get("drain_wait_ns") or 0) / 1e9,
            "drain_s": drain_s, "drain_bytes": nbytes,
            "drain_gib_s": nbytes / GIB / drain_s if drain_s and nbytes else None,
            "error": ev.get("drain_error"),
        })
        if start is not None and end is not None:
            windows.append((start, end))
    train = window_rows(rows, exclude_start_steps, exclude_end_steps)
    train = train[train["checkpoint_ns"] == 0]
    during = np.zeros(train.size, bool)
    for start, end in windows:
        during |= (train["t_request"] < end) & (train["t_step_end"] > start)
    blocking = [e["blocking_s"] for e in events if e["blocking_s"] is not None]
    drains = [e["drain_s"] for e in events if e["drain_s"] is not None]
    return {
        "mode": drain.get("mode"),
        "shared_folder": drain.get("shared_folder"),
        "checkpoints": events,
        "blocking_s_mean": float(np.mean(blocking)) if blocking else None,
        "drain_s_mean": float(np.mean(drains)) if drains else None,
        "drain_bytes": sum(e["drain_bytes"] for e in events),
        "waits_for_previous_drain": int(drain.get("waits", 0)),
        "steps_during_drain": _group(train[during]),
        "steps_without_drain": _group(train[~during]),
        "error": drain.get("error"),
    }


def reduce_drains(world, record: dict | None) -> tuple[dict | None, str | None]:
    """Checkpoint-only runs, where every rank drains its own files: (the job's block on rank 0,
    None elsewhere; the lowest failing rank's error on every rank, None if none). A collective.

    As MLPerf Storage reduces checkpoint times: a checkpoint's drain takes as long as its slowest
    rank's (`drain_s`), its bytes are summed over ranks, and `drain_gib_s` is those bytes over
    the slowest drain. `waits_for_previous_drain` counts checkpoints that found the previous
    drain still running on some rank (`ranks_waited` per checkpoint, `rank_waits_for_previous_drain`
    their sum). `blocking_s` is the slowest rank's write plus its wait for the previous
    drain (plus the copy with drain `sync`). Counts and bytes are summed and times maxed by
    reductions; error texts come from the lowest rank that has one (a broadcast from each such
    rank): rank 0 receives O(checkpoints), not one record per rank.
    """
    record = record or {}
    events = record.get("events", [])
    last = int(world.allreduce_array(np.array([max((int(e["step"]) for e in events), default=0)], np.int64),
                                     "max")[0])
    n = last + 1  # indexed by step; the steps iogen numbers are small positive integers
    sums = np.zeros((3, n), np.int64)  # events, drain bytes, ranks that waited for the previous drain
    maxs = np.full((4, n), -1, np.int64)  # blocking, local write, wait for the previous, drain span (ns)
    no_one = world.size
    firsts = np.full(n + 1, no_one, np.int64)  # per step the lowest rank with an error; [n]: the record's
    for e in events:
        s = int(e["step"])
        sums[0, s] += 1
        sums[1, s] += int(e.get("drain_bytes") or 0)
        wait = e.get("drain_wait_ns") or 0
        sums[2, s] += bool(wait)
        maxs[0, s] = max(maxs[0, s], (e.get("elapsed_ns") or 0) + wait)
        maxs[1, s] = max(maxs[1, s], e.get("local_write_ns") or 0)
        maxs[2, s] = max(maxs[2, s], wait)
        if e.get("drain_start_ns") is not None and e.get("drain_end_ns") is not None:
            maxs[3, s] = max(maxs[3, s], e["drain_end_ns"] - e["drain_start_ns"])
        if e.get("drain_error"):
            firsts[s] = min(firsts[s], world.rank)
    if record.get("error"):
        firsts[n] = world.rank
    firsts = world.allreduce_array(firsts, "min")
    texts = {}  # (step or "run") -> text, from the lowest rank that has one
    for r in sorted({int(f) for f in firsts if f < no_one}):
        mine = None
        if r == world.rank:
            mine = {int(s): next(e["drain_error"] for e in events if int(e["step"]) == s and e.get("drain_error"))
                    for s in range(n) if firsts[s] == r}
            if firsts[n] == r:
                mine["run"] = record["error"]
        texts.update(world.bcast(mine, root=r))
    sums, maxs = world.reduce_array(sums, "sum"), world.reduce_array(maxs, "max")
    drained = world.reduce_array(np.array([bool(record)], np.int64), "sum")
    if world.rank != 0 or not drained[0]:  # ranks that drained (none: no block)
        return None, texts.get("run")
    checkpoints = []
    for s in np.flatnonzero(sums[0]):
        span = int(maxs[3, s])
        slowest = span / 1e9 if span >= 0 else None
        nbytes = int(sums[1, s])
        checkpoints.append({
            "step": int(s), "ranks": int(sums[0, s]),
            "blocking_s": int(maxs[0, s]) / 1e9, "local_write_s": int(maxs[1, s]) / 1e9,
            "waited_for_previous_drain_s": int(maxs[2, s]) / 1e9, "ranks_waited": int(sums[2, s]),
            "drain_s": slowest, "drain_bytes": nbytes,
            "drain_gib_s": nbytes / GIB / slowest if slowest and nbytes else None,
            "error": texts.get(int(s)),
        })
    drains = [c["drain_s"] for c in checkpoints if c["drain_s"] is not None]
    return {
        "mode": record.get("mode"),
        "shared_folder": record.get("shared_folder"),
        "checkpoints": checkpoints,
        "blocking_s_mean": float(np.mean([c["blocking_s"] for c in checkpoints])) if checkpoints else None,
        "drain_s_mean": float(np.mean(drains)) if drains else None,
        "drain_bytes": sum(c["drain_bytes"] for c in checkpoints),
        # checkpoints that found a previous drain still running (on any rank), and the rank detail
        "waits_for_previous_drain": sum(1 for c in checkpoints if c["ranks_waited"]),
        "rank_waits_for_previous_drain": sum(c["ranks_waited"] for c in checkpoints),
        "error": texts.get("run"),
    }, texts.get("run")
