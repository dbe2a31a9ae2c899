"""The `obstore` backend: the same S3 endpoint, its data transfers through obstore (Rust's object_store).

    storage.storage_type: s3
    storage.s3_client: obstore          # pip install obstore

What goes through obstore: every GET of data (ranged reads of the loaders and formats, whole-object
reads of staging, checkpoint restores, verify) and every PUT (datagen's objects and manifests,
checkpoint writes, the drain). Everything else (the bucket check, HEAD, LIST, DELETE) is the `s3`
backend's boto3 client, counted as requests as there. obstore's store is made from what boto3
resolved (endpoint, region, credentials from the same AWS chain, path or virtual addressing), with
storage.max_attempts tries per request (default 5), as boto3's.

Figures (docs/objectstore.md): obstore returns each response but not its retries or the HTTP status
of the answers it retried, so a GET or single PUT through it counts as one request with its bytes,
its latency and its first byte (obstore's `get` returns at the response headers, as boto3's), and
`retries` and `throttled_503` are null with the reason (`not_measured`). An object over one part is
obstore's multipart upload, whose part requests obstore issues itself: measured per object
(`put_object_stream`: objects, bytes, each object's time), as s3torchconnector's streams.
Objects written with user metadata (datagen's data objects carry their checksum in it) go through
boto3: obstore's S3 `put` sends no user metadata.
"""
from __future__ import annotations

import re
import threading
import time
from urllib.parse import urlsplit

from ..errors import ConfigError, DataError
from .base import Capabilities
from .keys import split_uri
from .s3 import MIN_PART_BYTES, DataClientStore
from .s3torch import StreamFigures, run_objects

NOT_MEASURED = {
    "retries": "obstore retries inside its client and does not report how often",
    "throttled_503": "obstore does not expose the HTTP status of the responses it retried",
}


def _detail(exc: BaseException) -> str:
    """The HTTP status and S3 error code in obstore's message, else its first line."""
    text = str(exc)
    status = re.search(r"status code: (\d+)", text)
    code = re.search(r"<Code>(\w+)</Code>", text)
    if status or code:
        return " ".join(x for x in ((f"HTTP {status.group(1)}" if status else ""), code.group(1) if code else "") if x)
    return text.splitlines()[0][:200] if text else type(exc).__name__


class ObstoreStorage(DataClientStore):
    """An S3 endpoint whose GETs and PUTs go through obstore (see the module doc)."""

    name = "obstore"
    client_name = "obstore"
    detail = staticmethod(_detail)
    not_measured = NOT_MEASURED
    capabilities = Capabilities(local_paths=False, page_cache=False, evict=False, direct_io=False, fsync=False,
                                temp_names_visible=False, figures=frozenset({"requests"}),
                                needs=(("boto3", "storage.storage_type=s3"), ("obstore", "storage.s3_client=obstore")),
                                tls=frozenset({"ca_bundle", "no_verify"}),
                                worker_start_methods=("spawn", "forkserver"))

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._stores: dict[str, object] = {}
        self._stores_lock = threading.Lock()
        self._addressing = "auto"
        self.streams = StreamFigures()

    @classmethod
    def from_workload(cls, wl, threads: int = 16) -> "ObstoreStorage":
        st = super().from_workload(wl, threads)
        st._addressing = wl.storage.addressing_style
        return st

    def store(self, bucket: str):
        """obstore's S3Store of a bucket, from what boto3 resolved (made once per bucket)."""
        with self._stores_lock:
            found = self._stores.get(bucket)
            if found is not None:
                return found
            from obstore.store import S3Store

            c = self.client()
            creds = c._request_signer._credentials
            if creds is None:
                raise ConfigError("storage.s3_client=obstore: no AWS credentials found (AWS_ACCESS_KEY_ID and "
                                  "AWS_SECRET_ACCESS_KEY, or a profile)")
            frozen = creds.get_frozen_credentials()
            endpoint = c.meta.endpoint_url
            aws = (urlsplit(endpoint).hostname or "").endswith("amazonaws.com")
            virtual = self._addressing == "virtual" or (self._addressing == "auto" and aws)
            kw = dict(region=c.meta.region_name or "us-east-1", access_key_id=frozen.access_key,
                      secret_access_key=frozen.secret_key, virtual_hosted_style_request=virtual,
                      client_options=self._client_options(endpoint),
                      retry_config={"max_retries": self.max_attempts - 1})
            if frozen.token:
                kw["token"] = frozen.token
            if not aws:
                kw["endpoint"] = endpoint
            found = self._stores[bucket] = S3Store(bucket, **kw)
            return found

    def _client_options(self, endpoint: str) -> dict:
        """obstore's client options: plain http where the endpoint says so, and the TLS settings
        (storage.ca_bundle: its PEM certificates added to the trusted roots; storage.verify_tls False:
        certificates not checked), as boto3's verify= has them."""
        options = {"allow_http": endpoint.startswith("http://")}
        if self._verify is False:
            options["allow_invalid_certificates"] = True
        elif isinstance(self._verify, str):
            with open(self._verify, "rb") as f:
                options["root_certificate"] = f.read()
        return options

    # -- reads --------------------------------------------------------------------------------

    def get_range(self, uri: str, offset: int, length: int) -> tuple[memoryview, int | None]:
        """One ranged GET through obstore, counted: (the bytes, in obstore's own buffer; the object's whole
        size, or None); a short answer is a DataError naming the object."""
        import obstore

        bucket, key = split_uri(uri)
        t0 = time.perf_counter_ns()
        try:
            r = obstore.get(self.store(bucket), key, options={"range": (offset, offset + length)})
            t_first = time.perf_counter_ns()
            data = memoryview(r.bytes())
        except FileNotFoundError:
            with self._lock:
                self._stats["get"].errors += 1
            raise DataError(uri, "the object does not exist (HTTP 404)", offset=offset) from None
        except Exception as exc:  # obstore's errors: obstore.exceptions.BaseError and OSError kinds
            if "status code: 416" in str(exc):
                raise DataError(uri, f"object ends before byte {offset} (HTTP 416); truncated?", offset=offset) from None
            raise self._error("get", uri, exc, f"GET of bytes {offset}-{offset + length - 1}") from None
        t_end = time.perf_counter_ns()
        got = min(len(data), length)
        self._count("get", got, t0, t_first, t_end, None, uri, offset, length)
        if got != length:
            raise DataError(uri, f"object ends before byte {offset + length} (a ranged GET returned {got} of "
                                 f"{length} bytes); truncated?", offset=offset + got)
        total = (r.meta or {}).get("size")  # the object's whole size (obstore parses Content-Range)
        return data[:got], int(total) if total is not None else None

    def get_chunks(self, uri: str, chunk_bytes: int = 1 << 20):
        """The whole object, streamed through obstore in chunks; one GET."""
        import obstore

        bucket, key = split_uri(uri)
        t0 = time.perf_counter_ns()
        total = 0
        try:
            r = obstore.get(self.store(bucket), key)
            t_first = time.perf_counter_ns()
            for chunk in r.stream(min_chunk_size=chunk_bytes):
                total += len(chunk)
                yield bytes(chunk)
        except FileNotFoundError:
            with self._lock:
                self._stats["get"].errors += 1
            raise DataError(uri, "the object does not exist (HTTP 404)") from None
        except DataError:
            raise
        except Exception as exc:
            if isinstance(exc, GeneratorExit):
                raise
            raise self._error("get", uri, exc, "GET") from None
        self._count("get", total, t0, t_first, time.perf_counter_ns(), None, uri)

    # -- writes -------------------------------------------------------------------------------

    def put_bytes(self, uri: str, data, metadata: dict | None = None) -> None:
        """One PUT through obstore (with user metadata: boto3's, see the module doc)."""
        import obstore

        if metadata:
            return super().put_bytes(uri, bytes(data), metadata)
        bucket, key = split_uri(uri)
        t0 = time.perf_counter_ns()
        try:
            obstore.put(self.store(bucket), key, data, use_multipart=False)
        except Exception as exc:
            raise self._error("put", uri, exc, "PUT") from None
        t1 = time.perf_counter_ns()
        self._count("put", len(memoryview(data).cast("B")), t0, t1, t1, None, uri)
        return None

    def _multipart(self, uri: str, size: int, part_bytes: int, chunks, concurrency: int) -> None:
        """One object through obstore's multipart upload (chunks: an iterator of buffers, or a local Path);
        obstore aborts the upload when a chunk or a part fails: nothing appears under the key."""
        import obstore

        bucket, key = split_uri(uri)
        t0 = time.perf_counter_ns()
        try:
            obstore.put(self.store(bucket), key, chunks, use_multipart=True, chunk_size=part_bytes,
                        max_concurrency=max(1, concurrency))
        except BaseException as exc:
            self.streams.record("put_object_stream", 0, 0, failed=True)
            if isinstance(exc, Exception) and type(exc).__module__.startswith("obstore"):
                raise DataError(uri, f"multipart upload through obstore failed: {_detail(exc)} "
                                     f"(endpoint {self.where()})") from None
            raise
        self.streams.record("put_object_stream", size, time.perf_counter_ns() - t0)

    def put_parts(self, uri: str, size: int, part_bytes: int, part_of, pool, stop: threading.Event | None = None) -> None:
        """size bytes as one object: one PUT when it fits in one part, else obstore's multipart upload of
        part_of(i) for part i (obstore uploads up to the pool's thread count of parts at once)."""
        nparts = max(1, -(-size // part_bytes))
        if nparts == 1:
            self.put_bytes(uri, bytes(memoryview(part_of(0))[:size]))
            return

        def chunks():
            for i in range(nparts):
                if stop is not None and stop.is_set():
                    raise InterruptedError("another object failed or the run was interrupted")
                yield bytes(memoryview(part_of(i)).cast("B")[:min(part_bytes, size - i * part_bytes)])

        self._multipart(uri, size, part_bytes, chunks(), pool.size if pool else 4)

    def put_objects(self, items, part_bytes: int, part_of, pool) -> None:
        """One object a pool thread, each a PUT or obstore's multipart upload; on a failure or an interrupt
        the others stop between parts, aborted."""
        def one(j, stop):
            uri, size = items[j]
            self.put_parts(uri, int(size), part_bytes, lambda i: part_of(j, i), None, stop)

        run_objects(pool, one, range(len(items)))

    def put_file(self, uri: str, path: str, part_bytes: int = 8 << 20, metadata: dict | None = None) -> int:
        """Upload a local file: one PUT, or obstore's multipart upload of part_bytes parts when larger."""
        import os
        from pathlib import Path

        size = os.stat(path).st_size
        part_bytes = max(MIN_PART_BYTES, int(part_bytes))
        if metadata or size <= part_bytes:
            if metadata:
                return super().put_file(uri, path, part_bytes, metadata)
            with open(path, "rb") as f:
                self.put_bytes(uri, f.read())
            return size
        self._multipart(uri, size, part_bytes, Path(path), 4)
        return size

    def drain(self) -> dict:
        """boto3's and obstore's request figures, and the multipart uploads' per-object figures."""
        return {**super().drain(), **self.streams.drain()}
