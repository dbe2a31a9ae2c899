"""Checkpoint metrics as MLPerf Storage defines them (checkpointing benchmark, DLIO's statscounter).

Per checkpoint and rank: the bytes the rank wrote (or read) and its duration, from the barrier
that starts the checkpoint to the end of the rank's own I/O (fsync and rename included). Per
checkpoint, the job's duration is the slowest rank's, and its throughput the job's bytes over
that duration (MLPerf's figure); the slowest rank's own throughput stands beside it. The run
reports the mean over checkpoints (of each checkpoint's rate, as DLIO's statscounter does) and
the population stdev.

Units: DLIO sums a checkpoint's size in 2^30-byte units (base_checkpointing.py) and MLPerf's
results tooling labels its column "Write B/W (GiB/s)": DLIO's `*_GB_per_second` keys are GiB/s,
and so are iogen's (summary schema_version 2 on). The decimal figure (10^9 bytes) appears only
under a key that says `1e9`. Summaries written before schema_version 2 held 10^9-byte figures
under the `GB` keys; `upgrade_summary` converts them when they are read back.
"""
from __future__ import annotations

import numpy as np

GIB = float(2**30)  # DLIO's and MLPerf's "GB"
DECIMAL_GB = 1e9  # only under keys that say 1e9
# summary.json schema_version from which every `GB` figure is GiB (2^30 bytes); older ones were 10^9
UNITS_SCHEMA_VERSION = 2
_OLD_TO_GIB = DECIMAL_GB / GIB


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
    job_gib_s = job_bytes / safe / GIB
    slow_rate = rank_bytes[rows, slowest] / safe
    with np.errstate(invalid="ignore", divide="ignore"):
        rank_gib_s = np.where(dur_s > 0, rank_bytes / np.where(dur_s > 0, dur_s, 1) / GIB, np.nan)
    return {
        "checkpoints": int(len(job_s)),
        "bytes_per_checkpoint": int(job_bytes[0]),
        "duration_mean_seconds": float(job_s.mean()),
        "duration_stdev_seconds": float(job_s.std()),
        # DLIO's GB/s: GiB/s, the mean and population stdev of the checkpoints' rates
        "io_mean_GB_per_second": float(np.nanmean(job_gib_s)),
        "io_stdev_GB_per_second": float(np.nanstd(job_gib_s)),
        "io_mean_GiB_per_second": float(np.nanmean(job_gib_s)),
        "io_mean_1e9_bytes_per_second": float(np.nanmean(job_bytes / safe / DECIMAL_GB)),
        # not DLIO's figure: the mean bytes over the mean duration, the rate the mean duration implies
        "io_of_mean_duration_GiB_per_second": (float(job_bytes.mean() / job_s.mean() / GIB) if job_s.mean() > 0
                                               else None),
        "per_checkpoint": [
            {"bytes": int(job_bytes[i]), "duration_seconds": float(job_s[i]), "slowest_rank": int(slowest[i]),
             "io_GB_per_second": float(job_gib_s[i]), "io_GiB_per_second": float(job_gib_s[i]),
             "io_1e9_bytes_per_second": float(job_gib_s[i] * GIB / DECIMAL_GB),
             "slowest_rank_io_GB_per_second": float(slow_rate[i] / GIB)}
            for i in rows
        ],
        "per_rank": {
            "bytes": [int(b) for b in rank_bytes[0]],
            "duration_seconds": dur_s.tolist(),
            "io_GB_per_second": [[None if np.isnan(x) else float(x) for x in row] for row in rank_gib_s],
        },
    }


def dlio_checkpoint_block(write: dict, read: dict) -> dict:
    """DLIO's summary keys for checkpoints (save_/load_checkpoint_*, checkpoint_size_GB), from
    `checkpoint_phase` results; GB = 2^30 bytes as DLIO counts it, the decimal rate under `1e9`."""
    out = {}
    for prefix, phase in (("save", write), ("load", read)):
        if phase.get("checkpoints"):
            out[f"{prefix}_checkpoint_duration_mean_seconds"] = phase["duration_mean_seconds"]
            out[f"{prefix}_checkpoint_duration_stdev_seconds"] = phase["duration_stdev_seconds"]
            out[f"{prefix}_checkpoint_io_mean_GB_per_second"] = phase["io_mean_GB_per_second"]
            out[f"{prefix}_checkpoint_io_stdev_GB_per_second"] = phase["io_stdev_GB_per_second"]
            out[f"{prefix}_checkpoint_io_mean_GiB_per_second"] = phase["io_mean_GiB_per_second"]
            out[f"{prefix}_checkpoint_io_mean_1e9_bytes_per_second"] = phase["io_mean_1e9_bytes_per_second"]
    sized = write if write.get("checkpoints") else read
    if sized.get("checkpoints"):
        out["checkpoint_size_GB"] = sized["bytes_per_checkpoint"] / GIB
    return out


def _old_gb(d: dict, gb_key: str, gib_key: str | None, decimal_key: str | None) -> None:
    """One figure of a summary written before schema_version 2: its `GB` value was 10^9 bytes."""
    if gb_key not in d or d[gb_key] is None:
        return
    old = d[gb_key]
    if decimal_key:
        d.setdefault(decimal_key, old)
    d[gb_key] = d[gib_key] if gib_key and d.get(gib_key) is not None else old * _OLD_TO_GIB


def upgrade_summary(doc: dict) -> dict:
    """A summary.json as schema_version 2 writes it: one written before (its `GB` figures in 10^9
    bytes) comes back as a converted copy, so that no false 7.4% change appears beside a newer run."""
    try:
        version = int(doc.get("schema_version") or 1)
    except (TypeError, ValueError):
        version = 1
    if version >= UNITS_SCHEMA_VERSION or doc.get("kind") != "checkpoint":
        return doc
    import copy

    doc = copy.deepcopy(doc)
    metric = doc.get("metric")
    if isinstance(metric, dict):
        for prefix in ("save", "load"):
            _old_gb(metric, f"{prefix}_checkpoint_io_mean_GB_per_second", f"{prefix}_checkpoint_io_mean_GiB_per_second",
                    f"{prefix}_checkpoint_io_mean_1e9_bytes_per_second")
    ck = (doc.get("iogen") or {}).get("checkpoint")
    for phase in ("write", "read"):
        p = (ck or {}).get(phase) if isinstance(ck, dict) else None
        if not isinstance(p, dict):
            continue
        _old_gb(p, "io_mean_GB_per_second", "io_mean_GiB_per_second", "io_mean_1e9_bytes_per_second")
        for c in p.get("per_checkpoint") or []:
            if isinstance(c, dict):
                _old_gb(c, "io_GB_per_second", "io_GiB_per_second", "io_1e9_bytes_per_second")
                _old_gb(c, "slowest_rank_io_GB_per_second", None, None)
        per_rank = p.get("per_rank") or {}
        if isinstance(per_rank, dict) and isinstance(per_rank.get("io_GB_per_second"), list):
            per_rank["io_GB_per_second"] = [[None if x is None else x * _OLD_TO_GIB for x in row]
                                            for row in per_rank["io_GB_per_second"]]
    doc["schema_version"] = UNITS_SCHEMA_VERSION
    doc.setdefault("iogen", {})["units_converted_from_schema_version"] = version
    return doc


def upgrade_values(values: dict | None) -> dict | None:
    """`checkpoint_values` as an older report.json kept them (report schema_version 1: `GB` figures
    in 10^9 bytes), converted to GiB: the GiB figure beside it, else the value x 10^9 / 2^30."""
    if not values:
        return values
    values = dict(values)
    for prefix in ("save", "load"):
        _old_gb(values, f"{prefix}_checkpoint_io_mean_GB_per_second", f"{prefix}_checkpoint_io_mean_GiB_per_second",
                None)
    return values


# What a campaign reduces over checkpoint-only runs: summary.json `metric` key, label, decimals.
CHECKPOINT_METRICS = (
    ("save_checkpoint_io_mean_GB_per_second", "write GiB/s", 3),
    ("save_checkpoint_duration_mean_seconds", "write s", 3),
    ("load_checkpoint_io_mean_GB_per_second", "read GiB/s", 3),
    ("load_checkpoint_duration_mean_seconds", "read s", 3),
)


# What a checkpoint run keeps for campaigns and `iogen compare`: CHECKPOINT_METRICS (DLIO's GB/s keys,
# GiB/s), the same figures under their GiB/s keys, and (not metrics) what makes two runs comparable, each None when
# it does not apply (a phase the run did not do).
CHECKPOINT_RUN_KEYS = tuple(key for key, _, _ in CHECKPOINT_METRICS) + (
    "save_checkpoint_io_mean_GiB_per_second", "load_checkpoint_io_mean_GiB_per_second")
CHECKPOINT_SETUP_KEYS = ("write_bytes_per_checkpoint", "read_bytes_per_checkpoint", "format", "mode",
                         "parallelism", "write_threads", "read_threads", "transfer_size_bytes")


def checkpoint_values(doc: dict) -> dict | None:
    """A checkpoint run's figures and setup for a campaign or a comparison (None for a training run)."""
    if doc.get("kind") != "checkpoint":
        return None
    doc = upgrade_summary(doc)
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
    doc = upgrade_summary(doc)
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
