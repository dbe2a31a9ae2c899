"""The `s3` backend: an S3 endpoint through boto3 (put, ranged get into a caller's buffer, head, list).

    store = ObjectStore.from_workload(wl)     # checks the bucket (HEAD) before any work
    store.readinto("s3://bucket/key", offset, buf)   # one ranged GET, straight into buf
    figures = store.drain()                   # per-operation counts, bytes, latency; reset

The client is boto3 (docs/objectstore.md says why): one client per thread (botocore clients
are created per thread so no connection pool or retry state is shared between readers), the
standard retry mode, credentials from the AWS environment/config chain only. Every request is
counted: requests, bytes, retries (RetryAttempts of each response), throttling responses (HTTP
503 SlowDown, counted as they happen, retried or not) and the latency of each request to its
first byte (the response headers) and in total, in iogen's mergeable histogram
(iogen/common/histogram.py). An error left after the retries is a DataError naming the bucket, the key
and the HTTP status (exit 2).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
import threading
import time

from ..errors import ConfigError, DataError
from .keys import MAX_ATTEMPTS, SCHEME, split_uri
from .base import Capabilities, Storage
from . import requestlog
from .figures import OPS, OpStats
from .base import Generation  # datagen's completion record (MetadataGeneration, below)

# S3 refuses multipart parts under 5 MiB (except the last one).
MIN_PART_BYTES = 5 << 20
DEFAULT_PART_BYTES = 8 << 20


def part_size_bytes(block_bytes: int) -> int:
    """The smallest multiple of block_bytes of at least 5 MiB (S3's smallest part): parts of whole
    blocks (a checkpoint's transfer-size blocks, stamped as on files)."""
    t = max(1, int(block_bytes))
    return -(-MIN_PART_BYTES // t) * t




def _status(exc) -> tuple[int | None, str]:
    """(HTTP status, error code) of a botocore ClientError."""
    err = getattr(exc, "response", None) or {}
    status = (err.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return status, (err.get("Error") or {}).get("Code", "")


class ObjectStore(Storage):
    """One S3 endpoint as iogen's byte source (see the module doc)."""

    name = "s3"
    client_name = "boto3"
    no_request_log = None  # every request _count counts is logged
    noun = "object"
    folder_noun = "prefix"
    capabilities = Capabilities(local_paths=False, page_cache=False, evict=False, direct_io=False, fsync=False,
                                temp_names_visible=False, figures=frozenset({"requests"}),
                                needs=(("boto3", "storage.storage_type=s3"),),
                                tls=frozenset({"ca_bundle", "no_verify"}))

    # TLS (boto3's verify=: True, False or a CA bundle's path), the store's endpoints (storage.endpoint_urls,
    # () for one) and the key that named this one, as messages say it (iogen/storage/endpoints.py)
    _verify = True
    _endpoints: tuple = ()
    _endpoint_key = "storage.endpoint_url"

    def __init__(self, endpoint_url: str | None = None, region: str | None = None,
                 addressing_style: str = "auto", max_pool_connections: int = 16, verify=True,
                 max_attempts: int = MAX_ATTEMPTS):
        import boto3
        import botocore.config

        self.endpoint_url = endpoint_url  # None: AWS_ENDPOINT_URL / the AWS config / AWS itself
        self.region = region
        self._verify = verify
        self.max_attempts = int(max_attempts)  # storage.max_attempts: every client's tries per request
        if verify is False:  # asked for: urllib3's warning on each request says nothing new
            _quiet_unverified()
        self._boto3 = boto3
        self._config = botocore.config.Config(
            # total_max_attempts: every try, the first included (botocore's max_attempts counts retries only)
            s3={"addressing_style": addressing_style},
            retries={"mode": "standard", "total_max_attempts": self.max_attempts},
            max_pool_connections=max_pool_connections, user_agent_extra="iogen")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._stats = {op: OpStats() for op in OPS}

    @classmethod
    def from_workload(cls, wl, threads: int = 16) -> "ObjectStore":
        """The store of a workload's storage section: this rank's endpoint (endpoints.endpoint_of), its TLS."""
        from .endpoints import endpoint_list, endpoint_of, tls_verify

        st = wl.storage
        store = cls(endpoint_of(st), st.region, st.addressing_style, max_pool_connections=max(10, threads),
                    max_attempts=getattr(st, "max_attempts", MAX_ATTEMPTS))
        store._verify = tls_verify(st)
        if store._verify is False:
            _quiet_unverified()
        store._endpoints = endpoint_list(st)
        if store._endpoints:
            store._endpoint_key = "storage.endpoint_urls"
        store._addressing_style = st.addressing_style
        return store

    # -- clients ------------------------------------------------------------------------------

    def client(self):
        """This thread's client (created on first use)."""
        c = getattr(self._local, "client", None)
        if c is None:
            session = self._boto3.session.Session()  # sessions are not thread-safe: one per thread
            c = session.client("s3", endpoint_url=self.endpoint_url, region_name=self.region, config=self._config,
                               verify=self._verify)
            # first in line, so it sees every response before the retry handler decides
            c.meta.events.register_first("needs-retry.s3", self._on_retry_check)
            self._local.client = c
        return c

    def upload_part_bytes(self, transfer_bytes: int) -> int:
        """part_size_bytes: at least the store's minimum part."""
        return part_size_bytes(transfer_bytes)

    def _on_retry_check(self, response=None, operation=None, **_):
        if response is None:
            return None
        http, parsed = response
        code = ((parsed or {}).get("Error") or {}).get("Code")
        if getattr(http, "status_code", None) == 503 or code in ("SlowDown", "Throttling"):
            op = _op_of(getattr(operation, "name", ""))
            with self._lock:
                self._stats[op].throttled += 1
        return None  # let the retry handler decide

    def where(self) -> str:
        """The endpoint, as messages name it."""
        return self.endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or "the AWS default endpoint"

    # -- counting -----------------------------------------------------------------------------

    def _count(self, op: str, nbytes: int, t0: int, t_first: int, t_end: int, response, uri: str | None = None,
               offset: int = -1, length: int = -1) -> None:
        # on every request: a few additions under the lock (OpStats.note), no allocation beyond two list slots
        meta = response.get("ResponseMetadata") if response else None
        retries = int(meta.get("RetryAttempts") or 0) if meta else 0
        with self._lock:
            self._stats[op].note(int(nbytes), retries, t_first - t0, t_end - t0)
        if requestlog.ENABLED():  # output.request_log: one row per counted request
            meta = meta or {}
            hidden = response is None  # obstore's and s3dlio's data requests: no status, no retries
            first = None if hidden and "first_byte_latency" in (self.not_measured or {}) else t_first
            requestlog.record(op, uri, self.where(), t0, first, t_end, int(nbytes), offset, length,
                              meta.get("HTTPStatusCode", 0), retries, requestlog.FLAG_NO_STATUS if hidden else 0)

    def _control(self, op: str, call, **kw):
        """A multipart upload's create, complete or abort request (no data), counted under op; errors are the caller's."""
        t0 = time.perf_counter_ns()
        r = call(**kw)
        t1 = time.perf_counter_ns()
        self._count(op, 0, t0, t1, t1, r, f"{SCHEME}{kw.get('Bucket')}/{kw.get('Key')}")
        return r

    def _failed(self, op: str, uri: str, exc, what: str) -> DataError:
        # a request that failed after its retries: an error, and its retries counted as a response's are
        retries = int(((getattr(exc, "response", None) or {}).get("ResponseMetadata") or {}).get("RetryAttempts") or 0)
        with self._lock:
            self._stats[op].errors += 1
            self._stats[op].retries += retries
        if requestlog.ENABLED():  # a failed request's row: its status and retries, no latency (-1)
            requestlog.record(op, uri, self.where(), time.perf_counter_ns(), None, None, status=_status(exc)[0] or 0,
                              retries=retries, flags=requestlog.FLAG_ERROR)
        return _data_error(uri, exc, what, self.where(), self.max_attempts)

    def drain(self) -> dict:
        """Figures since the last drain, by operation (only operations that ran), then reset."""
        with self._lock:
            stats, self._stats = self._stats, {op: OpStats() for op in OPS}
        return {op: s.to_dict() for op, s in stats.items() if s.requests or s.errors}

    # -- operations ---------------------------------------------------------------------------

    def _check_client(self, timeout_s: float):
        """A client for the start-up check alone: short connect and read timeouts, few attempts."""
        import botocore.config

        config = self._config.merge(botocore.config.Config(
            connect_timeout=min(CHECK_CONNECT_S, timeout_s), read_timeout=timeout_s,
            retries={"mode": "standard", "total_max_attempts": CHECK_ATTEMPTS}))
        return self._boto3.session.Session().client("s3", endpoint_url=self.endpoint_url, region_name=self.region,
                                                     config=config, verify=self._verify)

    def check_bucket(self, bucket: str) -> None:
        """HEAD the bucket: a wrong endpoint, credentials or bucket is a ConfigError (exit 2) before any work.

        Bounded: an endpoint that accepts connections and never answers is given up after
        CHECK_ATTEMPTS tries of IOGEN_S3_CHECK_TIMEOUT_S seconds each (default 10; raise it for a
        slow gateway), with a line on stderr once the wait is noticeable, instead of botocore's
        60 s x 5 attempts in silence.
        """
        import botocore.exceptions as bex

        timeout_s = check_timeout_s()
        waiting = threading.Timer(CHECK_NOTICE_S, lambda: print(
            f"iogen: waiting for the object store at {self.where()} to answer (HEAD bucket {bucket!r}; giving up "
            f"after {CHECK_ATTEMPTS} x {timeout_s:g} s, IOGEN_S3_CHECK_TIMEOUT_S)", file=sys.stderr, flush=True))
        waiting.daemon = True
        waiting.start()
        t0 = time.perf_counter_ns()
        try:
            r = self._check_client(timeout_s).head_bucket(Bucket=bucket)
        except bex.SSLError as exc:
            raise ConfigError(f"{self._tls_key()}: TLS with the object store at {self.where()} failed ({exc}); give "
                              "the CA that signed its certificate in storage.ca_bundle (or, for a test store only, "
                              "storage.verify_tls=false)") from None
        except bex.ReadTimeoutError:
            raise ConfigError(f"{self._endpoint_key}: the object store at {self.where()} accepted the connection but "
                              f"did not answer within {timeout_s:g} s ({CHECK_ATTEMPTS} attempts); for a slow gateway "
                              "raise IOGEN_S3_CHECK_TIMEOUT_S") from None
        except bex.NoCredentialsError:
            raise ConfigError("storage.storage_type = 's3': no credentials found in the AWS environment or config "
                              "(set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)") from None
        except (bex.EndpointConnectionError, bex.ConnectTimeoutError, bex.ReadTimeoutError) as exc:
            raise ConfigError(f"{self._endpoint_key}: cannot reach the object store at {self.where()} ({exc})") from None
        except bex.ClientError as exc:
            status, code = _status(exc)
            code = "" if code == str(status) else code  # a HEAD's error has no body: botocore's code is the status
            if status == 503 or status in (500, 502, 504) or code in ("SlowDown", "Throttling"):
                raise ConfigError(f"{self._endpoint_key}: the object store at {self.where()} answered HTTP {status} "
                                  f"{code} to every attempt of the bucket check ({CHECK_ATTEMPTS} attempts): it is "
                                  "overloaded or unavailable; retry when it recovers, or leave it out of the "
                                  "endpoints".replace("  ", " ")) from None
            if not _speaks_s3(exc):  # a web server, a proxy's error page: the URL is wrong, not the bucket
                raise ConfigError(f"{self._endpoint_key}: {self.where()} answered HTTP {status} {code} with no S3 "
                                  "header (x-amz-*): it does not look like an S3 endpoint; check the URL (host, port, "
                                  f"path), and that bucket {bucket!r} exists there".replace("  ", " ")) from None
            if status == 404:
                why = "does not exist (create it first)"
            elif status in (401, 403):
                why = "refused the credentials (check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or AWS_PROFILE)"
            else:
                why = f"answered HTTP {status} {code}".rstrip()
            raise ConfigError(f"storage.storage_root: bucket {bucket!r} at {self.where()} {why}") from None
        except (bex.BotoCoreError, ValueError) as exc:
            raise ConfigError(f"storage: the object store at {self.where()} cannot be used: {exc}") from None
        finally:
            waiting.cancel()
        t1 = time.perf_counter_ns()
        self._count("head", 0, t0, t1, t1, r, f"{SCHEME}{bucket}")

    def _tls_key(self) -> str:
        """The key a TLS failure names: storage.ca_bundle when one is given, else storage.verify_tls."""
        return "storage.ca_bundle" if isinstance(self._verify, str) else "storage.verify_tls"

    def check_endpoints(self, bucket: str) -> None:
        """HEAD the bucket at every other endpoint of storage.endpoint_urls, once per run (endpoints.check_once):
        one down among several is a ConfigError naming it, before any work. Those HEADs are counted per endpoint
        (endpoints.other_endpoint_checks), not in this store's figures: they are not this rank's endpoint's."""
        from .endpoints import check_once

        for url in self._endpoints:
            if url == self.endpoint_url:
                continue

            def head(url=url):
                other = ObjectStore(url, self.region, getattr(self, "_addressing_style", "auto"),
                                    max_pool_connections=1, verify=self._verify, max_attempts=self.max_attempts)
                other._endpoint_key = self._endpoint_key
                other.check_bucket(bucket)
                return sum(d["requests"] for d in other.drain().values())

            check_once(url, bucket, head)

    def head(self, uri: str) -> tuple[int, dict] | None:
        """(size in bytes, user metadata) of the object, or None when it does not exist."""
        import botocore.exceptions as bex

        bucket, key = split_uri(uri)
        t0 = time.perf_counter_ns()
        try:
            r = self.client().head_object(Bucket=bucket, Key=key)
        except bex.ClientError as exc:
            if _status(exc)[0] == 404:
                t1 = time.perf_counter_ns()
                self._count("head", 0, t0, t1, t1, getattr(exc, "response", None), uri)
                return None
            raise self._failed("head", uri, exc, "HEAD") from None
        except bex.BotoCoreError as exc:
            raise self._failed("head", uri, exc, "HEAD") from None
        t1 = time.perf_counter_ns()
        self._count("head", 0, t0, t1, t1, r, uri)
        return int(r["ContentLength"]), dict(r.get("Metadata") or {})

    def list(self, uri_prefix: str) -> dict[str, int]:
        """{URI: size} of every object whose key starts with the prefix (a folder: end it with '/')."""
        import botocore.exceptions as bex

        bucket, prefix = split_uri(uri_prefix)
        out = {}
        token = None
        while True:
            kw = {"Bucket": bucket, "Prefix": prefix}
            if token:
                kw["ContinuationToken"] = token
            t0 = time.perf_counter_ns()
            try:
                r = self.client().list_objects_v2(**kw)
            except (bex.ClientError, bex.BotoCoreError) as exc:
                raise self._failed("list", uri_prefix, exc, "LIST") from None
            t1 = time.perf_counter_ns()
            self._count("list", 0, t0, t1, t1, r, uri_prefix)
            for item in r.get("Contents", ()):
                out[f"{SCHEME}{bucket}/{item['Key']}"] = int(item["Size"])
            token = r.get("NextContinuationToken")
            if not r.get("IsTruncated") or not token:
                return out

    def put_bytes(self, uri: str, data: bytes, metadata: dict | None = None) -> None:
        """One PUT of an object held in memory (a manifest, a small data file)."""
        import botocore.exceptions as bex

        bucket, key = split_uri(uri)
        t0 = time.perf_counter_ns()
        try:
            r = self.client().put_object(Bucket=bucket, Key=key, Body=data, Metadata=metadata or {})
        except (bex.ClientError, bex.BotoCoreError) as exc:
            raise self._failed("put", uri, exc, "PUT") from None
        t1 = time.perf_counter_ns()
        self._count("put", len(data), t0, t1, t1, r, uri)

    def put_file(self, uri: str, path: str, part_bytes: int = DEFAULT_PART_BYTES, metadata: dict | None = None) -> int:
        """Upload a local file: one PUT, or a multipart upload of part_bytes parts when larger; return its size."""
        import botocore.exceptions as bex

        size = os.stat(path).st_size
        part_bytes = max(MIN_PART_BYTES, int(part_bytes))
        if size <= part_bytes:
            with open(path, "rb") as f:
                self.put_bytes(uri, f.read(), metadata)
            return size
        bucket, key = split_uri(uri)
        c = self.client()
        try:
            upload = self._control("create_multipart", c.create_multipart_upload, Bucket=bucket, Key=key,
                                   Metadata=metadata or {})["UploadId"]
        except (bex.ClientError, bex.BotoCoreError) as exc:
            raise self._failed("create_multipart", uri, exc, "multipart upload start") from None
        try:
            parts = []
            with open(path, "rb") as f:
                for number in range(1, -(-size // part_bytes) + 1):
                    data = f.read(part_bytes)
                    t0 = time.perf_counter_ns()
                    r = c.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=data)
                    t1 = time.perf_counter_ns()
                    self._count("put", len(data), t0, t1, t1, r, uri)
                    parts.append({"ETag": r["ETag"], "PartNumber": number})
            self._control("complete_multipart", c.complete_multipart_upload, Bucket=bucket, Key=key, UploadId=upload,
                          MultipartUpload={"Parts": parts})
        except BaseException as exc:
            self._abandon(c, uri, upload, exc)
            raise
        return size

    def _abandon(self, c, uri: str, upload: str, exc: BaseException) -> None:
        """A multipart upload failed: abort it (no partial object appears under the key) and raise
        the client's error as exit 2 naming the key; other exceptions are the caller's to re-raise."""
        import botocore.exceptions as bex

        bucket, key = split_uri(uri)
        try:
            self._control("abort_multipart", c.abort_multipart_upload, Bucket=bucket, Key=key, UploadId=upload)
        except Exception:
            pass
        if isinstance(exc, (bex.ClientError, bex.BotoCoreError)):
            raise self._failed("put", uri, exc, "multipart upload") from None

    def put_parts(self, uri: str, size: int, part_bytes: int, part_of, pool) -> None:
        """Upload size bytes as one object: part i's bytes from part_of(i) (a buffer, called in a pool
        thread), parts uploaded concurrently on pool; one PUT when it fits in one part. A failed
        upload is aborted: no partial object appears under the key."""
        import botocore.exceptions as bex

        bucket, key = split_uri(uri)
        nparts = max(1, -(-size // part_bytes))
        if nparts == 1:
            self.put_bytes(uri, bytes(memoryview(part_of(0))[:size]))
            return
        c = self.client()
        try:
            upload = self._control("create_multipart", c.create_multipart_upload, Bucket=bucket, Key=key)["UploadId"]
        except (bex.ClientError, bex.BotoCoreError) as exc:
            raise self._failed("create_multipart", uri, exc, "multipart upload start") from None

        def one(i: int) -> dict:
            # botocore takes bytes or a file, not a buffer: one copy per part
            data = bytes(memoryview(part_of(i))[:min(part_bytes, size - i * part_bytes)])
            t0 = time.perf_counter_ns()
            r = self.client().upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=i + 1, Body=data)
            t1 = time.perf_counter_ns()
            self._count("put", len(data), t0, t1, t1, r, uri)
            return {"ETag": r["ETag"], "PartNumber": i + 1}

        try:
            parts = list(pool.map(one, range(nparts)))
            self._control("complete_multipart", c.complete_multipart_upload, Bucket=bucket, Key=key, UploadId=upload,
                          MultipartUpload={"Parts": parts})
        except BaseException as exc:
            self._abandon(c, uri, upload, exc)
            raise

    def put_objects(self, items, part_bytes: int, part_of, pool) -> None:
        """Upload several objects at once: items [(uri, size)]; part i of object j is part_of(j, i)
        (its bytes, made in a pool thread). Every part of every object is one task on pool, so the
        pool's threads keep that many PUTs in flight across objects; an object over one part is a
        multipart upload, one that fits is one PUT. A failure or an interrupt aborts every
        unfinished upload: no partial object appears under a final key."""
        import botocore.exceptions as bex

        nparts = [max(1, -(-int(size) // part_bytes)) for _, size in items]
        c = self.client()
        uploads = {}  # j -> UploadId

        def failed(uri, exc, what, op="put"):
            return self._failed(op, uri, exc, what) if isinstance(exc, (bex.ClientError, bex.BotoCoreError)) else exc

        def one(task):
            j, i = task
            uri, size = items[j]
            data = part_of(j, i)
            if nparts[j] == 1:
                self.put_bytes(uri, data)
                return None
            bucket, key = split_uri(uri)
            t0 = time.perf_counter_ns()
            try:
                r = self.client().upload_part(Bucket=bucket, Key=key, UploadId=uploads[j], PartNumber=i + 1, Body=data)
            except (bex.ClientError, bex.BotoCoreError) as exc:
                raise failed(uri, exc, f"PUT of part {i + 1} of {nparts[j]}") from None
            t1 = time.perf_counter_ns()
            self._count("put", len(data), t0, t1, t1, r, uri)
            return {"ETag": r["ETag"], "PartNumber": i + 1}

        try:
            for j, (uri, _) in enumerate(items):
                if nparts[j] > 1:
                    bucket, key = split_uri(uri)
                    try:
                        uploads[j] = self._control("create_multipart", c.create_multipart_upload, Bucket=bucket,
                                                   Key=key)["UploadId"]
                    except (bex.ClientError, bex.BotoCoreError) as exc:
                        raise failed(uri, exc, "multipart upload start", "create_multipart") from None
            tasks = [(j, i) for j in range(len(items)) for i in range(nparts[j])]
            parts: dict[int, list] = {}
            for (j, _), part in zip(tasks, pool.map(one, tasks)):  # leaving early cancels the queued parts
                if part is not None:
                    parts.setdefault(j, []).append(part)
            for j in list(uploads):
                uri = items[j][0]
                bucket, key = split_uri(uri)
                try:
                    self._control("complete_multipart", c.complete_multipart_upload, Bucket=bucket, Key=key,
                                  UploadId=uploads[j], MultipartUpload={"Parts": parts[j]})
                except (bex.ClientError, bex.BotoCoreError) as exc:
                    raise failed(uri, exc, "multipart upload completion", "complete_multipart") from None
                del uploads[j]
        finally:
            for j, upload in uploads.items():  # unfinished: dropped, nothing under the final key
                bucket, key = split_uri(items[j][0])
                try:
                    self._control("abort_multipart", c.abort_multipart_upload, Bucket=bucket, Key=key, UploadId=upload)
                except Exception:
                    pass

    def delete(self, uri: str) -> None:
        """DELETE an object (absent is fine)."""
        import botocore.exceptions as bex

        bucket, key = split_uri(uri)
        t0 = time.perf_counter_ns()
        try:
            r = self.client().delete_object(Bucket=bucket, Key=key)
        except (bex.ClientError, bex.BotoCoreError) as exc:
            raise self._failed("delete", uri, exc, "DELETE") from None
        t1 = time.perf_counter_ns()
        self._count("delete", 0, t0, t1, t1, r, uri)

    def readinto(self, uri: str, offset: int, buf) -> int:
        """One ranged GET of len(buf) bytes at offset, read straight into buf (a writable buffer); return the bytes."""
        return self.read_range(uri, offset, buf)[0]

    def read_range(self, uri: str, offset: int, buf) -> tuple[int, int | None]:
        """readinto, and the object's whole size from the response's Content-Range (None if not given)."""
        import botocore.exceptions as bex
        from urllib3.exceptions import HTTPError

        mv = memoryview(buf).cast("B")
        length = mv.nbytes
        if length == 0:
            return 0, None
        bucket, key = split_uri(uri)
        t0 = time.perf_counter_ns()
        try:
            r = self.client().get_object(Bucket=bucket, Key=key, Range=f"bytes={offset}-{offset + length - 1}")
            t_first = time.perf_counter_ns()
            if int(r.get("ContentLength", -1)) > length:  # the range was ignored: these bytes are not ours
                r["Body"].close()
                raise DataError(uri, f"the server answered a ranged GET of {length} bytes with "
                                     f"{r.get('ContentLength')} bytes (no range support?)", offset=offset)
            got = _read_body(r["Body"], mv)
        except (bex.ClientError, bex.BotoCoreError, HTTPError) as exc:  # HTTPError: urllib3's, reading the body
            status = _status(exc)[0]
            if status == 416:  # the range starts past the end
                raise DataError(uri, f"object ends before byte {offset} (HTTP 416); truncated?", offset=offset) from None
            raise self._failed("get", uri, exc, f"GET of bytes {offset}-{offset + length - 1}") from None
        t_end = time.perf_counter_ns()
        self._count("get", got, t0, t_first, t_end, r, uri, offset, length)
        if got != length:
            raise DataError(uri, f"object ends before byte {offset + length} (a ranged GET returned {got} of "
                                 f"{length} bytes); truncated?", offset=offset + got)
        total = str(r.get("ContentRange") or "").rpartition("/")[2]
        return got, int(total) if total.isdigit() else None

    def get_chunks(self, uri: str, chunk_bytes: int = 1 << 20):
        """The whole object, streamed in chunks (for checksums); one GET."""
        import botocore.exceptions as bex

        bucket, key = split_uri(uri)
        t0 = time.perf_counter_ns()
        total = 0
        try:
            r = self.client().get_object(Bucket=bucket, Key=key)
            t_first = time.perf_counter_ns()
            body = r["Body"]
            while True:
                data = body.read(chunk_bytes)
                if not data:
                    break
                total += len(data)
                yield data
        except (bex.ClientError, bex.BotoCoreError) as exc:
            raise self._failed("get", uri, exc, "GET") from None
        t_end = time.perf_counter_ns()
        self._count("get", total, t0, t_first, t_end, r, uri)

    def crc32c(self, uri: str) -> int:
        """The object's CRC-32C, computed as one GET streams it (get_chunks)."""
        from ..common.checksum import crc32c

        crc = 0
        for chunk in self.get_chunks(uri):
            crc = crc32c(chunk, crc)
        return crc

    def get_bytes(self, uri: str) -> bytes | None:
        """A small object's bytes (a manifest), or None when it does not exist."""
        import botocore.exceptions as bex

        try:
            return b"".join(self.get_chunks(uri))
        except DataError as exc:
            if isinstance(exc.__context__, bex.ClientError) and _status(exc.__context__)[0] == 404:
                return None
            raise


    # -- the Storage interface over the operations above ----------------------------------------

    def prepare_thread(self) -> None:
        """This thread's boto3 client, made now (a client costs ~0.1 s)."""
        self.client()

    def check(self, wl) -> None:
        """HEAD the workload's bucket (check_bucket)."""
        from .keys import root_parts

        bucket = root_parts(wl.storage.storage_root)[0]
        self.check_bucket(bucket)
        self.check_endpoints(bucket)

    @classmethod
    def data_folder(cls, wl) -> str:
        """s3://bucket/prefix/data_folder: the layout's paths are object URIs."""
        from .keys import data_uri

        return data_uri(wl)

    @classmethod
    def checkpoint_folder(cls, wl) -> str:
        """s3://bucket/prefix/checkpoint_folder."""
        from .keys import folder_uri

        return folder_uri(wl.storage.storage_root, wl.checkpoint.checkpoint_folder)

    def stat(self, path: str) -> int | None:
        """The object's size (one HEAD), or None when it does not exist."""
        found = self.head(path)
        return None if found is None else found[0]

    def open(self, path: str, size: int | None = None):
        """The object as a seekable file whose reads are ranged GETs (iogen/storage/objectfile.py)."""
        from .objectfile import ObjectFile

        if size is None:
            size = self.stat(path)
            if size is None:
                raise DataError(path, "the object does not exist (HTTP 404)")
        return ObjectFile(self, path, size)

    def publish(self, path: str, data, fsync: bool = False, what: str = "") -> None:
        """One PUT: the object appears whole when the request completes (fsync has no meaning here)."""
        self.put_bytes(path, bytes(memoryview(data).cast("B")))

    def write_stream(self, path: str, size: int, part_bytes: int, part_of, pool, fsync: bool = False) -> int:
        """A multipart upload of part_bytes parts (put_parts); aborted on failure."""
        self.put_parts(path, size, max(MIN_PART_BYTES, int(part_bytes)), part_of, pool)
        return size

    def write_objects(self, items, part_bytes: int, part_of, pool, fsync: bool = False, direct: bool = False) -> int:
        """put_objects: every part of every object one task on pool (threads keep that many PUTs in flight)."""
        self.put_objects([(uri, int(size)) for uri, size in items], part_bytes,
                         lambda j, i: bytes(memoryview(part_of(j, i))), pool)  # botocore takes bytes: one copy a part
        return sum(int(size) for _, size in items)

    def copy_in(self, path: str, local_path: str) -> int:
        """Download the object into local_path (temporary name, renamed once complete)."""
        from ..common.atomic import replacing

        total = 0
        with replacing(local_path) as tmp, open(tmp, "wb") as f:
            for chunk in self.get_chunks(path):
                f.write(chunk)
                total += len(chunk)
        return total

    def copy_out(self, local_path: str, path: str, part_bytes: int = DEFAULT_PART_BYTES) -> int:
        """Upload local_path: one PUT, or a multipart upload when larger than part_bytes."""
        return self.put_file(path, local_path, part_bytes)

    def remove(self, path: str) -> None:
        self.delete(path)

    def generation(self, folder: str, params: dict, rank: int, world_size: int) -> "MetadataGeneration":
        """Completion carried by each object's user metadata (MetadataGeneration)."""
        return MetadataGeneration(self, folder, params)


S3Storage = ObjectStore


# -- generation: each object's metadata says it is complete (iogen/data/generate.py) ---------------------

META_PARAMS = "iogen-params"
META_CRC = "iogen-crc32c"
# Objects up to this size are staged in memory (memfd); larger ones in the system's temporary folder.
MEMFD_MAX_BYTES = 256 << 20


@contextlib.contextmanager
def scratch_path(size_bytes: int, suffix: str):
    """A path for one object's bytes while they are written or indexed, removed on exit.

    An anonymous memory file (/proc/self/fd/N of a memfd) when the object is small enough and
    the system has memfd, so nothing is written outside the data and output folders; else a
    temporary file in the system's temporary folder.
    """
    if size_bytes <= MEMFD_MAX_BYTES and hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("iogen-object", os.MFD_CLOEXEC)
        try:
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, tmp = tempfile.mkstemp(prefix="iogen-object-", suffix="." + suffix)
    os.close(fd)
    try:
        yield tmp
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def params_digest(params: dict) -> str:
    """A short digest of the generation settings, stored with each object."""
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:32]


class MetadataGeneration(Generation):
    """An object store's `Generation`: no journal beside the data (an object cannot be appended to); every
    data object carries, as user metadata, a digest of the generation settings and its CRC-32C. A rerun
    keeps an object whose metadata carries the same digest and a CRC, rewrites one of other settings,
    and refuses one without iogen's metadata (foreign data) unless --overwrite. A file held in memory is
    one PUT; a streamed one is written to scratch (scratch_path: a memfd, so nothing is written outside
    the data and output folders), then uploaded (multipart when larger than a part)."""

    def __init__(self, store: ObjectStore, folder: str, params: dict, part_bytes: int = DEFAULT_PART_BYTES):
        self.store, self.folder = store, folder
        self.digest = params_digest(params)
        self.part_bytes = part_bytes

    def marks(self, rels) -> dict[str, str | None]:
        """One HEAD per object."""
        out = {}
        for rel in rels:
            head = self.store.head(f"{self.folder}/{rel}")
            meta = head[1] if head else {}
            if meta.get(META_PARAMS) == self.digest and META_CRC in meta:
                out[rel] = meta[META_CRC]
            elif meta.get(META_PARAMS) is not None:
                out[rel] = None  # iogen's, of other settings: rewritten
        return out

    def carried(self, rels) -> dict[str, str | None]:
        """Each object's own metadata (marks: one HEAD per object)."""
        return self.marks(rels)

    def _metadata(self, crc: int) -> dict:
        from ..common.checksum import format_crc

        return {META_PARAMS: self.digest, META_CRC: format_crc(crc)}

    def publish_image(self, path, image, fsync, line, crc_at, needed_bytes, what) -> int:
        from ..common.checksum import crc32c

        if hasattr(image, "ops"):  # a recipe (Format.file_recipe): built here
            image = image.build()
        data = bytes(memoryview(image).cast("B"))
        crc = crc32c(data)
        self.store.put_bytes(path, data, metadata=self._metadata(crc))
        return crc

    def publish_written(self, path, write, needed_bytes, what, fsync) -> tuple[int, int]:
        with scratch_path(needed_bytes + (64 << 10), path.rsplit(".", 1)[-1]) as tmp:
            size, crc = write(tmp)
            self.store.put_file(path, tmp, self.part_bytes, metadata=self._metadata(crc))
        return size, crc


def _quiet_unverified() -> None:
    """Silence urllib3's InsecureRequestWarning: storage.verify_tls False asked for unverified https."""
    import warnings

    from urllib3.exceptions import InsecureRequestWarning

    warnings.filterwarnings("ignore", category=InsecureRequestWarning)


def _read_body(body, mv: memoryview) -> int:
    """Read a response body into mv; return the bytes read.

    Where the body is urllib3's response over http.client's (botocore's, unencoded, of a known
    length), http.client's readinto fills mv straight from the socket: no bytes object, no copy
    (urllib3's own readinto reads a bytes object and copies it). urllib3's error handling wraps it
    as it wraps its own reads (a socket error becomes its ProtocolError or ReadTimeoutError, the
    connection is dropped on one and back in the pool once the body is read), and its byte count
    follows. Any other body: read() and copied."""
    raw = getattr(body, "_raw_stream", None)
    fp = getattr(raw, "_fp", None)
    pos = 0
    if (fp is not None and isinstance(getattr(raw, "length_remaining", None), int) and hasattr(fp, "readinto")
            and hasattr(raw, "_error_catcher") and not getattr(fp, "chunked", True)
            and not raw.headers.get("content-encoding")):
        want = min(mv.nbytes, raw.length_remaining)
        with raw._error_catcher():
            while pos < want:
                n = fp.readinto(mv[pos:want])
                if not n:  # the connection ended inside the body: a ProtocolError, the connection dropped
                    from urllib3.exceptions import IncompleteRead

                    raise IncompleteRead(raw._fp_bytes_read + pos, want - pos)
                pos += n
        raw._fp_bytes_read += pos
        raw.length_remaining -= pos
        return pos
    if raw is not None and hasattr(raw, "readinto"):
        while pos < mv.nbytes:
            n = raw.readinto(mv[pos:])
            if not n:
                break
            pos += n
        return pos
    while pos < mv.nbytes:
        data = body.read(mv.nbytes - pos)
        if not data:
            break
        mv[pos:pos + len(data)] = data
        pos += len(data)
    return pos


def _speaks_s3(exc) -> bool:
    """Whether an error response came from an S3 server: one sends x-amz-* headers (x-amz-request-id; moto's
    x-amzn-requestid) on every answer, a web server or a proxy's error page does not. True when there were no HTTP
    headers to look at (faultfs answers from files)."""
    headers = ((getattr(exc, "response", None) or {}).get("ResponseMetadata") or {}).get("HTTPHeaders")
    if not headers:
        return True
    return any(str(k).lower().startswith("x-amz") for k in headers)


def _op_of(name: str) -> str:
    if name in ("GetObject",):
        return "get"
    if name in ("PutObject", "UploadPart"):
        return "put"
    if name.endswith("MultipartUpload"):  # CreateMultipartUpload -> create_multipart, ...
        return name[:-len("MultipartUpload")].lower() + "_multipart"
    if name.startswith("List"):
        return "list"
    if name.startswith("Delete"):
        return "delete"
    return "head"


def _data_error(uri: str, exc, what: str, endpoint: str, attempts: int = MAX_ATTEMPTS) -> DataError:
    """A DataError naming bucket, key and HTTP status (or the connection problem)."""
    status, code = _status(exc)
    if code == str(status):  # a HEAD's error has no body: botocore puts the status as its code
        code = ""
    if status == 404:
        return DataError(uri, f"{what}: the object does not exist (HTTP 404 {code})".replace(" )", ")"))
    if status is not None:  # the attempts the client made: its retries and the first
        retries = ((getattr(exc, "response", None) or {}).get("ResponseMetadata") or {}).get("RetryAttempts")
        attempts = attempts if retries is None else int(retries) + 1
        return DataError(uri, f"{what} failed after {attempts} attempt(s): HTTP {status} {code}".rstrip())
    return DataError(uri, f"{what} failed at {endpoint}: {exc}")


# The start-up check (ObjectStore.check_bucket): per-attempt timeouts, attempts, and when to say it waits.
CHECK_CONNECT_S, CHECK_READ_S, CHECK_ATTEMPTS, CHECK_NOTICE_S = 5.0, 10.0, 2, 2.0


def check_timeout_s() -> float:
    """IOGEN_S3_CHECK_TIMEOUT_S (seconds per attempt of the start-up check), default CHECK_READ_S."""
    raw = os.environ.get("IOGEN_S3_CHECK_TIMEOUT_S")
    if raw is None:
        return CHECK_READ_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 3600:
        raise ConfigError(f"IOGEN_S3_CHECK_TIMEOUT_S = {raw!r}: give the seconds each attempt of the object store's "
                          "start-up check may wait, > 0 and at most 3600")
    return value


def open_store(wl, threads: int = 16) -> ObjectStore:
    """The workload's object store, its bucket checked (HEAD): exit 2 before any work when it cannot be used."""
    store = ObjectStore.from_workload(wl, threads)
    store.check(wl)
    return store



class DataClientStore(ObjectStore):
    """An ObjectStore whose data GETs and PUTs go through another client (obstore, s3dlio) while
    boto3 keeps the control plane (bucket check, HEAD, LIST, DELETE, metadata PUTs): what such
    backends share. A subclass names its client and reads an S3 error out of its messages."""

    client_name = "?"

    @staticmethod
    def detail(exc: BaseException) -> str:
        """The S3 error in the client's exception, in a few words."""
        return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__

    def _error(self, op: str, uri: str, exc: BaseException, what: str) -> DataError:
        with self._lock:
            self._stats[op].errors += 1
        if requestlog.ENABLED():  # the client reports no status: a failed request's row, its status 0
            requestlog.record(op, uri, self.where(), time.perf_counter_ns(), None, None,
                              flags=requestlog.FLAG_ERROR | requestlog.FLAG_NO_STATUS)
        return DataError(uri, f"{what} through {self.client_name} failed: {self.detail(exc)} (endpoint {self.where()})")

    def get_range(self, uri: str, offset: int, length: int) -> tuple[memoryview, int | None]:
        """One ranged GET through the client, counted: (the bytes, in the client's own buffer; the object's
        size or None); a short answer is a DataError naming the object. Each subclass's."""
        raise NotImplementedError

    def read_range(self, uri: str, offset: int, buf) -> tuple[int, int | None]:
        """One ranged GET through the client into buf (one copy: the client hands over its own buffer)."""
        mv = memoryview(buf).cast("B")
        if mv.nbytes == 0:
            return 0, None
        data, total = self.get_range(uri, offset, mv.nbytes)
        mv[:data.nbytes] = data
        return data.nbytes, total

    def read_objects(self, items, part_bytes: int, pool, buffer, direct: bool = False) -> int:
        """Several objects whole, part_bytes at a time, each part one ranged GET whose bytes stay in the
        buffer the client received them in (get_range): a restore ends with the bytes in memory, as a
        framework's load does, without a copy into iogen's buffer (boto3's path reads into it instead:
        readinto). A missing or short object is a DataError naming it. Returns the bytes read."""
        tasks = [(path, off, min(part_bytes, int(size) - off)) for path, size in items
                 for off in range(0, int(size), part_bytes)]
        return sum(pool.map(lambda t: self.get_range(*t)[0].nbytes, tasks))

    def get_bytes(self, uri: str) -> bytes | None:
        """A small object's bytes (a manifest), or None when it does not exist."""
        try:
            return b"".join(self.get_chunks(uri))
        except DataError as exc:
            if "(HTTP 404)" in str(exc):
                with self._lock:  # an absent manifest is an answer, not an error
                    self._stats["get"].errors -= 1
                return None
            raise
