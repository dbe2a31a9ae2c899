"""The request log (`output.request_log: true`): one fixed-width record per object-store request, per process.

    requestlog.start(rank)          # a run begins: this process's requests are buffered from now on
    requestlog.attach(run_dir)      # the run folder exists: the buffer goes to requests/rank-R.reqs
    requestlog.record(...)          # ObjectStore._count / its error path, for every request
    requestlog.stop()               # the run ends (cleanly or not): flushed and closed
    header, strings, rows = read_request_log(path)

Every request an ObjectStore counts (boto3's, and obstore's and s3dlio's data requests through the
same `_count`) is one REQ_DTYPE row, plus one row per request that failed after its retries. Keys
and endpoints are interned: a row holds an index into the file's string table, whose new entries
are written just before the rows that first use them. Rows are buffered (REQ_FLUSH_ROWS, or 1 s)
and written by one os.write per block, so the request path never waits for a disk. A PyTorch
DataLoader worker process that issues requests writes its own file (rank-R-pid-P.reqs), found
through IOGEN_REQUEST_LOG, which attach() sets for the run; it is flushed when the worker exits.

File layout (little-endian; docs/objectstore.md describes it for other tools):

    bytes 0..7    magic b"IOGREQS1"
    bytes 8..11   uint32 version (1); 12..15 uint32 header_bytes
    then          a JSON header (rank, pid, dtype as numpy descr), space-padded to 64 bytes
    then blocks   each: 4-byte tag, uint32 count, uint64 payload bytes, payload
                  b"STRS": count new strings, a JSON list (ids continue the earlier blocks')
                  b"RECS": count rows of REQ_DTYPE
"""
from __future__ import annotations

import json
import os
import struct
import threading
import time

import numpy as np

from ..errors import DataError
from .figures import OPS  # the op codes: get, put, head, list, delete, the multipart controls

MAGIC = b"IOGREQS1"
VERSION = 1
ENV = "IOGEN_REQUEST_LOG"  # the run folder, for DataLoader workers' logs
OP_CODE = {op: i for i, op in enumerate(OPS)}
FLAG_ERROR = 1  # the request failed after its retries (status: its HTTP status, 0 if none came)
FLAG_NO_STATUS = 2  # the client does not report the HTTP status of a success (obstore, s3dlio)

REQ_DTYPE = np.dtype([
    ("t_start_ns", "<i8"),  # wall clock (time.time_ns scale) when the request was sent
    ("latency_ns", "<i8"),  # to the end of the response (its body read)
    ("first_byte_ns", "<i8"),  # to the response headers; -1 where the client does not expose it
    ("offset", "<i8"),  # ranged GET: its first byte; -1 for a whole object or no data
    ("length", "<i8"),  # ranged GET: the bytes asked for; -1 otherwise
    ("bytes", "<i8"),  # bytes transferred (body of a GET, a PUT or part)
    ("key", "<u4"),  # string table index of the object URI (s3://bucket/key)
    ("endpoint", "<u4"),  # string table index of the endpoint URL
    ("rank", "<i4"),
    ("status", "<u2"),  # HTTP status; 0 where not reported (flags)
    ("op", "u1"),  # index into OPS
    ("flags", "u1"),
    ("retries", "<u2"),
    ("_pad", "V6"),
])
assert REQ_DTYPE.itemsize == 72

_PREFIX = struct.Struct("<8sII")
_BLOCK = struct.Struct("<4sIQ")
_ALIGN = 64
REQ_FLUSH_ROWS = 4096
FLUSH_INTERVAL_NS = 1_000_000_000


def _descr() -> list:
    return [list(f) for f in REQ_DTYPE.descr]


def log_path(run_dir: str, rank: int, worker_pid: int | None = None) -> str:
    """Where a rank's (or one of its DataLoader workers') request log goes."""
    name = f"rank-{rank:05d}" + (f"-pid-{worker_pid}" if worker_pid is not None else "") + ".reqs"
    return os.path.join(run_dir, "requests", name)


class RequestLog:
    """One process's request rows: buffered in memory, written to its file once attached."""

    def __init__(self, rank: int):
        self.rank = int(rank)
        self.pid = os.getpid()
        self.path = None
        self._fd = -1
        self._lock = threading.Lock()
        self._wall_minus_perf = time.time_ns() - time.perf_counter_ns()
        self._ids: dict = {}
        self._new: list = []  # strings not yet written
        self._buf = np.zeros(REQ_FLUSH_ROWS, REQ_DTYPE)
        self._n = 0
        self._held: list = []  # full buffers from before the file existed
        self._last_flush_ns = time.monotonic_ns()
        self.rows = 0

    def _id(self, s: str) -> int:
        i = self._ids.get(s)
        if i is None:
            i = self._ids[s] = len(self._ids)
            self._new.append(s)
        return i

    def add(self, op, uri, endpoint, t0, t_first, t_end, nbytes, offset, length, status, retries, flags) -> None:
        """One request (perf_counter_ns times; t_first None: not exposed)."""
        with self._lock:
            self._buf[self._n] = (t0 + self._wall_minus_perf, t_end - t0 if t_end is not None else -1,
                                  t_first - t0 if t_first is not None else -1, offset, length, nbytes,
                                  self._id(uri or ""), self._id(endpoint or ""), self.rank, status or 0, OP_CODE[op],
                                  flags, min(int(retries), 65535), b"")
            self._n += 1
            if self._n == REQ_FLUSH_ROWS or (self._fd >= 0 and
                                             time.monotonic_ns() - self._last_flush_ns >= FLUSH_INTERVAL_NS):
                self._flush_locked()

    def attach(self, path: str) -> None:
        """Open the file (never an existing one) and write everything buffered so far."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        meta = {"format": "iogen request log", "version": VERSION, "rank": self.rank, "pid": self.pid,
                "row_bytes": REQ_DTYPE.itemsize, "dtype": _descr(), "ops": list(OPS)}
        text = json.dumps(meta, separators=(",", ":")).encode()
        text += b" " * ((-(_PREFIX.size + len(text))) % _ALIGN)
        with self._lock:
            self._fd, self.path = fd, path
            self._write(_PREFIX.pack(MAGIC, VERSION, len(text)) + text)
            self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._fd < 0:  # no file yet: keep the rows
            if self._n == REQ_FLUSH_ROWS:
                self._held.append(self._buf)
                self._buf, self._n = np.zeros(REQ_FLUSH_ROWS, REQ_DTYPE), 0
            return
        parts = []
        if self._new:
            payload = json.dumps(self._new).encode()
            parts += [_BLOCK.pack(b"STRS", len(self._new), len(payload)), payload]
            self._new = []
        for rows in self._held + [self._buf[:self._n]]:
            if len(rows):
                parts += [_BLOCK.pack(b"RECS", len(rows), rows.nbytes), rows.tobytes()]
                self.rows += len(rows)
        self._held, self._n = [], 0
        if parts:
            self._write(b"".join(parts))
        self._last_flush_ns = time.monotonic_ns()

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while len(view):
            try:
                view = view[os.write(self._fd, view):]
            except OSError as exc:
                from ..common.atomic import full_disk_error, is_full_disk

                if is_full_disk(exc):
                    raise full_disk_error(exc, self.path, len(view), "the request log") from None
                raise

    def close(self) -> None:
        """Flush and close (again: nothing); before attach, the buffered rows are dropped."""
        with self._lock:
            try:
                self._flush_locked()
            finally:
                if self._fd >= 0:
                    os.close(self._fd)
                self._fd = -1


_ACTIVE: RequestLog | None = None
_STATE_LOCK = threading.Lock()


def start(rank: int) -> None:
    """A run with output.request_log begins in this process: its requests are logged from now on."""
    global _ACTIVE
    stop()
    _ACTIVE = RequestLog(rank)


def attach(run_dir: str) -> None:
    """The run folder exists: write this process's log there, and let worker processes find it."""
    if _ACTIVE is None:
        return
    _ACTIVE.attach(log_path(run_dir, _ACTIVE.rank))
    os.environ[ENV] = run_dir


def flush() -> None:
    """Write what is buffered (between phases)."""
    log = current()
    if log is not None:
        log.flush()


def stop() -> None:
    """The run ends: this process's log is flushed and closed; workers started later log nothing."""
    global _ACTIVE
    log, _ACTIVE = _ACTIVE, None
    os.environ.pop(ENV, None)
    if log is not None and log.pid == os.getpid():
        log.close()


def current() -> RequestLog | None:
    """This process's log: the run's (start), or in a DataLoader worker a fresh one of its own (never the
    parent's, inherited by fork, whose rows are the parent's to write)."""
    global _ACTIVE
    log = _ACTIVE
    if log is not None and log.pid == os.getpid():
        return log
    run_dir = os.environ.get(ENV)
    if log is None and not run_dir:
        return None
    with _STATE_LOCK:
        if _ACTIVE is not None and _ACTIVE.pid == os.getpid():
            return _ACTIVE
        if not run_dir:
            _ACTIVE = None
            return None
        import multiprocessing.util

        from ..common.launcher import launcher_rank

        log = RequestLog(launcher_rank())
        log.attach(log_path(run_dir, log.rank, os.getpid()))
        multiprocessing.util.Finalize(log, log.close, exitpriority=100)  # a worker's exit runs these
        _ACTIVE = log
        return log


def ENABLED() -> bool:  # noqa: N802 (read as a flag)
    """Whether this process logs requests (a run's log, or a worker's through IOGEN_REQUEST_LOG)."""
    return _ACTIVE is not None or ENV in os.environ


def record(op, uri, endpoint, t0, t_first, t_end, nbytes=0, offset=-1, length=-1, status=0, retries=0,
           flags=0) -> None:
    """Log one request if this process logs them (one global check when it does not)."""
    log = current()
    if log is not None:
        log.add(op, uri, endpoint, t0, t_first, t_end, nbytes, offset, length, status, retries, flags)


def read_request_log(path: str):
    """(header dict, strings list, rows of REQ_DTYPE) of a request log; anything torn, truncated or not
    this format is a DataError naming the file and the byte offset."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < _PREFIX.size or data[:8] != MAGIC:
        raise DataError(path, "not an iogen request log (bad magic)", offset=0)
    _, version, hbytes = _PREFIX.unpack_from(data)
    if version != VERSION:
        raise DataError(path, f"request log version {version}, this iogen reads version {VERSION}", offset=8)
    try:
        header = json.loads(data[_PREFIX.size:_PREFIX.size + hbytes].decode())
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise DataError(path, "request log header is not valid JSON (truncated?)", offset=_PREFIX.size) from None
    if not isinstance(header, dict) or header.get("dtype") != _descr():
        raise DataError(path, "request log row layout differs from this iogen's", offset=_PREFIX.size)
    pos = _PREFIX.size + hbytes
    strings: list = []
    chunks = []
    while pos < len(data):
        if pos + _BLOCK.size > len(data):
            raise DataError(path, f"request log truncated: {len(data) - pos} byte(s) of a block header", offset=pos)
        tag, count, nbytes = _BLOCK.unpack_from(data, pos)
        body = pos + _BLOCK.size
        if body + nbytes > len(data):
            raise DataError(path, f"request log truncated: a block of {nbytes} bytes has {len(data) - body}",
                            offset=pos)
        if tag == b"STRS":
            try:
                new = json.loads(data[body:body + nbytes].decode())
            except (UnicodeDecodeError, json.JSONDecodeError):
                new = None
            if not isinstance(new, list) or len(new) != count:
                raise DataError(path, "request log string block is corrupt", offset=pos)
            strings += new
        elif tag == b"RECS" and nbytes == count * REQ_DTYPE.itemsize:
            chunks.append(np.frombuffer(data, REQ_DTYPE, count, body))
        else:
            raise DataError(path, f"request log block is corrupt (tag {tag!r}, {count} rows, {nbytes} bytes)",
                            offset=pos)
        pos = body + nbytes
    rows = np.concatenate(chunks) if chunks else np.zeros(0, REQ_DTYPE)
    if len(rows) and (int(rows["key"].max()) >= len(strings) or int(rows["endpoint"].max()) >= len(strings)
                      or int(rows["op"].max()) >= len(OPS)):
        raise DataError(path, "request log rows name strings or operations it does not define", offset=pos)
    header["path"] = path
    return header, strings, rows
