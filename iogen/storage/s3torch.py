"""The `s3torchconnector` backend: the same S3 endpoint, its transfers through s3torchconnector (the AWS CRT).

What a PyTorch job does with `torch.save(state, S3Checkpoint(...).writer(uri))`: each object is
one streaming writer (the connector's S3Writer, which cuts the stream into multipart-upload parts
of its `part_size` and uploads them from the CRT's own threads); reads go through the connector's
range-based reader. Everything else (the bucket check, HEAD, LIST, DELETE, ranged GETs of the
native paths) is the `s3` backend's boto3 client, counted as requests.

- `connector_args`: region, endpoint and S3ClientConfig resolved as boto3 resolves them, for the
  connector's datasets (iogen/loaders/s3torch.py) and its S3Checkpoint.
- Writes: `stream_object`, one `write()` per part, then `close()` (CompleteMultipartUpload: the
  object exists from there). The connector takes `bytes`, not a buffer: one copy of each part.
- Reads: `read_object`, the connector's range-based reader without its buffer: `readinto` of a
  reused buffer, each call one ranged GET.
- Ceph RGW 16.2 answers CompleteMultipartUpload without an ETag header (its ETag is in the body, where
  S3 documents it), which the connector (1.5) takes for a failure after the object was completed; iogen
  then checks by a HEAD that the object is this upload's (its size, a multipart ETag of as many parts,
  modified since the upload began) and takes it as written (`ConnectorStorage.completed`).
- Failures: S3Writer has no abort. Its native stream aborts the multipart upload when released
  without close, while IOBase's finalizer would close, i.e. complete, a half-written object: so a
  failed or interrupted object is marked closed and its stream released (`_abandon`), and no
  partial object appears under the final key.
- Sample reads of the pytorch loader's connector datasets (iogen/loaders/s3torch.py): `read_spans`, a seek
  and one `readinto` of each span through the S3Reader a dataset handed out, counted per call
  (`ReaderFigures`: GETs, and HEADs, a fresh reader's first seek) with the connector's errors as exit 2
  naming the object.
- Figures: the CRT hides its requests (count, retries, 503s, per-request latency); what iogen sees
  is per object: objects, bytes, errors and each object's time, in `put_object_stream` /
  `get_object_stream` (iogen.storage.figures.StreamStats).
"""
from __future__ import annotations

import os
import re
import threading
import time

import numpy as np

from ..errors import ConfigError, DataError
from .keys import root_parts, split_uri
from .base import Capabilities
from .figures import StreamStats
from .s3 import ObjectStore


def connector_args(storage, store: ObjectStore, *, part_bytes: int | None = None,
                   max_attempts: int | None = None) -> dict:
    """region, endpoint and S3ClientConfig for s3torchconnector (its datasets, its S3Checkpoint), from the
    same storage keys as boto3's and resolved as boto3 resolves them (store's client: the AWS config file
    included); path-style addressing with `path`, and with `auto` for an endpoint other than AWS's."""
    from urllib.parse import urlsplit

    from s3torchconnector import S3ClientConfig

    # this rank's endpoint (storage.endpoint_url, or endpoint rank mod N of storage.endpoint_urls: store's)
    endpoint = store.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    client = store.client()
    if endpoint is None:  # an endpoint from the AWS config file, as boto3 resolved it; AWS itself: none
        resolved = client.meta.endpoint_url
        if resolved and not (urlsplit(resolved).hostname or "").endswith("amazonaws.com"):
            endpoint = resolved
    region = storage.region or client.meta.region_name
    if not region:
        raise ConfigError("storage.region: s3torchconnector needs a region; set storage.region or AWS_REGION")
    if storage.addressing_style == "auto":  # boto3's auto: path style for an endpoint other than AWS's
        path_style = endpoint is not None and not (urlsplit(endpoint).hostname or "").endswith("amazonaws.com")
    else:
        path_style = storage.addressing_style == "path"
    config = {"force_path_style": path_style}
    if part_bytes:  # 5 MiB .. 5 GiB (storage.keys._s3_client_problems, checkpoint part sizes)
        config["part_size"] = int(part_bytes)
    if max_attempts:
        config["max_attempts"] = int(max_attempts)
    return {"region": region, "endpoint": endpoint, "s3client_config": S3ClientConfig(**config)}


def open_connector(wl, store, part_bytes: int):
    """An S3Checkpoint on the workload's endpoint, region and addressing (as store's boto3 client resolves
    them), parts of part_bytes, storage.max_attempts tries as boto3's."""
    return open_connector_storage(wl.storage, store, part_bytes)


def open_connector_storage(storage, store, part_bytes: int):
    """open_connector from the storage section itself."""
    from s3torchconnector import S3Checkpoint

    return S3Checkpoint(**connector_args(storage, store, part_bytes=part_bytes, max_attempts=store.max_attempts))


def connector_error(uri: str, exc: BaseException, what: str) -> DataError:
    """A DataError naming the object, with the HTTP status and S3 error code the connector's message holds."""
    text = str(exc)
    status = re.search(r"response_status: (\d+)", text)
    code = re.search(r"<Code>(\w+)</Code>", text)
    if status or code:
        detail = " ".join(x for x in ((f"HTTP {status.group(1)}" if status else ""),
                                      code.group(1) if code else "") if x)
    else:
        detail = text.splitlines()[0][:200] if text else type(exc).__name__
    return DataError(uri, f"{what} through s3torchconnector failed: {detail}")


def _abandon(writer) -> None:
    """Drop an unfinished S3Writer without completing its upload (see the module doc)."""
    writer._closed = True  # IOBase's finalizer would close() (complete) it
    writer.stream = None  # the native stream, released unclosed, aborts the multipart upload


def warm_connector(s3, storage) -> None:
    """Build the connector's native client, and its first connection, now: outside the timed windows
    (storage: the workload's storage section)."""
    from s3torchconnector import S3Exception

    bucket, prefix = root_parts(storage.storage_root)
    try:  # S3Checkpoint has no public call that does not move an object; a LIST of one key is the cheapest
        next(iter(s3._client.list_objects(bucket, prefix, max_keys=1)), None)
    except S3Exception as exc:
        raise connector_error(f"s3://{bucket}/{prefix}", exc, "LIST") from None


class StreamFigures:
    """Thread-safe StreamStats per operation (put_object_stream, get_object_stream), drained per phase."""

    def __init__(self):
        self._lock = threading.Lock()
        self._stats: dict[str, StreamStats] = {}

    def record(self, op: str, nbytes: int, duration_ns: int, failed: bool = False) -> None:
        """One object's write or read: its bytes and time, or a failure."""
        with self._lock:
            s = self._stats.setdefault(op, StreamStats())
            if failed:
                s.errors += 1
            else:
                s.record(nbytes, duration_ns)

    def drain(self) -> dict:
        """Figures since the last drain, then reset."""
        with self._lock:
            stats, self._stats = self._stats, {}
        return {op: s.to_dict() for op, s in stats.items()}


NO_ETAG_HEADER = 'Header "ETag" not found'  # the connector's error when CompleteMultipartUpload's answer has no ETag header


def stream_object(s3, uri: str, size: int, part_bytes: int, part_of, figures: StreamFigures,
                  stop: threading.Event | None = None, completed=None) -> int:
    """Write one object through S3Checkpoint.writer(uri), part_of(i) for part i; no partial object on failure.

    completed(uri, size, parts, since): whether the object is there whole, written by this upload (see
    ConnectorStorage.completed); asked only when the connector fails the completion for want of an ETag
    header, which Ceph RGW (16.2) does not send with CompleteMultipartUpload (the ETag is in its body,
    as S3 documents it): the upload did complete there."""
    from s3torchconnector import S3Exception

    t0 = time.perf_counter_ns()
    since = time.time()
    writer = None
    done = False
    nparts = max(1, -(-size // part_bytes))
    try:
        writer = s3.writer(uri)
        for i in range(nparts):
            if stop is not None and stop.is_set():
                raise _Stopped()
            n = min(part_bytes, size - i * part_bytes)
            writer.write(part_of(i)[:n].tobytes())  # the connector takes bytes, not a buffer: one copy per part
        try:
            writer.close()  # CompleteMultipartUpload: the object exists from here
        except S3Exception as exc:
            if not (NO_ETAG_HEADER in str(exc) and completed is not None and completed(uri, size, nparts, since)):
                raise
        done = True
    except S3Exception as exc:
        raise connector_error(uri, exc, "upload") from None
    finally:
        if not done:
            if writer is not None:
                _abandon(writer)
            figures.record("put_object_stream", 0, 0, failed=True)
    figures.record("put_object_stream", size, time.perf_counter_ns() - t0)
    return size


class ReaderFigures:
    """This process's calls on the connector's S3Readers (get: readinto, head: a fresh reader's first seek),
    drained per batch in the form merge_figures reads (OpStats.from_dict's fields: counts and histograms,
    without the latency summaries, which the merged figures get once per epoch). The connector exposes no
    retries, 503s or first-byte time: those stay empty (metrics/objectstore.py says why)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._calls = {"get": [], "head": []}  # (bytes, elapsed ns) per call
        self._errors = {"get": 0, "head": 0}

    def count(self, op: str, nbytes: int, elapsed_ns: int) -> None:
        with self._lock:
            self._calls[op].append((int(nbytes), int(elapsed_ns)))

    def failed(self, op: str) -> None:
        with self._lock:
            self._errors[op] += 1

    def drain(self) -> dict:
        """The calls since the last drain (only operations that ran), then reset."""
        import numpy as np

        from ..common.histogram import LatencyHistogram

        with self._lock:
            calls, errors = self._calls, self._errors
            self._calls, self._errors = {"get": [], "head": []}, {"get": 0, "head": 0}
        out = {}
        for op, done in calls.items():
            if not done and not errors[op]:
                continue
            a = np.array(done, np.int64).reshape(-1, 2)
            out[op] = {"requests": len(done), "bytes": int(a[:, 0].sum()), "retries": 0, "throttled_503": 0,
                       "errors": errors[op], "first_byte_latency_histogram": LatencyHistogram().to_dict(),
                       "total_latency_histogram": LatencyHistogram().record(a[:, 1]).to_dict()}
        return out


def reader_error(uri: str, exc, what: str, offset=None) -> DataError:
    """A connector reader's failure as exit 2 naming the object (the connector reports no HTTP status field)."""
    text = " ".join(str(exc).split())
    if "NoSuchKey" in text or "not found" in text.lower() or "404" in text:
        return DataError(uri, f"{what} through s3torchconnector: the object does not exist (HTTP 404: {text})",
                         offset)
    return DataError(uri, f"{what} through s3torchconnector failed: {text}", offset)


class _Stopped(Exception):
    """Another object failed or the run was interrupted: this one stops between parts."""


def run_objects(pool, work, items) -> list:
    """work(item, stop) for each item on pool (iogen.common.pool.ThreadPool); on a failure or an interrupt
    `stop` is set, so the others stop between parts before the error leaves."""
    items = list(items)
    stop = threading.Event()
    out = [None] * len(items)

    def one(k, _state):
        out[k] = work(items[k], stop)

    pool.run(one, range(len(items)), cancel=stop)
    return out


def read_object(s3, uri: str, size: int, view, figures: StreamFigures, stop: threading.Event | None = None) -> int:
    """Read the object whole through the connector's unbuffered range-based reader, view (a part-sized,
    reused buffer) at a time; returns the bytes (a short object is a DataError)."""
    from s3torchconnector import S3Exception, S3ReaderConstructor

    p = len(view)
    t0 = time.perf_counter_ns()
    got = 0
    try:
        bucket, key = split_uri(uri)
        reader = s3._client.get_object(bucket, key, reader_constructor=S3ReaderConstructor.range_based(buffer_size=0))
        while got < size:
            if stop is not None and stop.is_set():
                raise _Stopped()
            n = reader.readinto(view[:min(p, size - got)])
            if not n:
                break
            got += n
    except S3Exception as exc:
        figures.record("get_object_stream", 0, 0, failed=True)
        raise connector_error(uri, exc, "read") from None
    if got != size:
        figures.record("get_object_stream", 0, 0, failed=True)
        raise DataError(uri, f"checkpoint object is truncated: read {got} of {size} bytes", offset=got)
    figures.record("get_object_stream", got, time.perf_counter_ns() - t0)
    return got


class ConnectorStorage(ObjectStore):
    """The `s3` backend whose streamed writes go through s3torchconnector's S3Checkpoint writer
    (see the module doc); every other operation is boto3's."""

    name = "s3torchconnector"
    client_name = "s3torchconnector"
    no_request_log = ("s3torchconnector's CRT client issues and retries the data requests itself and reports none "
                      "of them (iogen measures per object): a request log would miss them")
    capabilities = Capabilities(local_paths=False, page_cache=False, evict=False, direct_io=False, fsync=False,
                                temp_names_visible=False, figures=frozenset({"requests", "objects"}),
                                needs=(("boto3", "storage.storage_type=s3"),
                                       ("s3torchconnector", "storage.s3_client=s3torchconnector")),
                                torch_datasets=True)

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.streams = StreamFigures()
        self.readers = ReaderFigures()
        self._s3 = None
        self._storage = None
        self._part_bytes = None

    @classmethod
    def from_workload(cls, wl, threads: int = 16) -> "ConnectorStorage":
        st = super().from_workload(wl, threads)
        st._storage = wl.storage
        return st

    def connector(self, part_bytes: int):
        """The S3Checkpoint of this endpoint with parts of part_bytes (made once, its client warmed)."""
        if self._s3 is None or self._part_bytes != part_bytes:
            self._s3 = open_connector_storage(self._storage, self, part_bytes)
            warm_connector(self._s3, self._storage)
            self._part_bytes = part_bytes
        return self._s3

    def prepare_stream(self, part_bytes: int) -> None:
        """The S3Checkpoint of part_bytes parts, its native client and first connection made now."""
        self.connector(part_bytes)

    def write_stream(self, path: str, size: int, part_bytes: int, part_of, pool=None, fsync: bool = False,
                     stop: threading.Event | None = None) -> int:
        """One streamed object through S3Checkpoint.writer (the CRT uploads its parts: pool is not used)."""
        return stream_object(self.connector(part_bytes), path, size, part_bytes, part_of, self.streams, stop,
                             self.completed)

    def write_objects(self, items, part_bytes: int, part_of, pool, fsync: bool = False, direct: bool = False) -> int:
        """One S3Checkpoint writer stream per object, pool's threads one object each (never two on one);
        on a failure or an interrupt the others stop between parts, aborted."""
        s3 = self.connector(part_bytes)

        def one(j, stop):
            uri, size = items[j]
            return stream_object(s3, uri, int(size), part_bytes, lambda i: part_of(j, i), self.streams, stop,
                                 self.completed)

        return sum(run_objects(pool, one, range(len(items))))

    def completed(self, uri: str, size: int, parts: int, since: float) -> bool:
        """Whether uri is, by a HEAD, the object of a multipart upload of `parts` parts and `size` bytes that
        was started at `since` (epoch seconds) or after (2 s allowed for the server's whole-second clock): the
        upload the connector could not confirm (stream_object). Anything else is False: the upload failed."""
        from datetime import timedelta

        import botocore.exceptions as bex

        bucket, key = split_uri(uri)
        t0 = time.perf_counter_ns()
        try:
            r = self.client().head_object(Bucket=bucket, Key=key)
        except (bex.ClientError, bex.BotoCoreError):
            return False
        t1 = time.perf_counter_ns()
        self._count("head", 0, t0, t1, t1, r, uri)
        modified = r.get("LastModified")
        return (int(r["ContentLength"]) == size and str(r.get("ETag", "")).strip('"').endswith(f"-{parts}")
                and modified is not None and (modified + timedelta(seconds=2)).timestamp() >= since)

    def read_objects(self, items, part_bytes: int, pool, buffer, direct: bool = False) -> int:
        """Each object whole through the connector's unbuffered range reader into buffer(), one object a thread."""
        s3 = self.connector(part_bytes)

        def one(item, stop):
            uri, size = item
            return read_object(s3, uri, int(size), memoryview(buffer()), self.streams, stop)

        return sum(run_objects(pool, one, list(items)))

    def read_spans(self, readers, paths, offsets, lengths, buf, buf_offsets) -> int:
        """Span i (lengths[i] bytes at offsets[i] of paths[i]) into buf[buf_offsets[i]:], by a seek and one
        readinto of readers[i], an S3Reader of that object from the connector's datasets (a reader's first
        seek is a HEAD: it knows no size); each call counted (ReaderFigures). Returns the bytes."""
        from s3torchconnector import S3Exception

        mv = memoryview(buf).cast("B")
        fig, headed, total = self.readers, set(), 0
        for reader, uri, off, ln, st in zip(readers, paths, np.asarray(offsets).tolist(),
                                            np.asarray(lengths).tolist(), np.asarray(buf_offsets).tolist()):
            op = "get"
            try:
                if id(reader) not in headed:  # a fresh reader knows no size: its first seek is a HEAD
                    op = "head"
                    t0 = time.perf_counter_ns()
                    reader.seek(off)
                    fig.count("head", 0, time.perf_counter_ns() - t0)
                    headed.add(id(reader))
                    op = "get"
                else:
                    reader.seek(off)
                t0 = time.perf_counter_ns()
                got = reader.readinto(mv[st:st + ln])
                fig.count("get", got, time.perf_counter_ns() - t0)
            except S3Exception as exc:
                fig.failed(op)
                if op == "head":
                    raise reader_error(uri, exc, "HEAD") from None
                raise reader_error(uri, exc, f"GET of bytes {off}-{off + ln - 1}", off) from None
            if got != ln:
                raise DataError(uri, f"object ends before byte {off + ln} (s3torchconnector returned {got} of {ln} "
                                     "bytes); truncated?", off + got)
            total += got
        return total

    def drain(self) -> dict:
        """boto3's request figures and the connector's per-object and reader figures since the last drain."""
        return {**super().drain(), **self.streams.drain(), **self.readers.drain()}

