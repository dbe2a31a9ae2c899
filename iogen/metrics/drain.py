"""Checkpoint drain figures (iogen/checkpoint/drain.py): per checkpoint, and the drain's effect on training.

Per checkpoint: `blocking_s` (the checkpoint's time in the step loop: the local write, plus the
wait for the previous drain when it had not ended, plus the copy itself with drain `sync`),
`drain_s` (start to end of the copy to the shared folder), `drain_gib_s` (its bytes / drain_s).

Interference: the writer rank's train steps (its step log, checkpoint steps left out) are split
into those whose span [t_request, t_step_end] overlaps a drain and those that do not; each group
gets its AU (requested compute / summed step time, MLPerf's AU over those steps) and its mean
data wait (t_ready - t_request). A drain that slows the training reads shows as a higher wait
and a lower AU in the `during_drain` group.
"""
from __future__ import annotations

import numpy as np

from ..steplog import PHASE_TRAIN

GIB = 1 << 30


def _group(rows) -> dict:
    span = (rows["t_step_end"] - rows["t_request"]).astype(np.float64)
    total = float(span.sum())
    return {
        "steps": int(rows.size),
        "au_percentage": float(rows["requested_compute_ns"].sum()) / total * 100.0 if total > 0 else None,
        "wait_ms_mean": float((rows["t_ready"] - rows["t_request"]).mean()) / 1e6 if rows.size else None,
    }


def drain_block(drain: dict, rows) -> dict:
    """The summary's `checkpoint_drain` block from the drainer's record and the writer's step rows."""
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
    train = rows[(rows["phase"] == PHASE_TRAIN) & (rows["checkpoint_ns"] == 0)]
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


def ranks_drain_block(records: list) -> dict:
    """Checkpoint-only runs: every rank drains its own files; per checkpoint the job's figures.

    As MLPerf Storage reduces checkpoint times: a checkpoint's drain takes as long as its slowest
    rank's (`drain_s`), its bytes are summed over ranks, and `drain_gib_s` is those bytes over
    the slowest drain. `blocking_s` is the slowest rank's write plus its wait for the previous
    drain (plus the copy with drain `sync`).
    """
    records = [r for r in records if r]
    per_step: dict = {}
    for rec in records:
        for ev in rec.get("events", []):
            per_step.setdefault(ev["step"], []).append(ev)
    checkpoints = []
    for step in sorted(per_step):
        evs = per_step[step]
        spans = [(e["drain_end_ns"] - e["drain_start_ns"]) / 1e9 for e in evs
                 if e.get("drain_start_ns") is not None and e.get("drain_end_ns") is not None]
        nbytes = sum(int(e.get("drain_bytes") or 0) for e in evs)
        slowest = max(spans) if spans else None
        checkpoints.append({
            "step": step, "ranks": len(evs),
            "blocking_s": max((e.get("elapsed_ns") or 0) + (e.get("drain_wait_ns") or 0) for e in evs) / 1e9,
            "local_write_s": max(e.get("local_write_ns") or 0 for e in evs) / 1e9,
            "waited_for_previous_drain_s": max(e.get("drain_wait_ns") or 0 for e in evs) / 1e9,
            "drain_s": slowest, "drain_bytes": nbytes,
            "drain_gib_s": nbytes / GIB / slowest if slowest and nbytes else None,
            "error": next((e["drain_error"] for e in evs if e.get("drain_error")), None),
        })
    drains = [c["drain_s"] for c in checkpoints if c["drain_s"] is not None]
    return {
        "mode": records[0].get("mode") if records else None,
        "shared_folder": records[0].get("shared_folder") if records else None,
        "checkpoints": checkpoints,
        "blocking_s_mean": float(np.mean([c["blocking_s"] for c in checkpoints])) if checkpoints else None,
        "drain_s_mean": float(np.mean(drains)) if drains else None,
        "drain_bytes": sum(c["drain_bytes"] for c in checkpoints),
        "waits_for_previous_drain": sum(int(r.get("waits", 0)) for r in records),
        "error": next((r["error"] for r in records if r.get("error")), None),
    }

