"""Object-store request figures across drains, threads, batches and ranks: summary.json's `iogen.object_store`.

An ObjectStore counts its requests (iogen/storage/s3.py) and hands them over with drain();
these functions merge such figures exactly (counts summed, latency histograms merged by adding
their buckets, iogen/common/histogram.py) and build the run's block.
"""
from __future__ import annotations

import numpy as np

from ..storage.figures import OPS, STREAM_OPS, OpStats, StreamStats
from .latency import reduce_histograms


def merge_figures(figures) -> dict:
    """Figures of several drains (ranks, threads) as one: counts summed, histograms merged exactly."""
    out: dict = {}
    for fig in figures:
        for op, doc in (fig or {}).items():
            kind = StreamStats if op in STREAM_OPS else OpStats  # per-object figures of s3torchconnector
            out.setdefault(op, kind()).add(kind.from_dict(doc))
    return {op: out[op].to_dict() for op in OPS + STREAM_OPS if op in out}


ALL_OPS = OPS + STREAM_OPS
COUNTERS_MAX = max(len(OpStats.COUNTERS), len(StreamStats.COUNTERS))


def _kind(op: str):
    return StreamStats if op in STREAM_OPS else OpStats


def reduce_figures(world, cells) -> list[dict] | None:
    """Per cell, merge_figures over every rank's figures of that cell, on rank 0 (None elsewhere).

    A collective: every rank passes the same number of cells (figures dicts, None for none).
    Which (cell, op) any rank has is agreed by a max allreduce; then the counters are summed
    and the histograms merged by reductions (metrics.latency.reduce_histograms): rank 0 receives
    O(cells x ops x buckets), not one dict per rank.
    """
    stats = [[_kind(op).from_dict(c[op]) if c and op in c else None for op in ALL_OPS] for c in cells]
    present = np.array([[s is not None for s in row] for row in stats], np.int64).reshape(len(cells), len(ALL_OPS))
    present = world.allreduce_array(present, "max")
    slots = [(int(i), int(j)) for i, j in np.argwhere(present > 0)]
    mine = [stats[i][j] or _kind(ALL_OPS[j])() for i, j in slots]
    rows = [[getattr(s, k) for k in s.COUNTERS] + [0] * (COUNTERS_MAX - len(s.COUNTERS)) for s in mine]
    counts = world.reduce_array(np.array(rows, np.int64).reshape(len(mine), COUNTERS_MAX), "sum")
    hists = reduce_histograms(world, [getattr(s, h) for s in mine for h in s.HISTOGRAMS])
    if world.rank != 0:
        return None
    out: list[dict] = [{} for _ in cells]
    at = 0
    for n, (i, j) in enumerate(slots):
        merged = _kind(ALL_OPS[j])()
        for k, v in zip(merged.COUNTERS, counts[n]):
            setattr(merged, k, int(v))
        for h in merged.HISTOGRAMS:
            setattr(merged, h, hists[at])
            at += 1
        out[i][ALL_OPS[j]] = merged.to_dict()
    return out


def run_block(world, train_loader, eval_loader, checkpointer=None, staging=None, client: str = "boto3",
              endpoints=()) -> dict | None:
    """summary.json's `iogen.object_store` on rank 0 (None elsewhere): per epoch and for indexing, every rank's requests merged.

    Collective: every rank calls it after its loop. client: the storage backend's client (its client_name).
    endpoints: storage.endpoint_urls (several endpoints: `requests_by_endpoint` is added; () for one).
    """
    index = merge_figures(getattr(l, "index_figures", None) for l in (train_loader, eval_loader) if l is not None)
    train = list(getattr(train_loader, "epoch_figures", []))
    evals = list(getattr(eval_loader, "epoch_figures", []) if eval_loader is not None else [])
    n_train, n_eval = (int(n) for n in world.allreduce_array(np.array([len(train), len(evals)], np.int64), "max"))
    setup = merge_figures(getattr(l, "setup_figures", None) for l in (train_loader, eval_loader) if l is not None)
    cells = [index, *train, *[None] * (n_train - len(train)), *evals, *[None] * (n_eval - len(evals)),
             getattr(staging, "object_figures", None),
             getattr(checkpointer, "figures", None), getattr(checkpointer, "drain_figures", None), setup]
    merged = reduce_figures(world, cells)
    by_endpoint = endpoint_figures(world, endpoints, cells)
    if merged is None:
        return None
    block = {"client": client, "loader": train_loader.name if train_loader is not None else None,
             "index": merged[0],
             "train_epochs": [dict(epoch=e + 1, **merged[1 + e]) for e in range(n_train)],
             "eval_epochs": [dict(epoch=e + 1, **merged[1 + n_train + e]) for e in range(n_eval)]}
    if _reads_through_datasets(client):  # the epochs' reads: what iogen measures around the connector's calls
        _connector_reads(block)
    mark_not_measured(block, client)
    if merged[-4]:  # data staged from the bucket (each node's stager)
        block["staging"] = merged[-4]
    if merged[-3]:  # checkpoint uploads, deletes (rank 0 writes)
        block["checkpoint"] = merged[-3]
    if merged[-2]:  # local-tier checkpoints drained to the bucket (rank 0), superseded ones deleted
        block["checkpoint_drain"] = merged[-2]
    if merged[-1]:  # the loaders' start-up check of the bucket (HEAD), apart from the indexing's requests
        block["bucket_check"] = merged[-1]
    put_endpoint_figures(block, by_endpoint)
    return block


def endpoint_figures(world, endpoints, cells) -> dict | None:
    """{endpoint: {requests, retries, throttled_503, errors}} of storage.endpoint_urls on rank 0, every rank's
    counts of these figures cells onto its endpoint (rank mod N) plus the start-up HEADs of the others
    (iogen/storage/endpoints.py); None with one endpoint, and on other ranks. A collective when there are
    endpoints."""
    if not endpoints:
        return None
    from ..storage.endpoints import counts_in, figures_by_endpoint

    return figures_by_endpoint(world, endpoints, counts_in(cells))


def put_endpoint_figures(block: dict, by_endpoint: dict | None) -> None:
    """An object_store block's per-endpoint figures (after mark_not_measured): `requests_by_endpoint`
    {endpoint: requests}, and `by_endpoint` {endpoint: {requests, retries, throttled_503, errors}}, whose
    retries and 503s are null when the client hides those of its data requests (the block's `not_measured`)."""
    if by_endpoint is None:
        return
    hidden = {k for k in ("retries", "throttled_503") if k in (block.get("not_measured") or {})}
    block["requests_by_endpoint"] = {url: d["requests"] for url, d in by_endpoint.items()}
    block["by_endpoint"] = {url: {k: (None if k in hidden else v) for k, v in d.items()}
                            for url, d in by_endpoint.items()}


CONNECTOR_READS_NOT_MEASURED = {
    "retries": "s3torchconnector retries inside its CRT client and does not report them",
    "throttled_503": "s3torchconnector does not expose the HTTP status of the responses it retried",
    "first_byte_latency": "s3torchconnector's readinto returns when the whole range has arrived",
}


def mark_not_measured(block: dict, client: str) -> None:
    """A client that counts its GETs and PUTs but hides their retries and 503s (its backend's
    `not_measured`, e.g. obstore's): those figures of every get and put are null, the reasons under
    `not_measured`, the ops named in `not_measured_ops`."""
    from ..storage import client_not_measured

    reasons = client_not_measured(client)
    if not reasons:
        return
    block["not_measured"] = {**block.get("not_measured", {}), **reasons}
    block["not_measured_ops"] = ["get", "put"]
    for cell in block.values():
        cells = cell if isinstance(cell, list) else [cell]
        for c in cells:
            if isinstance(c, dict):
                for op in ("get", "put"):
                    if isinstance(c.get(op), dict) and "requests" in c[op]:
                        for k in reasons:
                            c[op][k] = None
                            if f"{k}_histogram" in c[op]:
                                c[op][f"{k}_histogram"] = None


def _reads_through_datasets(client: str) -> bool:
    """Whether the backend of `client` brings its own PyTorch datasets (capabilities.torch_datasets:
    s3torchconnector's), whose reads hide their retries, 503s and first byte."""
    from ..storage import backend_class, backend_names

    return any(backend_class(n).client_name == client and backend_class(n).capabilities.torch_datasets
               for n in backend_names())


def _connector_reads(block: dict) -> None:
    """The pytorch loader through s3torchconnector (iogen/loaders/s3torch.py): retries, 503s and
    the first byte are not exposed by the connector: null, with the reason under `not_measured`."""
    block["index_client"] = "boto3"
    block["not_measured"] = dict(CONNECTOR_READS_NOT_MEASURED)
    for ep in block["train_epochs"] + block["eval_epochs"]:
        for op in OPS:
            if op in ep:
                ep[op].update(retries=None, throttled_503=None, first_byte_latency=None,
                              first_byte_latency_histogram=None)
