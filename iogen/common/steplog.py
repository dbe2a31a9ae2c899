"""Per-step timing records: one fixed-width row per step per rank, appended during the run.

File layout (all little-endian; docs/metrics.md describes it for other tools):

    bytes 0..7    magic b"IOGSTEPS"
    bytes 8..11   uint32 format version (1)
    bytes 12..15  uint32 header_bytes: length of the JSON header that follows
    16..16+header_bytes   UTF-8 JSON object, space-padded so the rows start 64-byte aligned
    then          rows of STEP_DTYPE (80 bytes each) until the end of the file

The JSON header holds `version`, `rank`, `row_bytes`, `dtype` (numpy's `descr`, as lists),
`wall_start_ns` (`time.time_ns()`) and `mono_start_ns` (`time.monotonic_ns()`) read at the
same instant, so monotonic step times map to wall-clock time as
`wall_ns = t_ns - mono_start_ns + wall_start_ns`.
"""
import json
import os
import struct
import time

import numpy as np

from ..errors import DataError

__all__ = [
    "MAGIC",
    "PHASE_EVAL",
    "PHASE_STAGE",
    "PHASE_TRAIN",
    "STEP_DTYPE",
    "StepLog",
    "read_steplog",
    "wall_offset_ns",
]

MAGIC = b"IOGSTEPS"
VERSION = 1
PHASE_TRAIN = 0
PHASE_EVAL = 1
# One row per rank for data staging (iogen/data/staging.py): epoch 0, step 0, t_request..t_step_end
# the staging window, samples = files and bytes = bytes this rank's node copy wrote (0 elsewhere).
PHASE_STAGE = 2

# The int64 times come after an explicit 3-byte pad so they sit 8-byte aligned (offset 16):
# the rows can then be viewed as plain int64 columns without unaligned access.
STEP_DTYPE = np.dtype(
    [
        ("epoch", "<i4"),
        ("step", "<i4"),
        ("rank", "<i4"),
        ("phase", "u1"),
        ("_pad", "V3"),
        ("t_request", "<i8"),
        ("t_ready", "<i8"),
        ("t_compute_end", "<i8"),
        ("t_step_end", "<i8"),
        ("requested_compute_ns", "<i8"),
        ("samples", "<i8"),
        ("bytes", "<i8"),
        ("checkpoint_ns", "<i8"),
    ]
)
assert STEP_DTYPE.itemsize == 80 and STEP_DTYPE.fields["t_request"][1] == 16

_PREFIX = struct.Struct("<8sII")  # magic, version, header_bytes
_DATA_ALIGN_BYTES = 64
FLUSH_ROWS = 256
FLUSH_INTERVAL_NS = 1_000_000_000


def _dtype_json(dtype):
    """The dtype as JSON-friendly [name, format] pairs (numpy's `descr`)."""
    return [list(field) for field in dtype.descr]


def _header_bytes(rank, wall_start_ns, mono_start_ns):
    """Encode the file header: fixed prefix, then padded JSON, ending 64-byte aligned."""
    meta = {
        "format": "iogen step log",
        "version": VERSION,
        "rank": int(rank),
        "row_bytes": STEP_DTYPE.itemsize,
        "dtype": _dtype_json(STEP_DTYPE),
        "clock": "CLOCK_MONOTONIC",
        "wall_start_ns": int(wall_start_ns),
        "mono_start_ns": int(mono_start_ns),
    }
    text = json.dumps(meta, separators=(",", ":")).encode()
    total = _PREFIX.size + len(text)
    pad = (-total) % _DATA_ALIGN_BYTES
    text += b" " * pad
    return _PREFIX.pack(MAGIC, VERSION, len(text)) + text


class StepLog:
    """Append-only writer of one rank's step rows, buffered in a preallocated numpy array.

    Rows reach the file (one `os.write`) when FLUSH_ROWS rows are buffered, when a row is
    appended at least 1 s after the last flush, on `flush()` and on `close()`. A process crash
    therefore loses at most the rows of the last ~1 s (or 256 rows); what was written before
    stays, and `read_steplog` tolerates a torn final row. Used as a context manager, the log
    is flushed and closed also when the body raises.

    There is deliberately no __del__ flush: a forked loader worker inherits this object, and a
    flush from its finaliser would write the parent's buffered rows twice.
    """

    def __init__(self, path, rank):
        self.path = os.fspath(path)
        self.rank = int(rank)
        # O_EXCL: a run folder is never reused, so an existing log is an error, not appended to.
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        # Read the monotonic clock on both sides of the wall clock and take the midpoint, so the
        # pair describes one instant to within a fraction of a microsecond.
        mono_a = time.monotonic_ns()
        wall_ns = time.time_ns()
        mono_b = time.monotonic_ns()
        self.wall_start_ns = wall_ns
        self.mono_start_ns = (mono_a + mono_b) // 2
        header = _header_bytes(self.rank, wall_ns, self.mono_start_ns)
        self._data_offset = len(header)
        try:
            self._write_all(memoryview(header))
        except BaseException:
            os.close(self._fd)
            self._fd = -1
            raise
        # One buffer for the whole run: append() never allocates (hot path).
        self._buf = np.zeros(FLUSH_ROWS, dtype=STEP_DTYPE)
        self._raw = self._buf.view(np.uint8)
        self._n = 0
        self._last_flush_ns = time.monotonic_ns()
        self.rows_written = 0

    def append(
        self,
        epoch,
        step,
        phase,
        t_request,
        t_ready,
        t_compute_end,
        t_step_end,
        requested_compute_ns,
        samples,
        bytes,
        checkpoint_ns=0,
    ):
        """Record one step (monotonic ns); flushes when 256 rows are buffered or 1 s has passed."""
        n = self._n
        if self._fd < 0:
            raise ValueError(f"step log {self.path} is closed")
        self._buf[n] = (
            epoch,
            step,
            self.rank,
            phase,
            b"",
            t_request,
            t_ready,
            t_compute_end,
            t_step_end,
            requested_compute_ns,
            samples,
            bytes,
            checkpoint_ns,
        )
        self._n = n = n + 1
        if n == FLUSH_ROWS or time.monotonic_ns() - self._last_flush_ns >= FLUSH_INTERVAL_NS:
            self.flush()

    def append_group(self, ranks, epoch, step, phase, t_request, t_ready, t_compute_end, t_step_end,
                     requested_compute_ns, samples, bytes, checkpoint_ns=0):
        """Record one step of several emulated accelerators at once (train.accelerators_per_process): one
        row each, `ranks` their accelerator ids (the rows' rank), the per-accelerator fields arrays of their
        length, the others shared."""
        k = len(ranks)
        if self._fd < 0:
            raise ValueError(f"step log {self.path} is closed")
        if self._n + k > self._buf.size:
            self.flush()
            if k > self._buf.size:
                self._buf = np.zeros(k, dtype=STEP_DTYPE)
                self._raw = self._buf.view(np.uint8)
        rows = self._buf[self._n:self._n + k]
        rows["epoch"], rows["step"], rows["rank"], rows["phase"] = epoch, step, ranks, phase
        rows["t_request"], rows["t_ready"], rows["t_compute_end"] = t_request, t_ready, t_compute_end
        rows["t_step_end"], rows["requested_compute_ns"] = t_step_end, requested_compute_ns
        rows["samples"], rows["bytes"], rows["checkpoint_ns"] = samples, bytes, checkpoint_ns
        self._n += k
        if self._n >= FLUSH_ROWS or time.monotonic_ns() - self._last_flush_ns >= FLUSH_INTERVAL_NS:
            self.flush()

    def flush(self):
        """Write the buffered rows to the file (page cache; no fsync)."""
        n = self._n
        if n and self._fd >= 0:
            self._write_all(memoryview(self._raw[: n * STEP_DTYPE.itemsize]))
            self.rows_written += n
        self._n = 0
        self._last_flush_ns = time.monotonic_ns()

    @property
    def rows_appended(self):
        """Rows appended so far, written or still buffered: a mark for rows_since()."""
        return self.rows_written + self._n

    def rows_since(self, first):
        """The rows appended from row number `first` on: flushes, then reads them back from the file.

        Called between phases (never in the step loop), so a live summary of a phase is computed
        from exactly the rows the final metrics will read.
        """
        self.flush()
        count = max(0, self.rows_written - int(first))
        with open(self.path, "rb") as fh:
            fh.seek(self._data_offset + int(first) * STEP_DTYPE.itemsize)
            return np.fromfile(fh, dtype=STEP_DTYPE, count=count)

    def _write_all(self, view):
        """os.write until every byte is out (a regular file may take a short write)."""
        while len(view):
            try:
                done = os.write(self._fd, view)
            except OSError as exc:
                from .atomic import full_disk_error, is_full_disk

                if is_full_disk(exc):  # name the log and what it needed, not just "[Errno 28]"
                    raise full_disk_error(exc, self.path, len(view), "the step log") from None
                raise
            view = view[done:]

    def close(self):
        """Flush and close; calling it again does nothing."""
        if self._fd < 0:
            return
        try:
            self.flush()
        finally:
            os.close(self._fd)
            self._fd = -1

    @property
    def closed(self):
        """True once close() has run."""
        return self._fd < 0

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False

    def __repr__(self):
        state = "closed" if self.closed else f"{self._n} rows buffered"
        return f"StepLog({self.path!r}, rank={self.rank}, {state})"


def read_steplog(path):
    """Read a step log: (header dict, rows of STEP_DTYPE); a torn final row is dropped and counted.

    The header dict is the file's JSON header plus `path`, `rows` and `truncated_bytes` (bytes of
    a partial last row left by a crash mid-write, 0 for a clean file).
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        prefix = f.read(_PREFIX.size)
        if len(prefix) < _PREFIX.size or prefix[:8] != MAGIC:
            raise DataError(path, "not an iogen step log (bad magic)", offset=0)
        _, version, header_bytes = _PREFIX.unpack(prefix)
        if version != VERSION:
            raise DataError(path, f"step log version {version}, this iogen reads version {VERSION}", offset=8)
        text = f.read(header_bytes)
        if len(text) < header_bytes:
            raise DataError(path, f"step log header truncated ({len(text)} of {header_bytes} bytes)", offset=_PREFIX.size)
        try:
            header = json.loads(text.decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise DataError(path, f"step log header is not valid JSON: {e}", offset=_PREFIX.size) from None
        if not isinstance(header, dict) or header.get("dtype") != _dtype_json(STEP_DTYPE):
            raise DataError(path, "step log row layout differs from this iogen's STEP_DTYPE", offset=_PREFIX.size)
        data_offset = _PREFIX.size + header_bytes
        data_bytes = os.fstat(f.fileno()).st_size - data_offset
        count = data_bytes // STEP_DTYPE.itemsize
        rows = np.fromfile(f, dtype=STEP_DTYPE, count=count)
    if len(rows) != count:
        raise DataError(path, f"step log shrank while being read ({len(rows)} of {count} rows)", offset=data_offset)
    header["path"] = path
    header["rows"] = int(count)
    header["truncated_bytes"] = int(data_bytes - count * STEP_DTYPE.itemsize)
    return header, rows


def wall_offset_ns(header):
    """Add this to a log's monotonic step times to get wall-clock ns (time.time_ns scale)."""
    return int(header["wall_start_ns"]) - int(header["mono_start_ns"])
