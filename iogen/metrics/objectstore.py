"""Object-store request figures across drains, threads, batches and ranks: summary.json's `iogen.object_store`.

An ObjectStore counts its requests (iogen/objectstore.py) and hands them over with drain();
these functions merge such figures exactly (counts summed, latency histograms merged by adding
their buckets, iogen/histogram.py) and build the run's block.
"""
from __future__ import annotations

from ..objectstore import OPS, OpStats


def merge_figures(figures) -> dict:
    """Figures of several drains (ranks, threads) as one: counts summed, histograms merged exactly."""
    out: dict[str, OpStats] = {}
    for fig in figures:
        for op, doc in (fig or {}).items():
            out.setdefault(op, OpStats()).add(OpStats.from_dict(doc))
    return {op: out[op].to_dict() for op in OPS if op in out}


def run_block(world, train_loader, eval_loader, checkpointer=None) -> dict:
    """summary.json's `iogen.object_store`: per epoch and for indexing, every rank's requests merged.

    Collective: every rank calls it after its loop.
    """
    mine = {"index": [getattr(l, "index_figures", None) for l in (train_loader, eval_loader) if l is not None],
            "train": list(getattr(train_loader, "epoch_figures", [])),
            "eval": list(getattr(eval_loader, "epoch_figures", []) if eval_loader is not None else []),
            "checkpoint": getattr(checkpointer, "figures", None)}
    ranks = world.allgather_obj(mine)
    block = {"client": "boto3", "loader": train_loader.name if train_loader is not None else None,
             "index": merge_figures(f for r in ranks for f in r["index"])}
    for phase in ("train", "eval"):
        n = max(len(r[phase]) for r in ranks)
        block[f"{phase}_epochs"] = [dict(epoch=e + 1, **merge_figures(r[phase][e] for r in ranks if e < len(r[phase])))
                                   for e in range(n)]
    if any(r["checkpoint"] for r in ranks):  # checkpoint uploads, deletes (rank 0 writes)
        block["checkpoint"] = merge_figures(r["checkpoint"] for r in ranks)
    return block
