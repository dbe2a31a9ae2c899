"""Staging figures (iogen/data/staging.py): per node and for the job, and MLPerf HPC's T_staging / T_epoch.

T_staging is the job's staging time: from the barrier that starts staging to the barrier that
ends it (the slowest node's copy plus the wait), the longest any rank saw. Per node, `copy_s` is
the stager's own copy time. T_epoch is the mean train epoch span of the same run (first rank's
first request to last rank's last step end, every step): the ratio says how many epochs of
training the staging costs, which is how MLPerf HPC reports whether staging pays.
"""
from __future__ import annotations

import math

import numpy as np

GIB = 1 << 30


def reduce_staging(world, report, scope: str, folder: str, keep: bool, reuse: bool) -> dict | None:
    """The staging block on rank 0, None elsewhere (a collective: every rank calls it).

    Rank 0 receives each node's stager's figures (one dict per node) and the longest staging
    window any rank saw (a max reduction), never one dict per rank.
    """
    stagers = world.leaders_gather_obj(report.as_dict())  # the stager is the node's lowest rank
    longest = world.reduce_array(np.array([report.t_end_ns - report.t_start_ns], np.int64), "max")
    if world.rank != 0:
        return None
    return staging_block(stagers, int(longest[0]) / 1e9, scope, folder, keep, reuse)


def staging_block(stagers: list[dict], t_staging_s: float, scope: str, folder: str, keep: bool,
                  reuse: bool) -> dict:
    """Each node's stager's StageReport dict and T_staging -> the staging block (without the epoch ratio)."""
    nodes = []
    for r in stagers:
        copy_s = (r["t_copy_end_ns"] - r["t_start_ns"]) / 1e9
        nodes.append({"node": r["node"], "folder": r["folder"], "copy_s": copy_s, "files": r["files"],
                      "bytes": r["bytes"], "reused_files": r["reused_files"], "reused_bytes": r["reused_bytes"],
                      "gib_s": r["bytes"] / GIB / copy_s if copy_s > 0 else None})
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
