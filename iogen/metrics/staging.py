"""Staging figures (iogen/staging.py): per node and for the job, and MLPerf HPC's T_staging / T_epoch.

T_staging is the job's staging time: from the barrier that starts staging to the barrier that
ends it (the slowest node's copy plus the wait), the longest any rank saw. Per node, `copy_s` is
the stager's own copy time. T_epoch is the mean train epoch span of the same run (first rank's
first request to last rank's last step end, every step): the ratio says how many epochs of
training the staging costs, which is how MLPerf HPC reports whether staging pays.
"""
from __future__ import annotations

import math

GIB = 1 << 30


def reduce_staging(per_rank: list[dict], scope: str, folder: str, keep: bool, reuse: bool) -> dict:
    """Per-rank StageReport dicts -> the staging block (without the epoch ratio)."""
    stagers = [r for r in per_rank if r["stager"]]
    nodes = []
    for r in stagers:
        copy_s = (r["t_copy_end_ns"] - r["t_start_ns"]) / 1e9
        nodes.append({"node": r["node"], "folder": r["folder"], "copy_s": copy_s, "files": r["files"],
                      "bytes": r["bytes"], "reused_files": r["reused_files"], "reused_bytes": r["reused_bytes"],
                      "gib_s": r["bytes"] / GIB / copy_s if copy_s > 0 else None})
    t_staging_s = max((r["t_end_ns"] - r["t_start_ns"]) / 1e9 for r in per_rank) if per_rank else 0.0
    staged = sum(n["bytes"] for n in nodes)
    copies = [n["copy_s"] for n in nodes]
    return {
        "scope": scope,
        "folder": folder,
        "nodes": nodes,
        "t_staging_s": t_staging_s,
        "t_staging_node_min_s": min(copies) if copies else None,
        "t_staging_node_max_s": max(copies) if copies else None,
        "staged_bytes": staged,
        "staged_files": sum(n["files"] for n in nodes),
        "reused_bytes": sum(n["reused_bytes"] for n in nodes),
        "reused_files": sum(n["reused_files"] for n in nodes),
        # every byte the nodes needed was already staged (staging.reuse): nothing was copied
        "reused": bool(nodes) and staged == 0 and sum(n["reused_files"] for n in nodes) > 0,
        "staging_gib_s": staged / GIB / t_staging_s if t_staging_s > 0 else None,
        "kept": keep,
        "reuse_allowed": reuse,
    }


def with_epoch_ratio(block: dict, epoch_spans_ns) -> dict:
    """The block with T_epoch (mean train epoch span, s) and T_staging / T_epoch added."""
    spans = [float(s) for s in epoch_spans_ns if s is not None and math.isfinite(float(s)) and s > 0]
    t_epoch = sum(spans) / len(spans) / 1e9 if spans else None
    return dict(block, t_epoch_s=t_epoch,
                t_staging_over_t_epoch=block["t_staging_s"] / t_epoch if t_epoch else None)
