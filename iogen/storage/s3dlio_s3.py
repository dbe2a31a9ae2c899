"""The `s3dlio` backend: the same S3 endpoint, its data transfers through s3dlio (Rust, the AWS SDK for
Rust), the client MLPerf Storage v3.0's DLIO fork reads with.

    storage.storage_type: s3
    storage.s3_client: s3dlio           # pip install s3dlio

What goes through s3dlio: every GET of data (`s3dlio.get_range` for ranged reads, `s3dlio.get` for
whole objects) and every PUT (`s3dlio.put_bytes`; an object over one part through its
`MultipartUploadWriter`, aborted on failure). The bucket check, HEAD, LIST and DELETE are the `s3`
backend's boto3 client, counted as requests as there.

s3dlio's S3 client is one per process, made on its first request and never reconfigured
(`s3dlio.configure_s3`'s contract): iogen configures it with the endpoint and region boto3
resolved, and a second endpoint in the same process is a ConfigError naming both. Credentials
are the AWS SDK's own chain (the same AWS_* variables and profile files as boto3's).

Figures (docs/objectstore.md): s3dlio returns a range or an object whole, and reports neither its
retries nor the status of the answers it retried: each GET or single PUT counts as one request
with its bytes and total latency; `first_byte_latency`, `retries` and `throttled_503` are null with
the reason (`not_measured`). A multipart upload's part requests are s3dlio's own: measured per
object (`put_object_stream`). Objects written with user metadata (datagen's data objects) go
through boto3: s3dlio's put sends none.
"""
from __future__ import annotations

import re
import threading
import time
from urllib.parse import urlsplit

from ..errors import ConfigError, DataError
from .base import Capabilities
from .s3 import MIN_PART_BYTES, DataClientStore
from .s3torch import StreamFigures, run_objects

NOT_MEASURED = {
    "retries": "s3dlio retries inside the AWS SDK for Rust and does not report how often",
    "throttled_503": "s3dlio does not expose the HTTP status of the responses it retried",
    "first_byte_latency": "s3dlio's get_range returns when the whole range has arrived",
}

def _import_s3dlio():
    """s3dlio without its PyTorch datasets where PyTorch is not loaded yet: its package imports torch when
    it can (1-3 s of start-up), for datasets iogen does not use; a process that already runs PyTorch keeps
    them. `s3dlio.torch` set to None in sys.modules is the ImportError its own import falls back on."""
    import sys

    if "s3dlio" not in sys.modules and "torch" not in sys.modules and "s3dlio.torch" not in sys.modules:
        sys.modules["s3dlio.torch"] = None
        try:
            import s3dlio
        finally:
            del sys.modules["s3dlio.torch"]
        return s3dlio
    import s3dlio

    return s3dlio


_BOUND: tuple | None = None  # (endpoint, region, CA bundle) s3dlio's process-wide client was configured with
_BOUND_LOCK = threading.Lock()


def _detail(exc: BaseException) -> str:
    """The S3 error code in s3dlio's message, else its first line."""
    text = str(exc)
    code = re.search(r"service error: (\w+)", text)
    if code:
        return code.group(1)
    return text.splitlines()[0][:200] if text else type(exc).__name__


class S3dlioStorage(DataClientStore):
    """An S3 endpoint whose GETs and PUTs go through s3dlio (see the module doc)."""

    name = "s3dlio"
    client_name = "s3dlio"
    detail = staticmethod(_detail)
    not_measured = NOT_MEASURED
    capabilities = Capabilities(local_paths=False, page_cache=False, evict=False, direct_io=False, fsync=False,
                                temp_names_visible=False, figures=frozenset({"requests"}),
                                needs=(("boto3", "storage.storage_type=s3"), ("s3dlio", "storage.s3_client=s3dlio")),
                                tls=frozenset({"ca_bundle"}),
                                worker_start_methods=("spawn", "forkserver"))

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.streams = StreamFigures()
        self._ready = False

    def _configured(self):
        """s3dlio, configured once per process with boto3's endpoint and region (see the module doc)."""
        global _BOUND
        s3dlio = _import_s3dlio()

        if self._ready:
            return s3dlio
        c = self.client()
        endpoint = c.meta.endpoint_url
        if (urlsplit(endpoint).hostname or "").endswith("amazonaws.com"):
            endpoint = None  # AWS itself: the SDK's own endpoint for the region
        # storage.ca_bundle (verify_tls False is refused by the config: s3dlio cannot skip verification)
        ca_bundle = self._verify if isinstance(self._verify, str) else None
        want = (endpoint, c.meta.region_name or "us-east-1", ca_bundle)
        with _BOUND_LOCK:
            if _BOUND is None:
                s3dlio.configure_s3(endpoint_url=want[0], region=want[1], ca_bundle=want[2])
                _BOUND = want
            elif _BOUND != want:
                def said(b):
                    return f"{b[0] or 'AWS'} ({b[1]}{', CA bundle ' + b[2] if b[2] else ''})"
                raise ConfigError(f"storage.s3_client=s3dlio: s3dlio's client is one per process and is bound to "
                                  f"{said(_BOUND)}; this process cannot also use {said(want)}")
        self._ready = True
        return s3dlio

    # -- reads --------------------------------------------------------------------------------

    def get_range(self, uri: str, offset: int, length: int) -> tuple[memoryview, int | None]:
        """One ranged GET through s3dlio, counted: (the bytes, in s3dlio's own buffer; None: s3dlio does not
        say the object's size); a short answer is a DataError naming the object."""
        s3dlio = self._configured()
        t0 = time.perf_counter_ns()
        try:
            data = memoryview(s3dlio.get_range(uri, offset, length)).cast("B")
        except Exception as exc:  # s3dlio raises RuntimeError with the SDK's message
            code = _detail(exc)
            if code == "InvalidRange":
                raise DataError(uri, f"object ends before byte {offset} (HTTP 416); truncated?", offset=offset) from None
            if code in ("NoSuchKey", "NotFound"):
                with self._lock:
                    self._stats["get"].errors += 1
                raise DataError(uri, "the object does not exist (HTTP 404)", offset=offset) from None
            raise self._error("get", uri, exc, f"GET of bytes {offset}-{offset + length - 1}") from None
        t1 = time.perf_counter_ns()
        got = min(data.nbytes, length)
        self._count("get", got, t0, t1, t1, None, uri, offset, length)
        if got != length:
            raise DataError(uri, f"object ends before byte {offset + length} (a ranged GET returned {got} of "
                                 f"{length} bytes); truncated?", offset=offset + got)
        return data[:got], None

    def get_chunks(self, uri: str, chunk_bytes: int = 1 << 20):
        """The whole object through one s3dlio GET (s3dlio returns it whole), handed out in chunks."""
        s3dlio = self._configured()
        t0 = time.perf_counter_ns()
        try:
            data = memoryview(s3dlio.get(uri)).cast("B")
        except Exception as exc:
            if _detail(exc) in ("NoSuchKey", "NotFound"):
                with self._lock:
                    self._stats["get"].errors += 1
                raise DataError(uri, "the object does not exist (HTTP 404)") from None
            raise self._error("get", uri, exc, "GET") from None
        t1 = time.perf_counter_ns()
        self._count("get", data.nbytes, t0, t1, t1, None, uri)
        for at in range(0, data.nbytes, chunk_bytes):
            yield bytes(data[at:at + chunk_bytes])

    # -- writes -------------------------------------------------------------------------------

    def put_bytes(self, uri: str, data, metadata: dict | None = None) -> None:
        """One PUT through s3dlio (with user metadata: boto3's, see the module doc)."""
        if metadata:
            return super().put_bytes(uri, bytes(data), metadata)
        s3dlio = self._configured()
        t0 = time.perf_counter_ns()
        try:
            s3dlio.put_bytes(uri, bytes(data))
        except Exception as exc:
            raise self._error("put", uri, exc, "PUT") from None
        t1 = time.perf_counter_ns()
        self._count("put", len(memoryview(data).cast("B")), t0, t1, t1, None, uri)
        return None

    def _multipart(self, uri: str, size: int, part_bytes: int, chunks, concurrency: int) -> None:
        """One object through s3dlio's MultipartUploadWriter (chunks: an iterator of bytes); aborted when a
        chunk or a part fails: nothing appears under the key."""
        s3dlio = self._configured()
        t0 = time.perf_counter_ns()
        writer = None
        done = False
        def call(fn, *args):  # s3dlio's errors (RuntimeError) as exit 2 naming the key; the caller's pass
            try:
                return fn(*args)
            except RuntimeError as exc:
                raise DataError(uri, f"multipart upload through s3dlio failed: {_detail(exc)} "
                                     f"(endpoint {self.where()})") from None

        try:
            writer = call(lambda: s3dlio.MultipartUploadWriter.from_uri(
                uri, part_size=part_bytes, max_in_flight=max(1, concurrency), abort_on_drop=True))
            for chunk in chunks:
                call(writer.write, chunk)
            call(writer.close)  # CompleteMultipartUpload: the object exists from here
            done = True
        finally:
            if not done:
                self.streams.record("put_object_stream", 0, 0, failed=True)
                if writer is not None:
                    try:
                        writer.abort()
                    except Exception:
                        pass
        self.streams.record("put_object_stream", size, time.perf_counter_ns() - t0)

    def put_parts(self, uri: str, size: int, part_bytes: int, part_of, pool, stop: threading.Event | None = None) -> None:
        """size bytes as one object: one PUT when it fits in one part, else s3dlio's multipart upload of
        part_of(i) for part i (copied: iogen reuses its part buffers)."""
        nparts = max(1, -(-size // part_bytes))
        if nparts == 1:
            self.put_bytes(uri, bytes(memoryview(part_of(0)).cast("B")[:size]))
            return

        def chunks():
            for i in range(nparts):
                if stop is not None and stop.is_set():
                    raise InterruptedError("another object failed or the run was interrupted")
                yield bytes(memoryview(part_of(i)).cast("B")[:min(part_bytes, size - i * part_bytes)])

        self._multipart(uri, size, part_bytes, chunks(), pool.size if pool else 4)

    def put_objects(self, items, part_bytes: int, part_of, pool) -> None:
        """One object a pool thread; on a failure or an interrupt the others stop between parts, aborted."""
        def one(j, stop):
            uri, size = items[j]
            self.put_parts(uri, int(size), part_bytes, lambda i: part_of(j, i), None, stop)

        run_objects(pool, one, range(len(items)))

    def put_file(self, uri: str, path: str, part_bytes: int = 8 << 20, metadata: dict | None = None) -> int:
        """Upload a local file: one PUT, or s3dlio's multipart upload of part_bytes parts when larger."""
        import os

        size = os.stat(path).st_size
        part_bytes = max(MIN_PART_BYTES, int(part_bytes))
        if metadata:
            return super().put_file(uri, path, part_bytes, metadata)
        if size <= part_bytes:
            with open(path, "rb") as f:
                self.put_bytes(uri, f.read())
            return size

        def chunks():
            with open(path, "rb") as f:
                while True:
                    data = f.read(part_bytes)
                    if not data:
                        return
                    yield data

        self._multipart(uri, size, part_bytes, chunks(), 4)
        return size

    def drain(self) -> dict:
        """boto3's and s3dlio's request figures, and the multipart uploads' per-object figures."""
        return {**super().drain(), **self.streams.drain()}
