"""Which endpoint of an object store a rank talks to, how its TLS is set up, and the requests per endpoint.

    storage.endpoint_urls: [http://gw1:7480, http://gw2:7480]   # several gateways of one store
    endpoint_of(storage)        # this process's endpoint: rank r uses endpoint r mod N
    tls_verify(storage)         # boto3's verify=: True, False, or the CA bundle's path

Requests are spread round-robin per rank, not per request: every request of rank r (its loaders,
DataLoader workers, checkpoints, staging, datagen uploads) goes to endpoint r mod N, through every
client. Each rank checks every endpoint before any work (ObjectStore.check); the HEADs it sends to
the endpoints other than its own are counted here (`other_endpoint_checks`), and
`requests_by_endpoint` reduces, across ranks, each rank's requests onto its endpoint.
"""
from __future__ import annotations

import threading
from collections import Counter

import numpy as np

_CHECKED: set = set()  # (endpoint, bucket) checked from this process (the other endpoints' start-up HEADs)
_OTHER_HEADS: Counter = Counter()  # endpoint -> HEADs this process sent there, not its own endpoint
_LOCK = threading.Lock()


def endpoint_list(storage) -> tuple:
    """storage.endpoint_urls as a tuple; () when the store has one endpoint (storage.endpoint_url or the AWS
    chain's)."""
    storage = getattr(storage, "storage", storage)
    return tuple(getattr(storage, "endpoint_urls", None) or ())


def process_rank() -> int:
    """This process's rank: the launcher's when iogen runs MPI (a spawned DataLoader worker belongs to its
    parent's rank, and must not start MPI to learn it), else 0 (iogen.common.launcher)."""
    from ..common.launcher import launcher_rank

    return launcher_rank()


def endpoint_of(storage, rank: int | None = None) -> str | None:
    """The endpoint a rank's clients use: endpoint rank mod N of storage.endpoint_urls, else storage.endpoint_url
    (None: the AWS chain's)."""
    storage = getattr(storage, "storage", storage)
    urls = endpoint_list(storage)
    if not urls:
        return storage.endpoint_url
    return urls[(process_rank() if rank is None else int(rank)) % len(urls)]


def tls_verify(storage):
    """boto3's `verify`: the CA bundle's path, False with storage.verify_tls False, else True (botocore's
    default trust, AWS_CA_BUNDLE included)."""
    storage = getattr(storage, "storage", storage)
    if getattr(storage, "ca_bundle", None):
        return storage.ca_bundle
    return bool(getattr(storage, "verify_tls", True))


def check_once(endpoint: str, bucket: str, check) -> None:
    """check() (a HEAD of bucket at endpoint, returning its request count) once per endpoint and run (until a
    run's figures take the counts: other_endpoint_checks)."""
    with _LOCK:
        if (endpoint, bucket) in _CHECKED:
            return
    n = check()
    with _LOCK:
        _CHECKED.add((endpoint, bucket))
        _OTHER_HEADS[endpoint] += int(n)


def other_endpoint_checks(reset: bool = False) -> dict:
    """{endpoint: HEADs} this process sent to endpoints other than its own (the start-up checks); reset: start
    afresh, the endpoints to be checked again (a run's figures took them: a later run in this process, through
    iogen's API, checks and counts its own)."""
    with _LOCK:
        found = dict(_OTHER_HEADS)
        if reset:
            _OTHER_HEADS.clear()
            _CHECKED.clear()
        return found


COUNTS = ("requests", "retries", "throttled_503", "errors")  # what figures_by_endpoint counts per endpoint


def counts_in(cells) -> dict:
    """{requests, retries, throttled_503, errors} summed over figures cells ({op: {requests: ...}}, None for none):
    per-object stream figures (put_object_stream, get_object_stream) are objects, not requests, and are left out;
    a count a client does not report (null) adds nothing."""
    from .figures import OPS

    return {k: sum(int((c.get(op) or {}).get(k) or 0) for c in cells if c for op in OPS) for k in COUNTS}


def requests_in(cells) -> int:
    """The requests of figures cells (counts_in's `requests`)."""
    return counts_in(cells)["requests"]


def figures_by_endpoint(world, urls, counts: dict) -> dict | None:
    """{endpoint: {requests, retries, throttled_503, errors}} on rank 0 (None elsewhere): each rank's counts onto
    its endpoint (rank mod N), plus the start-up HEADs every rank sent to the others (requests). A collective:
    every rank calls it with the same urls."""
    urls = tuple(urls)
    table = np.zeros((len(urls), len(COUNTS)), np.int64)
    table[world.rank % len(urls)] += np.array([int(counts.get(k) or 0) for k in COUNTS], np.int64)
    for url, n in other_endpoint_checks(reset=True).items():
        if url in urls:
            table[urls.index(url), 0] += int(n)
    total = world.reduce_array(table, "sum")
    if world.rank != 0:
        return None
    return {url: dict(zip(COUNTS, (int(v) for v in row))) for url, row in zip(urls, np.asarray(total).tolist())}


def requests_by_endpoint(world, urls, requests: int) -> dict | None:
    """{endpoint: requests} on rank 0 (None elsewhere): figures_by_endpoint's requests alone. A collective."""
    found = figures_by_endpoint(world, urls, {"requests": requests})
    return None if found is None else {url: d["requests"] for url, d in found.items()}
