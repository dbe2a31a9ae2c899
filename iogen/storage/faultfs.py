"""The `faultfs` backend, for tests: an object store kept in a local folder, with faults injected.

    storage.storage_type: faultfs
    storage.storage_root: bucket[/prefix]              # as with s3
    storage.endpoint_url: /abs/folder (or file:///abs/folder)   # the folder that holds the buckets
    IOGEN_FAULTS="latency_ms=2,throttle_every=5,short_read_every=0,error_on=0,first_byte_ms=0,ops=get"

It is the `s3` backend (iogen/storage/s3.py: the same counting, retries, error messages and
figures) whose client, instead of boto3's HTTP client, answers the same calls from files:
`<folder>/<bucket>/<key>` for each object, its user metadata beside it under `<folder>/.faultfs/`,
multipart parts and temporary names there too (never visible in a listing). So every stage that
runs on S3 runs on it unchanged, with no server, and its faults reach the stages' retry, error and
figure paths. The state is in files, so PyTorch worker processes and MPI ranks share it: the
request counter that `throttle_every`, `short_read_every` and `error_on` count is one file under
`<folder>/.faultfs/`, incremented under an exclusive lock.

Faults (IOGEN_FAULTS, comma-separated `name=value`; absent or 0: off):
- `latency_ms`: added to every request;
- `first_byte_ms`: added before a GET's body is handed over (a slow first byte);
- `throttle_every=N`: every N-th request is first answered HTTP 503 SlowDown, then retried (counted
  as a retry and as throttled, as botocore's standard retry mode does);
- `short_read_every=N`: every N-th GET's body ends half way (a connection cut: the stage sees a
  truncated object);
- `error_on=N`: the N-th request fails with HTTP 500 InternalError on every attempt (after the
  retries: the stage's error path);
- `ops`: which requests the faults apply to (`get`, `put`, `head`, `list`, `delete`, joined by
  `+`); all unless given;
- `state`: the request counter's file (default `<folder>/.faultfs/requests`): the count runs on
  across invocations that share it, so a test that counts gives each invocation its own.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import threading
import time
import uuid
from types import SimpleNamespace

from ..errors import ConfigError
from .base import Capabilities
from .figures import OPS, OpStats
from .keys import MAX_ATTEMPTS
from .s3 import ObjectStore

ENV = "IOGEN_FAULTS"
STATE = ".faultfs"
OPS_NAMES = ("get", "put", "head", "list", "delete")
FAULTS = ("latency_ms", "first_byte_ms", "throttle_every", "short_read_every", "error_on")
_OP_OF = {"GetObject": "get", "PutObject": "put", "UploadPart": "put", "HeadObject": "head", "HeadBucket": "head",
          "ListObjectsV2": "list", "DeleteObject": "delete", "CreateMultipartUpload": "put",
          "CompleteMultipartUpload": "put", "AbortMultipartUpload": "put"}


def parse_faults(text: str | None) -> dict:
    """IOGEN_FAULTS as {name: value}; a bad entry is a ConfigError naming it."""
    out = {name: 0 for name in FAULTS}
    out["ops"] = None
    out["state"] = None
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or (name not in FAULTS and name not in ("ops", "state")):
            raise ConfigError(f"{ENV}: {item!r} is not one of {', '.join(FAULTS + ('ops', 'state'))} as name=value")
        if name == "state":
            if not os.path.isabs(value.strip()):
                raise ConfigError(f"{ENV}: {item!r}: state is an absolute file path")
            out["state"] = value.strip()
            continue
        if name == "ops":
            out["ops"] = frozenset(v for v in value.strip().split("+") if v)
            unknown = sorted(out["ops"] - set(OPS_NAMES))
            if unknown or not out["ops"]:
                raise ConfigError(f"{ENV}: {item!r}: ops are {'+'.join(OPS_NAMES)} (joined by '+')")
            continue
        try:
            out[name] = float(value) if name.endswith("_ms") else int(value)
        except ValueError:
            raise ConfigError(f"{ENV}: {item!r}: the value must be a number") from None
        if out[name] < 0:
            raise ConfigError(f"{ENV}: {item!r}: the value must be >= 0")
    return out


def _folder_of(endpoint: str | None) -> str:
    if not endpoint:
        raise ConfigError("storage.endpoint_url: storage_type faultfs keeps its objects in a local folder; set "
                          "storage.endpoint_url to that folder's absolute path")
    folder = endpoint[len("file://"):] if endpoint.startswith("file://") else endpoint
    if not os.path.isabs(folder):
        raise ConfigError(f"storage.endpoint_url = {endpoint!r}: faultfs needs an absolute folder path")
    return folder


def _client_error(status: int, code: str, operation: str, attempts: int = 0):
    import botocore.exceptions as bex

    return bex.ClientError({"Error": {"Code": code, "Message": code},
                            "ResponseMetadata": {"HTTPStatusCode": status, "RetryAttempts": attempts}}, operation)


class _Body:
    """A GET's body: the object's bytes in the range (read when the response is made), maybe cut short,
    maybe slow to start."""

    def __init__(self, path: str, offset: int, length: int, delay_s: float):
        with open(path, "rb") as f:
            f.seek(offset)
            self._data = memoryview(f.read(length))
        self._pos = 0
        self._delay_s = delay_s

    def read(self, n: int = -1) -> bytes:
        if self._delay_s:
            time.sleep(self._delay_s)
            self._delay_s = 0
        end = len(self._data) if n is None or n < 0 else min(len(self._data), self._pos + n)
        data = self._data[self._pos:end].tobytes()
        self._pos = end
        return data

    def close(self) -> None:
        self._data = memoryview(b"")


class FolderClient:
    """The subset of boto3's S3 client the `s3` backend calls, answered from a local folder (see the module doc)."""

    def __init__(self, store: "FaultStorage"):
        self.store = store
        self.root = store.folder
        self.state = os.path.join(self.root, STATE)
        self.faults = store.faults

    # -- plumbing -----------------------------------------------------------------------------

    def _next(self) -> int:
        """The number of this request among every process's requests (a file under a lock)."""
        counter = self.faults["state"] or os.path.join(self.state, "requests")
        os.makedirs(os.path.dirname(counter), exist_ok=True)
        fd = os.open(counter, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 8, 0)
            n = int.from_bytes(raw, "little") + 1 if len(raw) == 8 else 1
            os.pwrite(fd, n.to_bytes(8, "little"), 0)
            return n
        finally:
            os.close(fd)

    def _request(self, operation: str, answer):
        """One request: its faults, botocore's standard retries (503 and 500 retried), answer() for the response."""
        f = self.faults
        applies = f["ops"] is None or _OP_OF.get(operation) in f["ops"]
        n = self._next() if applies and any(f[k] for k in FAULTS if not k.endswith("_ms")) else 0
        slow_s = f["first_byte_ms"] / 1000 if applies else 0
        for attempt in range(self.store.max_attempts):
            if applies and f["latency_ms"]:
                time.sleep(f["latency_ms"] / 1000)
            status = code = None
            if n and f["error_on"] and n == f["error_on"]:
                status, code = 500, "InternalError"
            elif n and f["throttle_every"] and n % f["throttle_every"] == 0 and attempt == 0:
                status, code = 503, "SlowDown"
            if status is None:
                r = answer(n, slow_s)
                r.setdefault("ResponseMetadata", {})["RetryAttempts"] = attempt
                r["ResponseMetadata"].setdefault("HTTPStatusCode", 200)
                return r
            # what the `s3` backend's first-in-line retry hook sees of a response
            self.store._on_retry_check(response=(SimpleNamespace(status_code=status), {"Error": {"Code": code}}),
                                       operation=SimpleNamespace(name=operation))
        raise _client_error(status, code, operation, self.store.max_attempts - 1)

    def _path(self, bucket: str, key: str = "") -> str:
        if not bucket or "/" in bucket or bucket in (".", "..", STATE) or ".." in key.split("/"):
            raise _client_error(400, "InvalidRequest", "Path")
        return os.path.join(self.root, bucket, key) if key else os.path.join(self.root, bucket)

    def _meta_path(self, bucket: str, key: str) -> str:
        return os.path.join(self.state, "meta", bucket, key + ".json")

    def _exists(self, bucket: str, key: str, operation: str) -> str:
        if not os.path.isdir(self._path(bucket)):
            raise _client_error(404, "NoSuchBucket", operation)
        path = self._path(bucket, key)
        if not os.path.isfile(path):
            raise _client_error(404, "NoSuchKey" if operation == "GetObject" else "404", operation)
        return path

    def _publish(self, bucket: str, key: str, write, metadata) -> None:
        """Write an object under a temporary name outside the bucket, then rename it into place."""
        if not os.path.isdir(self._path(bucket)):
            raise _client_error(404, "NoSuchBucket", "PutObject")
        final = self._path(bucket, key)
        tmp_dir = os.path.join(self.state, "tmp")
        os.makedirs(tmp_dir, exist_ok=True)
        tmp = os.path.join(tmp_dir, uuid.uuid4().hex)
        try:
            with open(tmp, "wb") as f:
                write(f)
            meta = self._meta_path(bucket, key)
            os.makedirs(os.path.dirname(meta), exist_ok=True)
            with open(meta + ".tmp", "w") as m:
                json.dump(dict(metadata or {}), m)
            os.replace(meta + ".tmp", meta)
            os.makedirs(os.path.dirname(final), exist_ok=True)
            os.replace(tmp, final)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    # -- the calls ----------------------------------------------------------------------------

    def head_bucket(self, Bucket):
        def answer(*_):
            if not os.path.isdir(self._path(Bucket)):
                raise _client_error(404, "404", "HeadBucket")
            return {}
        return self._request("HeadBucket", answer)

    def head_object(self, Bucket, Key):
        def answer(*_):
            path = self._exists(Bucket, Key, "HeadObject")
            try:
                with open(self._meta_path(Bucket, Key)) as m:
                    meta = json.load(m)
            except FileNotFoundError:
                meta = {}
            return {"ContentLength": os.path.getsize(path), "Metadata": meta}
        return self._request("HeadObject", answer)

    def list_objects_v2(self, Bucket, Prefix="", ContinuationToken=None):
        def answer(*_):
            base = self._path(Bucket)
            if not os.path.isdir(base):
                raise _client_error(404, "NoSuchBucket", "ListObjectsV2")
            contents = []
            for root, _dirs, files in os.walk(base):
                for name in files:
                    key = os.path.relpath(os.path.join(root, name), base).replace(os.sep, "/")
                    if key.startswith(Prefix):
                        contents.append({"Key": key, "Size": os.path.getsize(os.path.join(root, name))})
            return {"Contents": sorted(contents, key=lambda c: c["Key"]), "IsTruncated": False}
        return self._request("ListObjectsV2", answer)

    def put_object(self, Bucket, Key, Body, Metadata=None):
        data = Body if isinstance(Body, (bytes, bytearray, memoryview)) else Body.read()
        return self._request("PutObject", lambda *_: self._publish(Bucket, Key, lambda f: f.write(data), Metadata)
                             or {"ETag": '"%s"' % uuid.uuid4().hex})

    def create_multipart_upload(self, Bucket, Key, Metadata=None):
        def answer(*_):
            upload = uuid.uuid4().hex
            folder = os.path.join(self.state, "uploads", upload)
            os.makedirs(folder)
            with open(os.path.join(folder, "meta.json"), "w") as m:
                json.dump(dict(Metadata or {}), m)
            return {"UploadId": upload}
        return self._request("CreateMultipartUpload", answer)

    def upload_part(self, Bucket, Key, UploadId, PartNumber, Body):
        data = Body if isinstance(Body, (bytes, bytearray, memoryview)) else Body.read()

        def answer(*_):
            folder = os.path.join(self.state, "uploads", UploadId)
            if not os.path.isdir(folder):
                raise _client_error(404, "NoSuchUpload", "UploadPart")
            with open(os.path.join(folder, f"{int(PartNumber):05d}"), "wb") as f:
                f.write(data)
            return {"ETag": f'"{UploadId}-{PartNumber}"'}
        return self._request("UploadPart", answer)

    def complete_multipart_upload(self, Bucket, Key, UploadId, MultipartUpload):
        def answer(*_):
            folder = os.path.join(self.state, "uploads", UploadId)
            with open(os.path.join(folder, "meta.json")) as m:
                meta = json.load(m)

            def write(f):
                for part in MultipartUpload["Parts"]:
                    with open(os.path.join(folder, f"{int(part['PartNumber']):05d}"), "rb") as p:
                        shutil.copyfileobj(p, f)
            self._publish(Bucket, Key, write, meta)
            shutil.rmtree(folder, ignore_errors=True)
            return {}
        return self._request("CompleteMultipartUpload", answer)

    def abort_multipart_upload(self, Bucket, Key, UploadId):
        def answer(*_):
            shutil.rmtree(os.path.join(self.state, "uploads", UploadId), ignore_errors=True)
            return {}
        return self._request("AbortMultipartUpload", answer)

    def delete_object(self, Bucket, Key):
        def answer(*_):
            for p in (self._path(Bucket, Key), self._meta_path(Bucket, Key)):
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
            return {}
        return self._request("DeleteObject", answer)

    def get_object(self, Bucket, Key, Range=None):
        def answer(n, slow_s):
            path = self._exists(Bucket, Key, "GetObject")
            size = os.path.getsize(path)
            start, end = 0, size - 1
            if Range:
                a, _, b = Range[len("bytes="):].partition("-")
                start, end = int(a), min(int(b), size - 1)
                if start >= size:
                    raise _client_error(416, "InvalidRange", "GetObject")
            length = max(0, end - start + 1)
            f = self.faults
            cut = length // 2 if n and f["short_read_every"] and n % f["short_read_every"] == 0 else length
            r = {"Body": _Body(path, start, cut, slow_s),
                 "ContentLength": length}
            if Range:
                r["ContentRange"] = f"bytes {start}-{end}/{size}"
            return r
        return self._request("GetObject", answer)


class FaultStorage(ObjectStore):
    """The `s3` backend over a FolderClient (see the module doc)."""

    name = "faultfs"
    client_name = "faultfs"
    capabilities = Capabilities(local_paths=False, page_cache=False, evict=False, direct_io=False, fsync=False,
                                temp_names_visible=False, figures=frozenset({"requests"}),
                                needs=(("botocore", "storage.storage_type=faultfs"),))

    def __init__(self, endpoint_url: str | None = None, region: str | None = None,
                 addressing_style: str = "auto", max_pool_connections: int = 16, max_attempts: int = MAX_ATTEMPTS):
        self.endpoint_url = endpoint_url
        self.region = region
        self.max_attempts = int(max_attempts)
        self.folder = _folder_of(endpoint_url)
        self.faults = parse_faults(os.environ.get(ENV))
        self._local = threading.local()
        self._lock = threading.Lock()
        self._stats = {op: OpStats() for op in OPS}

    def client(self):
        c = getattr(self._local, "client", None)
        if c is None:
            c = self._local.client = FolderClient(self)
        return c

    def _check_client(self, timeout_s: float):
        """The start-up check's client: the folder's (no connection to bound)."""
        return self.client()

    def where(self) -> str:
        return f"the faultfs folder {self.folder}"

    def check(self, wl) -> None:
        """The folder must exist (the bucket is checked as on S3: a HEAD)."""
        if not os.path.isdir(self.folder):
            raise ConfigError(f"storage.endpoint_url: faultfs folder {self.folder} does not exist (create it first)")
        super().check(wl)

