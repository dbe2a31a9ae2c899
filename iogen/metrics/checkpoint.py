"""Checkpoint metrics as MLPerf Storage defines them (checkpointing benchmark, DLIO's statscounter).

Per checkpoint and rank: the bytes the rank wrote (or read) and its duration, from the barrier
that starts the checkpoint to the end of the rank's own I/O (fsync and rename included). Per
checkpoint, the job's duration is the slowest rank's, and its throughput the job's bytes over
that duration (MLPerf's figure); the slowest rank's own throughput stands beside it. The run
reports the mean over checkpoints. GB = 10^9 bytes (DLIO's and MLPerf's unit), GiB = 2^30
bytes; both are given, each labelled in its key.
"""
from __future__ import annotations

import numpy as np

GB = 1e9
GIB = float(2**30)


def checkpoint_phase(rank_bytes: np.ndarray, durations_ns: np.ndarray) -> dict:
    """Metrics of one phase (write or read): rank_bytes [checkpoints, ranks], durations_ns likewise."""
    rank_bytes = np.asarray(rank_bytes, dtype=np.float64)
    dur_s = np.asarray(durations_ns, dtype=np.float64) / 1e9
    if rank_bytes.size == 0:
        return {"checkpoints": 0}
    job_bytes = rank_bytes.sum(axis=1)
    slowest = dur_s.argmax(axis=1)
    job_s = dur_s.max(axis=1)
    rows = np.arange(len(job_s))
    safe = np.where(job_s > 0, job_s, np.nan)
    job_gb_s = job_bytes / safe / GB
    slow_rate = rank_bytes[rows, slowest] / safe
    with np.errstate(invalid="ignore", divide="ignore"):
        rank_gb_s = np.where(dur_s > 0, rank_bytes / np.where(dur_s > 0, dur_s, 1) / GB, np.nan)
    return {
        "checkpoints": int(len(job_s)),
        "bytes_per_checkpoint": int(job_bytes[0]),
        "duration_mean_seconds": float(job_s.mean()),
        "duration_stdev_seconds": float(job_s.std()),
        "io_mean_GB_per_second": float(np.nanmean(job_gb_s)),
        "io_mean_GiB_per_second": float(np.nanmean(job_bytes / safe / GIB)),
        "per_checkpoint": [
            {"bytes": int(job_bytes[i]), "duration_seconds": float(job_s[i]), "slowest_rank": int(slowest[i]),
             "io_GB_per_second": float(job_gb_s[i]), "io_GiB_per_second": float(job_gb_s[i] * GB / GIB),
             "slowest_rank_io_GB_per_second": float(slow_rate[i] / GB)}
            for i in rows
        ],
        "per_rank": {
            "bytes": [int(b) for b in rank_bytes[0]],
            "duration_seconds": dur_s.tolist(),
            "io_GB_per_second": [[None if np.isnan(x) else float(x) for x in row] for row in rank_gb_s],
        },
    }


def dlio_checkpoint_block(write: dict, read: dict) -> dict:
    """DLIO's summary keys for checkpoints (save_/load_checkpoint_*), from `checkpoint_phase` results."""
    out = {}
    for prefix, phase in (("save", write), ("load", read)):
        if phase.get("checkpoints"):
            out[f"{prefix}_checkpoint_duration_mean_seconds"] = phase["duration_mean_seconds"]
            out[f"{prefix}_checkpoint_duration_stdev_seconds"] = phase["duration_stdev_seconds"]
            out[f"{prefix}_checkpoint_io_mean_GB_per_second"] = phase["io_mean_GB_per_second"]
            out[f"{prefix}_checkpoint_io_mean_GiB_per_second"] = phase["io_mean_GiB_per_second"]
    return out


# What a campaign reduces over checkpoint-only runs: summary.json `metric` key, label, decimals.
CHECKPOINT_METRICS = (
    ("save_checkpoint_io_mean_GB_per_second", "write GB/s", 3),
    ("save_checkpoint_duration_mean_seconds", "write s", 3),
    ("load_checkpoint_io_mean_GB_per_second", "read GB/s", 3),
    ("load_checkpoint_duration_mean_seconds", "read s", 3),
)


# What a checkpoint run keeps for campaigns and `iogen compare`: CHECKPOINT_METRICS, the GiB/s
# figures beside the GB/s ones, and (not metrics) what makes two runs comparable, each None when
# it does not apply (a phase the run did not do).
CHECKPOINT_RUN_KEYS = tuple(key for key, _, _ in CHECKPOINT_METRICS) + (
    "save_checkpoint_io_mean_GiB_per_second", "load_checkpoint_io_mean_GiB_per_second")
CHECKPOINT_SETUP_KEYS = ("write_bytes_per_checkpoint", "read_bytes_per_checkpoint", "format", "mode",
                         "parallelism", "write_threads", "read_threads", "transfer_size_bytes")


def checkpoint_values(doc: dict) -> dict | None:
    """A checkpoint run's figures and setup for a campaign or a comparison (None for a training run)."""
    if doc.get("kind") != "checkpoint":
        return None
    metric = doc.get("metric") or {}
    ck = (doc.get("iogen") or {}).get("checkpoint") or {}
    plan = ck.get("plan") or {}
    out = {key: metric.get(key) for key in CHECKPOINT_RUN_KEYS}
    wrote, read = ((ck.get(phase) or {}).get("checkpoints") for phase in ("write", "read"))
    out.update({
        "write_bytes_per_checkpoint": (ck.get("write") or {}).get("bytes_per_checkpoint"),
        "read_bytes_per_checkpoint": (ck.get("read") or {}).get("bytes_per_checkpoint"),
        "format": plan.get("format"),
        "mode": plan.get("mode"),
        "parallelism": (f"tensor {plan['tensor']}, pipeline {plan['pipeline']}, data {plan['data']}, "
                        f"ZeRO stage {plan.get('zero_stage')}") if "tensor" in plan else None,
        "write_threads": ck.get("write_threads") if wrote else None,
        "read_threads": ck.get("read_threads") if read else None,
        "transfer_size_bytes": ck.get("transfer_size_bytes"),
    })
    return out


def checkpoint_series(doc: dict) -> dict | None:
    """Per-checkpoint durations and the per-rank spread of a checkpoint run, for report plots."""
    if doc.get("kind") != "checkpoint":
        return None
    ck = ((doc.get("iogen") or {}).get("checkpoint")) or {}
    out = {}
    for phase in ("write", "read"):
        p = ck.get(phase) or {}
        if not p.get("checkpoints"):
            continue
        per_rank = (p.get("per_rank") or {}).get("duration_seconds") or []
        out[phase] = {
            "duration_seconds": [c["duration_seconds"] for c in p.get("per_checkpoint", [])],
            "io_GB_per_second": [c["io_GB_per_second"] for c in p.get("per_checkpoint", [])],
            "rank_duration_min_seconds": [min(row) for row in per_rank],
            "rank_duration_max_seconds": [max(row) for row in per_rank],
        }
    return out
